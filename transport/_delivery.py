"""Per-stream delivery, as two sans-IO machines: the sending side and the receiving side.

A stream is (sending node, sender name, target name).  The sender numbers its
messages 1, 2, 3, ... per stream, keeps each one until the receiving node
acknowledges it as handled, re-sends what was not acknowledged as received,
and never has more than ``window`` unhandled.  The receiver accepts exactly
the next number of each stream: a lower one is a duplicate, a higher one
follows a loss and waits for the re-send of what it skipped (so loss,
duplication and reordering can neither lose nor reorder a message).  It
refuses a peer that overruns the window it granted, and acknowledges
cumulatively.  When a target moves to another node (a takeover) its stream
starts again at 1 there: the unhandled messages are renumbered and re-sent.

Neither machine reads a clock or touches a socket: the node's I/O thread
passes the time in and moves the bytes they return.  Tests drive them on a
virtual clock (tests/transport/test_delivery.py), Hypothesis included.

Who touches what:

* ``OutStream``: ``append`` from the one thread that sends as its sender;
  ``on_ack``, ``due``, ``rehome`` from the I/O thread.  ``sent`` and
  ``handled`` each have one writer, so ``in_flight`` is safe to read from
  either.  Numbering (``seq``, ``unacked``) changes under ``lock``: the
  sender holds it from taking a number to appending the record, ``rehome``
  while it renumbers.  ``cond`` is where the sending thread waits for credit;
  the machine itself never waits.
* ``InStreams``: the I/O thread only.
"""

from __future__ import annotations

import collections
import enum
import threading
from collections.abc import Callable


