"""A node's outbound streams, as one table with the rules for when their target moves, goes down,
acknowledges, or is late to acknowledge.  No I/O, no clock reads: the node passes ``now`` and
sends what the methods return.

Each stream (:class:`~actorwire.transport._delivery.OutStream`, keyed ``(sender, target)``) is
opened by the sending thread that first sends on it and changed after that by the I/O thread
alone; sending threads read the table without a lock (a dict lookup is atomic), which is why the
table is a plain dict the node's hot path reads directly.  Waking a sender that waits for credit
or for its stream's end is the node's: the methods return the streams to wake.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from actorwire.messages.runtime import AckEntry
from actorwire.transport._delivery import OutStream


class Outbound:
    """Every outbound stream of one node (see the module's doc)."""

    __slots__ = ("streams", "senders_to", "window")

    def __init__(self, window: int) -> None:
        self.streams: dict[tuple[str, str], OutStream] = {}
        # The senders of the streams to each target, so that a target's death or move finds its
        # streams without a scan of all (10,000 ranks leaving made that 10^8 steps in the I/O thread:
        # 46% of the coordinator's process in bench scale).  Added to before and after the stream is.
        self.senders_to: collections.defaultdict[str, set[str]] = collections.defaultdict(set)
        self.window = window  # this node's own credit window

    def open(self, sender: str, target: str, node_id: str, now: float, granted: int) -> OutStream:
        """The stream ``sender`` -> ``target``, opened toward ``node_id`` if there is none, with the
        smaller of this node's window and the one the receiver ``granted`` (0: none said)."""
        stream = self.streams.get((sender, target))
        if stream is None:
            stream = OutStream(target, node_id, now, min(self.window, granted or self.window))
            self.senders_to[target].add(sender)
            self.streams[(sender, target)] = stream
            self.senders_to[target].add(sender)  # again: a death on the I/O thread may have taken the set
        return stream

    def senders_of(self, target: str) -> list[str]:
        """The senders with a stream to ``target``."""
        return [sender for sender in list(self.senders_to.get(target, ())) if (sender, target) in self.streams]

    def rehome(self, sender: str, target: str, node_id: str,
               renumber: Callable[[bytes, int], bytes]) -> list[bytes] | None:
        """``target`` moved to ``node_id`` (a takeover): the stream starts again there, and what it
        had not handled is returned, renumbered, to be sent there; None if there is no stream or it
        already goes there."""
        stream = self.streams.get((sender, target))
        if stream is None or stream.node_id == node_id:
            return None
        return stream.rehome(node_id, renumber)

    def down(self, target: str) -> list[tuple[str, OutStream]]:
        """``target`` went down: each of its streams with its sender, closed (a sender that appends
        after sees it) and forgotten.  The node reports what they had not confirmed and wakes their
        waiting senders."""
        out = []
        for sender in list(self.senders_to.pop(target, ())):
            stream = self.streams.pop((sender, target), None)
            if stream is None:
                continue
            with stream.lock:
                stream.closed = True
            out.append((sender, stream))
        return out

    def acked(self, entries: list[AckEntry], source: str, now: float) -> tuple[list[str], list[OutStream]]:
        """The entries of an ack from node ``source``: the targets it named that it does not host
        (the node refuses those entries), and the streams whose waiting senders it gave credit back."""
        refused: list[str] = []
        freed: list[OutStream] = []
        for entry in entries:
            stream = self.streams.get((entry.sender, entry.target))
            if stream is None:
                continue
            if stream.node_id != source:
                refused.append(entry.target)
                continue
            if stream.on_ack(entry.received, entry.handled, now) and stream.waiting:
                freed.append(stream)
        return refused, freed

    def due(self, now: float, after: float) -> list[tuple[OutStream, list[bytes]]]:
        """Each stream with no progress for ``after`` s, with every record to send again."""
        out = []
        for stream in list(self.streams.values()):
            again = stream.due(now, after)
            if again:
                out.append((stream, again))
        return out

    def unacked(self) -> int:
        """Records not yet acknowledged as handled, every stream's together."""
        return sum(len(stream.unacked) for stream in list(self.streams.values()))
