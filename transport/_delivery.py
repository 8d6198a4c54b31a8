"""Per-stream delivery, as two sans-IO machines: the sending side and the receiving side.

A stream is (sending node, sender name, target name).  The sender numbers its
messages with strictly increasing ``seq``s, keeps each one until the receiving
node acknowledges it as handled, re-sends what was not acknowledged as
received, and never has more than ``window`` unhandled.  The receiver accepts
each seq once, in order of arrival above the last one accepted, refuses a
peer that overruns the window it granted, and acknowledges cumulatively.

Neither machine reads a clock or touches a socket: the node's I/O thread
passes the time in and moves the bytes they return.  Tests drive them on a
virtual clock (tests/transport/test_delivery.py), Hypothesis included.

Who touches what:

* ``OutStream``: ``append`` from the one thread that sends as its sender;
  ``on_ack``, ``due``, ``rehome`` from the I/O thread.  ``sent`` and
  ``handled`` each have one writer, so ``in_flight`` is safe to read from
  either.  ``cond`` is where the sending thread waits for credit; the machine
  itself never waits.
* ``InStreams``: the I/O thread only.
"""

from __future__ import annotations

import collections
import enum
import threading


class OutStream:
    """Send state of one (sender, remote target) stream."""

    __slots__ = ("target", "node_id", "window", "sent", "handled", "received", "unacked", "cond",
                 "waiting", "progress_at")

    def __init__(self, target: str, node_id: str, now: float, window: int) -> None:
        self.target = target
        self.node_id = node_id  # the node hosting the target now
        self.window = window  # the smaller of the sender's and the one the receiver grants
        self.sent = 0  # messages appended (sending thread only)
        self.handled = 0  # messages acknowledged as handled (I/O thread only)
        self.received = 0  # highest seq the receiver has acknowledged as received
        self.unacked: collections.deque[tuple[int, bytes, type]] = collections.deque()
        self.cond = threading.Condition(threading.Lock())
        self.waiting = False
        self.progress_at = now

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged as handled."""
        return self.sent - self.handled

    def append(self, seq: int, record: bytes, kind: type) -> None:
        """Keep ``record`` (sequence number ``seq``) until it is acknowledged as handled."""
        self.unacked.append((seq, record, kind))
        self.sent += 1

    def on_ack(self, received: int, handled: int, now: float) -> int:
        """An ack for this stream; returns how many messages it released (credit returned)."""
        unacked = self.unacked
        popped = 0
        while unacked and unacked[0][0] <= handled:
            unacked.popleft()
            popped += 1
        if received > self.received:
            self.received = received
            self.progress_at = now
        if popped:
            self.handled += popped
            self.progress_at = now
        return popped

    def due(self, now: float, after: float) -> list[bytes]:
        """What to send again: after ``after`` s without progress, every record not acknowledged as received."""
        if not self.unacked or now - self.progress_at <= after:
            return []
        self.progress_at = now
        return [record for seq, record, _ in self.unacked if seq > self.received]

    def rehome(self, node_id: str) -> list[bytes]:
        """The target moved to ``node_id`` (a takeover): everything unhandled goes there."""
        self.node_id = node_id
        self.received = 0
        return [record for _, record, _ in self.unacked]


class Verdict(enum.Enum):
    """What the receiver makes of one arriving message."""

    ACCEPT = "accept"  # new: deliver it
    DUPLICATE = "duplicate"  # at or below the last seq accepted in its stream: a re-send, dropped
    OVERRUN = "overrun"  # more than the window unhandled in its stream: the peer broke the protocol


class _InStream:
    __slots__ = ("received", "pending")

    def __init__(self) -> None:
        self.received = 0  # highest seq accepted
        self.pending: collections.deque[int] = collections.deque()  # accepted, not yet acked as handled


class InStreams:
    """Receive state of every stream a node receives, keyed (source node, sender, target)."""

    __slots__ = ("window", "_streams")

    def __init__(self, window: int) -> None:
        self.window = window
        self._streams: dict[tuple[str, str, str], _InStream] = {}

    def accept(self, key: tuple[str, str, str], seq: int) -> Verdict:
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _InStream()
        if seq <= stream.received:
            return Verdict.DUPLICATE
        if len(stream.pending) >= self.window:
            return Verdict.OVERRUN
        stream.received = seq
        stream.pending.append(seq)
        return Verdict.ACCEPT

    def received(self, key: tuple[str, str, str]) -> int:
        stream = self._streams.get(key)
        return stream.received if stream is not None else 0

    def acks(self, handled: dict[tuple[str, str, str], int]) -> dict[str, list[tuple[str, str, int, int]]]:
        """``{stream: last handled seq}`` -> the ack entries owed to each source node,
        ``(sender, target, received, handled)``; the handled messages stop counting against the window."""
        by_node: dict[str, list[tuple[str, str, int, int]]] = collections.defaultdict(list)
        streams = self._streams
        for key, seq in handled.items():
            source, sender, target = key
            stream = streams.get(key)
            received = seq
            if stream is not None:
                received = max(stream.received, seq)
                pending = stream.pending
                while pending and pending[0] <= seq:
                    pending.popleft()
            by_node[source].append((sender, target, received, seq))
        return by_node

    def forget(self, node_id: str) -> None:
        """Node ``node_id`` left (or was disconnected): its streams are gone with it."""
        for key in [k for k in self._streams if k[0] == node_id]:
            del self._streams[key]

    def __len__(self) -> int:
        return len(self._streams)
