"""The any-thread side of a node: send, ask, reply and the acks owed for what was handled.

Any thread calls these (one thread per sender name); none touches a socket.  A tell to a name in
this process is handed to the target's mailbox at once; one to another process is numbered in its
stream (:class:`OutStream`, under the stream's lock), encoded, kept until acknowledged and handed to
the I/O thread through the :class:`Outbox`, which wakes it only when it sleeps.  A blocking ask from
a user thread to another process goes out on the thread's own line (:mod:`.._lines`) and waits
there.  Asks are opened in the node's :class:`Asks` table before the request leaves; replies settle
them on whatever thread they arrive.

What the I/O thread does with what is handed over (shipping, re-homing a stream, asking the root)
stays with the driver (``transport/_node.py``), as do the decisions that need its state: ``resolve``
settles a reply to one of this node's asks, ``send_reply`` ships a reply from the I/O thread at
once, ``answerer`` names the node whose reply settles an ask, ``refuse`` counts and logs what a peer
sent that is refused.  The state shared with the I/O thread (the view's routes, the streams, the
outbox, the asks) is read here under the GIL, as dict reads; what is written here (sequence
numbers, the streams' records) is written under the stream's lock.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from actorwire.messages import PROTOCOL_VERSION, Codec, Envelope, Message
from actorwire.messages.kinds import DownReason, ErrorReply
from actorwire.messages.runtime import Refused
from actorwire.transport._asks import ROOT, Asks, PendingAsk
from actorwire.transport._config import RuntimeConfig
from actorwire.transport._delivery import OutStream
from actorwire.transport._errors import (
    ActorDead,
    BackpressureTimeout,
    InvalidArgument,
    JoinRefused,
    RemoteError,
    SystemClosed,
    UnknownActor,
    WouldBlock,
    WrongType,
)
from actorwire.transport._lines import Line, Lines
from actorwire.transport._membership import View
from actorwire.transport.node._line_gate import LineGate
from actorwire.transport.node._outbound import Outbound
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._sockets import recv_frames

#: deliver(envelope, message, source, timeout) -> accepted.  ``source`` is the
#: sending node's id, or None for a sender in this process; ``timeout`` is how
#: long a local sender may wait for room (None: the I/O thread delivering a
#: remote message, which must never wait: remote senders are bounded by credit).
Deliver = Callable[[Envelope, Message, "str | None", "float | None"], bool]
#: on_reply(envelope, message) or on_failure(exception)
ReplyCallback = Callable[[Envelope, Message], None]
FailureCallback = Callable[[int, Exception], None]

_NOBLOCK = int(zmq.NOBLOCK)  # a plain int: pyzmq's enum arithmetic showed up in profiles
_monotonic_ns, _time_ns = time.monotonic_ns, time.time_ns  # module globals: one lookup fewer per send


def check_timeout(timeout: float, what: str, *, zero: bool = False) -> float:
    """``timeout`` if it is a finite number of seconds above 0 (or 0 itself, with ``zero``)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise WrongType(f"{what} must be a number of seconds, got {type(timeout).__name__}")
    if not (timeout >= 0 if zero else timeout > 0) or timeout == math.inf:
        least = "0 or more" if zero else "more than 0"
        raise InvalidArgument(f"{what} must be a finite number of seconds, {least}; got {timeout!r}")
    return timeout


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """An encoded reply for ``node_id``, sent back on the connection its request came in on."""

    node_id: str
    record: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class RootRequest:
    correlation_id: int
    message: Message


@dataclasses.dataclass(frozen=True, slots=True)
class Rehome:
    sender: str
    target: str
    node_id: str


class BlockingReply:
    """The callbacks of one ask, for a thread that waits for the outcome."""

    __slots__ = ("_done", "_box")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._box: list[Any] = []

    def on_reply(self, envelope: Envelope, message: Message) -> None:
        self._box.append(message)
        self._done.set()

    def on_failure(self, correlation_id: int, error: Exception) -> None:
        self._box.append(error)
        self._done.set()

    def wait(self) -> Message:
        """The reply, or the failure raised; the node runs one callback by the deadline at the latest."""
        self._done.wait()
        result = self._box[0]
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[no-any-return]


