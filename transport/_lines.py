"""Lines: a user thread's own socket to a peer node, for the asks it waits on.

Through the I/O thread a blocking ask crosses two thread hand-offs on the asking side alone:
the calling thread queues the request for the I/O thread and wakes it, and the
I/O thread wakes the caller when the reply comes (decision 0004 measured each
wake-up at tens of microseconds on a 2-core VM).  A line removes both: the
calling thread owns a DEALER connected to the target's node, sends the request
on it and waits on it for the reply.  One socket, one owning thread, as the
zguide asks; the I/O thread never touches a line.

What travels on a line is what would travel on the node's own link: the same
record, numbered in the same stream, kept for re-sending until the receiving
node acknowledges it (the acknowledgement comes over the node's link).  So a
line adds a path, not a protocol: a request the line loses is re-sent by the
I/O thread, and its reply then reaches the asker through the node.

The receiving node knows a line by its identity, ``<node id><LINE_MARK><n>``:
it admits the line on a valid hello from a node it already knows, takes its
records as that node's, and sends each reply back on the connection its
request came in on.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Container

import zmq

#: Separates the node id from the line number in a line's identity (a node id never holds it).
LINE_MARK = "\x1f"
#: Lines one node may open at a receiver (a peer's memory bound).
MAX_LINES_PER_NODE = 1024


def node_of_line(identity: str) -> str | None:
    """The node a line identity speaks for, or None for a node's own connection."""
    node, mark, _ = identity.partition(LINE_MARK)
    return node if mark else None


class Line:
    """One thread's DEALER to one peer node.  ``lock`` is held while the socket is in use."""

    __slots__ = ("node_id", "socket", "thread", "lock", "closed", "refused")

    def __init__(self, node_id: str, sock: zmq.Socket) -> None:
        self.node_id = node_id
        self.socket = sock
        self.thread = threading.current_thread()
        self.lock = threading.Lock()
        self.closed = False
        self.refused = False  # the peer refused it: asks take the I/O thread's path

    def close(self) -> None:
        """Close the socket; the caller holds ``lock`` or the owning thread is gone."""
        if not self.closed:
            self.closed = True
            self.socket.close(linger=0)


class Lines:
    """The lines of one node, per thread and peer node, closed with the node.

    ``connect(node_id, identity)`` makes the socket of a new line (connected,
    its hello sent); it runs in the thread that will own the line.
    """

    def __init__(self, own_node_id: str, connect: Callable[[str, str], zmq.Socket]) -> None:
        self._own = own_node_id
        self._connect = connect
        self._local = threading.local()
        self._all: list[Line] = []
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._closed = False

    def get(self, node_id: str) -> Line | None:
        """The calling thread's line to ``node_id``, made on first use; None once closed or refused."""
        mine: dict[str, Line] | None = getattr(self._local, "lines", None)
        if mine is None:
            mine = self._local.lines = {}
        line = mine.get(node_id)
        if line is not None:
            return None if line.closed or line.refused else line
        with self._lock:
            if self._closed:
                return None
            self._prune()
            sock = self._connect(node_id, f"{self._own}{LINE_MARK}{next(self._numbers)}")
            line = mine[node_id] = Line(node_id, sock)
            self._all.append(line)
        return line

    def _prune(self) -> None:
        """Close the lines of threads that ended (their owner can no longer use them)."""
        live = []
        for line in self._all:
            if line.thread.is_alive() and not line.closed:
                live.append(line)
            else:
                line.close()
        self._all = live

    def drop(self, node_id: str) -> None:
        """``node_id`` left: its lines close as their owners next use them (owners close their own)."""
        with self._lock:
            for line in self._all:
                if line.node_id == node_id:
                    line.refused = True

    def close(self) -> None:
        """Close every line.  Asks must have failed first: an owner waiting on its line lets go of
        its lock within one poll slice of seeing its ask settled."""
        with self._lock:
            self._closed = True
            lines, self._all = self._all, []
        for line in lines:
            with line.lock:
                line.close()


class _Held:
    __slots__ = ("node", "since", "messages", "size")

    def __init__(self, node: str, since: float, hello: list[bytes]) -> None:
        self.node = node
        self.since = since
        self.messages = [hello]
        self.size = sum(map(len, hello))


class HeldLines:
    """Lines a member holds because their hello named a node it does not know yet.

    A member learns of a new node from the root's update, and the new node's line
    reaches it another way, so the line may come first (``actorwire status`` joins
    and asks every node at once).  Refused, the line's ask waited for the asker's
    re-send through the node.  Held, the line's messages (its hello first) wait in
    order until the update names the node (:meth:`release`) or ``patience`` passes
    (:meth:`expired`).  At most ``limit`` lines wait, each with at most ``depth``
    messages, all of them together at most ``max_bytes``: what a peer can make this
    node keep is bounded.  No I/O, no clock reads: the node passes ``now``.
    """

    def __init__(self, limit: int = 64, depth: int = 64, max_bytes: int = 16 << 20) -> None:
        self.limit = limit
        self.depth = depth
        self.max_bytes = max_bytes
        self.size = 0  # bytes held, every line's together
        self._held: dict[str, _Held] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def holds(self, identity: str) -> bool:
        return identity in self._held

    def hold(self, identity: str, node: str, now: float, hello: list[bytes]) -> bool:
        """Hold the line ``identity`` of ``node``, its ``hello`` first; False (nothing held) if full."""
        held = _Held(node, now, hello)
        if len(self._held) >= self.limit or self.size + held.size > self.max_bytes:
            return False
        self._held[identity] = held
        self.size += held.size
        return True

    def add(self, identity: str, frames: list[bytes]) -> bool:
        """One more message on a held line; False, and the line is no longer held, over ``depth``
        or over ``max_bytes``."""
        held = self._held[identity]
        size = sum(map(len, frames))
        if len(held.messages) >= self.depth or self.size + size > self.max_bytes:
            self._forget(identity)
            return False
        held.messages.append(frames)
        held.size += size
        self.size += size
        return True

    def release(self, known: Container[str]) -> list[tuple[str, list[list[bytes]]]]:
        """The lines whose node is now ``known``, each with its messages in order, no longer held."""
        out = [(identity, held.messages) for identity, held in self._held.items() if held.node in known]
        for identity, _ in out:
            self._forget(identity)
        return out

    def expired(self, now: float, patience: float) -> list[tuple[str, str]]:
        """``(identity, node)`` of each line held longer than ``patience``, no longer held."""
        out = [(identity, held.node) for identity, held in self._held.items() if now - held.since > patience]
        for identity, _ in out:
            self._forget(identity)
        return out

    def drop(self, node: str) -> None:
        """Forget the lines of ``node`` (it left)."""
        for identity in [i for i, held in self._held.items() if held.node == node]:
            self._forget(identity)

    def _forget(self, identity: str) -> None:
        self.size -= self._held.pop(identity).size