class OutStream:
    """Send state of one (sender, remote target) stream.

    ``unacked`` holds the encoded records not yet acknowledged as handled, in
    order; since a stream's numbers are consecutive, the record at index ``i``
    is number ``first + i`` and no number is stored beside it (a tuple per
    message was a tenth of a send in a profile of ``bench bus``).
    """

    __slots__ = ("target", "node_id", "window", "seq", "first", "sent", "handled", "received", "unacked", "lock",
                 "cond", "waiting", "progress_at", "closed", "answered")

    def __init__(self, target: str, node_id: str, now: float, window: int) -> None:
        self.target = target
        self.node_id = node_id  # the node hosting the target now
        self.window = window  # the smaller of the sender's and the one the receiver grants
        self.seq = 0  # the last number taken
        self.first = 1  # the number of unacked[0] (of the next record, while none waits)
        self.sent = 0  # messages appended (sending thread only)
        self.handled = 0  # messages acknowledged as handled (I/O thread only)
        self.received = 0  # highest seq the receiver has acknowledged as received
        self.unacked: list[bytes] = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(threading.Lock())
        self.waiting = False
        self.progress_at = now
        #: Set (under ``lock``) once the target is down: a sender that appended after looking the
        #: stream up sees it and fails, or its record was in ``unacked`` when the failure was reported.
        self.closed = False
        #: (node, seq): the sending thread's last ask answered by that node.  A reply proves the ask and
        #: everything before it in the stream handled, before their ack comes (see Node.ask_and_wait).
        self.answered = ("", 0)

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged as handled."""
        return self.sent - self.handled

    def append(self, seq: int, record: bytes) -> None:
        """Keep ``record``, numbered ``seq`` (``self.seq + 1``), until it is acknowledged as handled."""
        self.seq = seq
        self.unacked.append(record)
        self.sent += 1

    def on_ack(self, received: int, handled: int, now: float) -> int:
        """An ack for this stream; returns how many messages it released (credit returned).

        No lock: a sender only appends, and what is released is counted from
        ``first``, which only this thread moves, so a record appended meanwhile
        is never taken for an acknowledged one."""
        popped = min(handled - self.first + 1, len(self.unacked))
        if received > self.received:
            self.received = received
            self.progress_at = now
        if popped > 0:
            del self.unacked[:popped]
            self.first += popped
            self.handled += popped
            self.progress_at = now
            return popped
        return 0

    def due(self, now: float, after: float) -> list[bytes]:
        """What to send again: after ``after`` s without progress, every record not acknowledged as received."""
        if not self.unacked or now - self.progress_at <= after:
            return []
        self.progress_at = now
        # Under the lock: senders append while the I/O thread reads (at 3,000 simulated workers, an
        # unlocked scan raced a sender and took the I/O thread down).
        with self.lock:
            return self.unacked[max(0, self.received + 1 - self.first):]

    def rehome(self, node_id: str, renumber: Callable[[bytes, int], bytes]) -> list[bytes]:
        """The target moved to ``node_id`` (a takeover): a new stream there, starting at 1, carries
        everything unhandled; ``renumber(record, seq)`` re-encodes one record with a new number."""
        with self.lock:
            self.unacked = [renumber(record, seq) for seq, record in enumerate(self.unacked, 1)]
            self.seq = len(self.unacked)
            self.first = 1
            self.node_id = node_id
            self.received = 0
            return list(self.unacked)


class Verdict(enum.Enum):
    """What the receiver makes of one arriving message."""

    ACCEPT = "accept"  # the next of its stream: deliver it
    DUPLICATE = "duplicate"  # at or below the last seq accepted in its stream: a re-send, dropped
    GAP = "gap"  # past the next: one before it was lost; dropped until the re-send fills the gap
    OVERRUN = "overrun"  # more than the window unhandled in its stream: the peer broke the protocol
    TOO_MANY = "too many streams"  # a new stream past the bound per source node: the peer broke it too


#: Streams one source node may open at a receiver.  A stream's state lives until the node leaves
#: (dropping an idle one would strand its next message as a gap), so this bounds a peer's memory.
MAX_STREAMS_PER_NODE = 65_536


class _InStream:
    __slots__ = ("received", "handled")

    def __init__(self) -> None:
        self.received = 0  # highest seq accepted (numbers are consecutive, so also how many)
        self.handled = 0  # highest seq acknowledged as handled: received - handled are pending


class InStreams:
    """Receive state of every stream a node receives, keyed (source node, sender, target)."""

    __slots__ = ("window", "max_streams", "table", "_per_node", "gaps")

    def __init__(self, window: int, max_streams: int = MAX_STREAMS_PER_NODE) -> None:
        self.window = window
        self.max_streams = max_streams  # per source node
        self.table: dict[tuple[str, str, str], _InStream] = {}
        self._per_node: collections.Counter[str] = collections.Counter()
        #: Messages that came past the next number of their stream (one before them was lost or is
        #: still on its way): dropped, to be taken when re-sent.
        self.gaps = 0

    def accept(self, key: tuple[str, str, str], seq: int) -> Verdict:
        stream = self.table.get(key)
        if stream is None:
            source = key[0]
            if self._per_node[source] >= self.max_streams:
                return Verdict.TOO_MANY
            self._per_node[source] += 1
            stream = self.table[key] = _InStream()
        if seq != stream.received + 1:
            if seq <= stream.received:
                return Verdict.DUPLICATE
            self.gaps += 1
            return Verdict.GAP
        if seq - stream.handled > self.window:
            return Verdict.OVERRUN
        stream.received = seq
        return Verdict.ACCEPT

    def accept_run(self, key: tuple[str, str, str], first: int, n: int) -> bool:
        """A run of ``n`` messages numbered ``first``, ``first + 1``, ... on an open stream: all taken
        when they are the next numbers and within the window (the common case: the node hands the
        run over whole), else nothing changes and each goes through ``accept``."""
        stream = self.table.get(key)
        if stream is None or first != stream.received + 1 or first + n - 1 - stream.handled > self.window:
            return False
        stream.received = first + n - 1
        return True

    def handled_of(self, key: tuple[str, str, str]) -> int:
        """The last seq of ``key`` acknowledged as handled: what a duplicate is answered with (its
        sender re-sends because an ack was lost, and only a new ack stops it)."""
        stream = self.table.get(key)
        return stream.handled if stream is not None else 0

    def acks(self, handled: dict[tuple[str, str, str], int]) -> dict[str, list[tuple[str, str, int, int]]]:
        """``{stream: last handled seq}`` -> the ack entries owed to each source node,
        ``(sender, target, received, handled)``; the handled messages stop counting against the window."""
        by_node: dict[str, list[tuple[str, str, int, int]]] = collections.defaultdict(list)
        streams = self.table
        for key, seq in handled.items():
            source, sender, target = key
            stream = streams.get(key)
            received = seq
            if stream is not None:
                received = max(stream.received, seq)
                if seq > stream.handled:
                    stream.handled = seq
            by_node[source].append((sender, target, received, seq))
        return by_node

    def forget(self, node_id: str) -> None:
        """Node ``node_id`` left (or was disconnected): its streams are gone with it."""
        for key in [k for k in self.table if k[0] == node_id]:
            del self.table[key]
        self._per_node.pop(node_id, None)

    def forget_target(self, name: str) -> None:
        """Actor ``name`` went down: a later actor of that name is a new target, its streams new too."""
        for key in [k for k in self.table if k[2] == name]:
            del self.table[key]
            self._per_node[key[0]] -= 1

    def __len__(self) -> int:
        return len(self.table)