class LineWaiter:
    """The outcome of one ask waited on a line: the thread looks at ``done`` between reads of its
    line, so no Event is needed (making one cost 3 us an ask)."""

    __slots__ = ("done", "_box")

    def __init__(self) -> None:
        self.done = False
        self._box: list[Any] = []

    def on_reply(self, envelope: Envelope, message: Message) -> None:
        self._box.append(message)
        self.done = True

    def on_failure(self, correlation_id: int, error: Exception) -> None:
        self._box.append(error)
        self.done = True

    def outcome(self) -> Message:
        """The reply, or the failure raised; call only once ``done``."""
        result = self._box[0]
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[no-any-return]


class Outgoing:
    """The send, ask and reply paths of one node, for any thread (see the module doc)."""

    def __init__(self, node_id: str, config: RuntimeConfig, codec: Codec, view: View, local: dict[str, Deliver],
                 outbound: Outbound, outbox: Outbox, asks: Asks, lines: Lines, line_gate: LineGate, *,
                 changed: threading.Condition, log: Any,
                 resolve: Callable[[Envelope, Message, str | None], None],
                 send_reply: Callable[[Reply], None],
                 answerer: Callable[[PendingAsk], str | None],
                 refuse: Callable[[str, str], None]) -> None:
        self.node_id = node_id
        self.config = config
        self._codec = codec
        self._encode_unchecked = codec.encode_unchecked
        self._log = log
        # The view's tables, read on every send (written by the I/O thread; dict reads are atomic).
        self._routes = view.routes  # actor name -> node_id
        self._gone = view.gone
        self._nodes = view.nodes
        self._local = local
        self._outbound = outbound
        self._out_streams = outbound.streams
        self._outbox = outbox
        self._asks = asks
        self._lines = lines
        self._line_gate = line_gate
        #: Notified by the I/O thread when what a caller may wait for changed (see ``wait_until``).
        self._changed = changed
        self._resolve = resolve
        self._send_reply = send_reply
        self._answerer = answerer
        self._refuse = refuse
        self._seq: dict[str, int] = {}  # the number of each sender's last message, for recorders
        self._local_seq: collections.defaultdict[str, int] = collections.defaultdict(int)
        self._corr = itertools.count(1)
        self.closing = False  # set by the node's close(): every send is refused from then on
        self.io_ident = -1  # the I/O thread's ident, once it runs: it never blocks here

    def lookup(self, name: str) -> str:
        """The node hosting ``name``; raises ``UnknownActor`` or ``ActorDead``."""
        node_id = self._routes.get(name)
        if node_id is not None:
            return node_id
        if name in self._local:
            return self.node_id
        gone = self._gone.get(name)
        if gone is not None:
            raise ActorDead(name, gone[0], gone[1])
        raise UnknownActor(name, self._routes)

    def last_seq(self, sender: str) -> int:
        """The sequence number of the last message ``sender`` sent (0 before its first)."""
        return self._seq.get(sender, 0)

    def wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait (any thread but the I/O thread) until ``done()``, re-checked each time the I/O thread
        says something changed; False at ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def next_seq(self, sender: str) -> int:
        """A number for a message that is not part of a remote stream (a local tell, a reply)."""
        seq = self._local_seq[sender] + 1
        self._local_seq[sender] = seq
        return seq

    def send(self, sender: str, target: str, message: Message, **options: Any) -> int:
        """Send ``message``; returns its sequence number (options: see :meth:`send_record`).

        See the module doc for the guarantees.
        """
        return self.send_record(sender, target, message, **options)[0]

    def send_record(
        self,
        sender: str,
        target: str,
        message: Message,
        correlation_id: int = 0,
        timeout: float | None = None,
        block: bool = True,
        trace_id: str | None = None,
        wall_ns: int = 0,
    ) -> tuple[int, bytes | Envelope]:
        """:meth:`send`, also returning what was sent: the encoded ``[envelope, body]``
        record for a remote target, the :class:`Envelope` for a local one (recorders
        log it without encoding the message a second time).  The arguments may be given
        by position: a context's tell does, keywords cost it 0.1 us in a profile.
        ``wall_ns`` stamps the envelope with a wall-clock time the caller read (a recorder
        that logs the send at that time), instead of reading the clock here."""
        if self.closing:
            raise SystemClosed("the actor system is closing")
        if not isinstance(message, Message):  # before the split: a local target is handed the object itself
            raise WrongType(f"expected an actorwire message, got {type(message).__name__}")
        if timeout is not None:
            check_timeout(timeout, "a send's timeout", zero=True)
        node_id = self._routes.get(target) or self.lookup(target)
        if node_id == self.node_id:
            wait = self.config.scaled(self.config.send_timeout if timeout is None else timeout)
            deliver = self._local.get(target)
            if deliver is None:
                raise ActorDead(target, DownReason.EXITED, "it stopped")
            if block and threading.get_ident() == self.io_ident:
                block = False  # a handler on the I/O thread (Actor.never_blocks) must never wait
            seq = self._seq[sender] = self._local_seq[sender] = self._local_seq[sender] + 1
            envelope = Envelope(
                sender=sender, target=target, seq=seq, correlation_id=correlation_id,
                mono_ns=time.monotonic_ns(), wall_ns=wall_ns or time.time_ns(), trace_id=trace_id,
            )
            if not deliver(envelope, message, None, wait if block else 0.0):
                if not block:
                    raise WouldBlock(f"the mailbox of {target!r} is full")
                raise BackpressureTimeout(target, type(message).wire_tag(), wait, -1)
            return seq, envelope
        pair = self._out_streams.get((sender, target))
        if pair is None or pair.node_id != node_id:
            pair = self.pair(sender, target, node_id)
        if pair.sent - pair.handled >= pair.window:
            if block and threading.get_ident() == self.io_ident:
                block = False  # the I/O thread returns the credit it would wait for: never wait there
            if not block:
                raise WouldBlock(f"{target!r} has {pair.window} unhandled messages from {sender!r}")
            wait = self.config.scaled(self.config.send_timeout if timeout is None else timeout)
            self._wait_credit(pair, target, type(message).wire_tag(), wait)
        # Numbering and queueing in one step: a rehome renumbers under the same lock.  Explicit
        # acquire/release (profile of bench bus: `with pair.lock` was 6% of the sending process,
        # 0.19 us a send on this VM against 0.10 us for acquire/try/release).
        lock, outbox = pair.lock, self._outbox
        lock.acquire()
        try:
            seq = pair.seq + 1
            # Codec.encode_record_fields, inline (its bytes; a test pins them): the call was 0.15 us
            # of a send in a profile of bench bus.
            record = self._encode_unchecked(((PROTOCOL_VERSION, sender, target, seq, correlation_id, False,
                                              _monotonic_ns(), wall_ns or _time_ns(), trace_id), message))
            pair.append(seq, record)
            outbox.add(pair.node_id, record)
        finally:
            lock.release()
        self._seq[sender] = seq
        outbox.nudge()
        if pair.closed:
            # The target went down between the lookup and the append; the
            # failure report already ran, so this message must fail loudly.
            self.lookup(target)
            raise ActorDead(target, DownReason.DEAD, "it went down while the message was sent")
        return seq, record

    def ask(
        self,
        sender: str,
        target: str,
        message: Message,
        *,
        timeout: float | None,
        on_reply: ReplyCallback,
        on_failure: FailureCallback,
        trace_id: str | None = None,
    ) -> int:
        """Send a request; exactly one of the callbacks runs later (on some runtime thread)."""
        if not isinstance(message, Message):
            raise WrongType(f"expected an actorwire message, got {type(message).__name__}")
        kind = type(message).wire_tag()
        timeout = self.config.ask_timeout if timeout is None else check_timeout(timeout, "an ask's timeout")
        corr = next(self._corr)
        pending = PendingAsk(corr, target, kind, timeout,
                             time.monotonic() + self.config.scaled(timeout), on_reply, on_failure)
        self._open_ask(pending)
        try:
            self.send(sender, target, message, correlation_id=corr, trace_id=trace_id)
        except BaseException:
            self._asks.cancel(corr)
            raise
        return corr

    def ask_and_wait(self, sender: str, target: str, message: Message, timeout: float | None) -> Message:
        """An ask from a user thread that blocks for the outcome: the reply, or the failure raised.

        When the target is in another process the request goes out on the calling thread's own line
        to that node and the thread waits on the line (see :mod:`._lines`): no hand-off to the I/O
        thread and back.  The request stays in its stream: it takes the line only when everything
        the thread sent that target before has been handled (acknowledged, or answered), so it can
        overtake nothing still on the way over the node's link.
        """
        if self.closing:
            raise SystemClosed("the actor system is closing")
        if not isinstance(message, Message):
            raise WrongType(f"expected an actorwire message, got {type(message).__name__}")
        if timeout is not None:
            check_timeout(timeout, "an ask's timeout")
        node_id = self._routes.get(target) or self.lookup(target)
        line: Line | None = None
        pair: OutStream | None = None
        if node_id != self.node_id and threading.get_ident() != self.io_ident:
            pair = self._out_streams.get((sender, target))
            if pair is None or pair.node_id != node_id:
                pair = self.pair(sender, target, node_id)
            answered_node, answered = pair.answered
            done = max(pair.first - 1, answered if answered_node == pair.node_id else 0)
            if pair.seq <= done and pair.sent - pair.handled < pair.window:
                line = self._lines.get(node_id)
        if line is None or pair is None:
            blocking = BlockingReply()
            self.ask(sender, target, message, timeout=timeout, on_reply=blocking.on_reply,
                     on_failure=blocking.on_failure)
            return blocking.wait()
        waiter = LineWaiter()
        timeout = self.config.ask_timeout if timeout is None else timeout
        corr = next(self._corr)
        pending = PendingAsk(corr, target, type(message).wire_tag(), timeout,
                             time.monotonic() + self.config.scaled(timeout), waiter.on_reply, waiter.on_failure)
        self._open_ask(pending)
        with line.lock:
            if line.closed:
                self._asks.cancel(corr)
                raise SystemClosed("the actor system is closing")
            lock = pair.lock
            lock.acquire()
            try:
                seq = pair.seq + 1
                record = self._codec.encode_record_fields(
                    sender, target, seq, corr, False, time.monotonic_ns(), time.time_ns(), None, message)
                pair.append(seq, record)  # re-sent by the I/O thread if the line loses it
            finally:
                lock.release()
            self._seq[sender] = seq
            try:
                line.socket.send(self._codec.join_records([record]), _NOBLOCK)
            except zmq.Again:  # the peer refused the line: the I/O thread re-sends the ask, and its reply
                line.refused = True  # settles it through the node (later asks go that way at once)
            reply = self._await_line(line, pending, waiter)
        pair.answered = (node_id, seq)
        return reply

    def _await_line(self, line: Line, pending: PendingAsk, waiter: LineWaiter) -> Message:
        """Wait on ``line`` for the reply to ``pending``; the I/O thread settles every other outcome
        (a deadline, the target's death, the system closing, a reply that came the node's way)."""
        sock, corr = line.socket, pending.correlation_id
        while True:
            if waiter.done:
                return waiter.outcome()
            try:
                frames = recv_frames(sock, 0)  # blocks for at most the line's receive timeout
            except zmq.Again:
                continue
            pairs, errors = self._codec.decode_batch(frames[0]) if len(frames) == 1 else ([], [])
            if errors or len(frames) != 1:
                self._log.warning("dropped an undecodable message on a line", peer=line.node_id,
                                  size=sum(len(f) for f in frames))
            for envelope, message in pairs:
                if isinstance(message, Refused):
                    line.refused = True  # the peer will not take this line: later asks go the node's way
                    self._log.warning("a peer refused a line; its asks go through the node",
                                      peer=line.node_id, reason=message.reason)
                    continue
                if not envelope.is_reply or envelope.correlation_id != corr:
                    continue  # the late reply to an ask that already failed
                if self._answerer(pending) != line.node_id:
                    self._refuse(line.node_id, f"a reply to an ask it was not sent (correlation id {corr})")
                    continue
                if not self._asks.settle(pending):
                    return waiter.outcome()  # settled meanwhile (the deadline): that outcome stands
                if isinstance(message, ErrorReply):
                    raise RemoteError(pending.target, message.code, message.message)
                return message

    def reply(self, sender: str, request: Envelope, source: str | None, message: Message) -> None:
        """Answer the ask ``request`` (received from node ``source``, None when local)."""
        if not isinstance(message, Message):
            raise WrongType(f"expected an actorwire message, got {type(message).__name__}")
        seq = self.next_seq(sender)
        if source is None:
            self._resolve(Envelope(sender=sender, target=request.sender, seq=seq,
                                   correlation_id=request.correlation_id, is_reply=True,
                                   mono_ns=time.monotonic_ns(), wall_ns=time.time_ns(),
                                   trace_id=request.trace_id), message, None)
            return
        via = self._line_gate.reply_route(source, request.correlation_id)
        reply = Reply(via, self._codec.encode_record_fields(
            sender, request.sender, seq, request.correlation_id, True, time.monotonic_ns(), time.time_ns(),
            request.trace_id, message))
        if threading.get_ident() == self.io_ident:
            self._send_reply(reply)  # a handler on the I/O thread: the reply leaves now, not at the next turn
            return
        self._outbox.post(reply)

    def handled_many(self, entries: dict[tuple[str, str, str], int], count: int) -> None:
        """Bulk :meth:`handled`: ``{(source, sender, target): last handled seq}`` for ``count`` messages."""
        self._outbox.handled_many(entries, count)

    def handled(self, source: str | None, envelope: Envelope) -> None:
        """The target's handler finished ``envelope``; credit goes back to a remote sender."""
        if source is not None:
            self._outbox.handled((source, envelope.sender, envelope.target), envelope.seq)

    # -- sending helpers ------------------------------------------------

    def pair(self, sender: str, target: str, node_id: str) -> OutStream:
        pair = self._out_streams.get((sender, target))
        if pair is None:
            info = self._nodes.get(node_id)
            pair = self._outbound.open(sender, target, node_id, time.monotonic(), info.window if info else 0)
        elif pair.node_id != node_id:
            self._command(Rehome(sender, target, node_id))
            self.wait_until(lambda: pair.node_id == node_id, self.config.scaled(5.0))
        return pair

    def _wait_credit(self, pair: OutStream, target: str, kind: str, wait: float) -> None:
        deadline = time.monotonic() + wait
        with pair.cond:
            pair.waiting = True
            try:
                while pair.sent - pair.handled >= pair.window:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise BackpressureTimeout(target, kind, wait, pair.sent - pair.handled)
                    pair.cond.wait(min(left, 0.1))
                    if self.closing:
                        raise SystemClosed("the actor system is closing")
                    gone = self._gone.get(target)
                    if gone is not None and target not in self._routes:
                        raise ActorDead(target, gone[0], gone[1])
            finally:
                pair.waiting = False

    def _open_ask(self, pending: PendingAsk) -> None:
        # Before the request leaves: once it is out the reply may come at any moment.
        self._asks.open(pending)
        # Wake the I/O thread only if it would sleep past this deadline: an
        # ask with the default 30 s deadline costs no wake-up at all.
        self._outbox.before(pending.deadline)

    def _command(self, cmd: RootRequest | Rehome) -> None:
        self._outbox.command(cmd)

    def request_root(self, message: Message, timeout: float) -> Message:
        """Node-level request to the root, waiting for its reply."""
        waiter = BlockingReply()
        corr = next(self._corr)
        pending = PendingAsk(corr, ROOT, type(message).wire_tag(), timeout,
                             time.monotonic() + self.config.scaled(timeout), waiter.on_reply, waiter.on_failure)
        self._open_ask(pending)
        self._command(RootRequest(corr, message))
        answer = waiter.wait()
        if isinstance(answer, (Refused, ErrorReply)):
            text = answer.reason if isinstance(answer, Refused) else answer.message
            raise JoinRefused(text)
        return answer
