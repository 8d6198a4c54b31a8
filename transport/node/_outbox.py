"""The hand-off between the threads that send and the node's I/O thread.

Any thread hands over: records per peer node (:meth:`Outbox.add`, under the stream's lock that
numbered them), replies and commands in order (:meth:`Outbox.post`, :meth:`Outbox.command`), and
the messages its handlers finished, whose acks are owed (:meth:`Outbox.handled`).  Each wakes the
I/O thread only when it sleeps, once per sleep: a sender goes on queueing while the I/O thread
waits for the GIL, and the I/O thread then ships hundreds of records in one batch frame.

The I/O thread takes what was handed over (:meth:`Outbox.take_records`, :meth:`Outbox.take_items`,
:meth:`Outbox.take_acks`) and says when it sleeps (:meth:`Outbox.go_idle`, :meth:`Outbox.awake`).
Acks leave within ``ack_delay`` of the first handled message, at once when ``ack_every`` are owed.

No I/O and no clock reads: ``wake`` is the driver's (an eventfd write), ``now`` comes from the I/O
thread.  Records wait in one list per peer, and ``ready`` names the peers whose list may hold some:
the I/O thread takes a peer out of ``ready`` before it empties its list, so a record appended
meanwhile is either taken now or finds the peer named again.  Slicing the list off costs the I/O
thread no Python step per message (it cost a third of its time when it was one deque).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

#: A stream a node received on: (sending node, sender, target).
StreamKey = tuple[str, str, str]


class Outbox:
    __slots__ = ("boxes", "ready", "items", "owed", "owed_count", "ack_due", "idle", "wake_at",
                 "ack_every", "ack_delay", "_wake")

    def __init__(self, wake: Callable[[], None], *, ack_every: int = 512, ack_delay: float = 0.002) -> None:
        self.boxes: dict[str, list[bytes]] = {}
        self.ready: set[str] = set()
        self.items: collections.deque[Any] = collections.deque()  # replies and commands, in order
        self.owed: dict[StreamKey, int] = {}  # the last handled number per stream, acks not yet sent
        self.owed_count = 0  # messages handled since the last acks
        self.ack_due: float | None = None
        self.idle = False  # the I/O thread sleeps (or is about to): a hand-off must wake it
        self.wake_at = 0.0  # when the sleeping I/O thread wakes by itself
        self.ack_every = ack_every
        self.ack_delay = ack_delay
        self._wake = wake

    # -- any thread ---------------------------------------------------------------

    def add(self, node_id: str, record: bytes) -> None:
        """A record for peer ``node_id`` (call :meth:`nudge` after, outside the stream's lock)."""
        box = self.boxes.get(node_id)
        if box is None:
            box = self.boxes.setdefault(node_id, [])
        box.append(record)
        self.ready.add(node_id)

    def nudge(self) -> None:
        """Wake the I/O thread if it sleeps; once per sleep."""
        if self.idle:
            self.idle = False
            self._wake()

    def post(self, item: Any) -> None:
        """A reply (or anything the I/O thread ships in order with the commands)."""
        self.items.append(item)
        self.nudge()

    def command(self, item: Any) -> None:
        """A command for the I/O thread: it is woken whether it sleeps or not."""
        self.items.append(item)
        self._wake()

    def before(self, deadline: float) -> None:
        """A deadline (an ask's) was set: wake the I/O thread only if it would sleep past it."""
        if deadline < self.wake_at:
            self._wake()

    def handled(self, key: StreamKey, seq: int) -> None:
        """A handler finished message ``seq`` of stream ``key``: its ack is owed.  The first owed
        starts the ack timer (the I/O thread may sleep until its next beat); ``ack_every`` owed
        send the acks at once."""
        owed = self.owed
        first = not owed
        owed[key] = seq
        self.owed_count += 1
        if first or self.owed_count >= self.ack_every:
            self.nudge()

    def handled_many(self, entries: dict[StreamKey, int], count: int) -> None:
        """:meth:`handled` for ``count`` messages, the last of each stream in ``entries``."""
        owed = self.owed
        first = not owed
        owed.update(entries)
        self.owed_count += count
        if first or self.owed_count >= self.ack_every:
            self.nudge()

    # -- the I/O thread ---------------------------------------------------------------

    def add_many(self, node_id: str, records: list[bytes]) -> None:
        """Re-sends, behind what senders queued."""
        box = self.boxes.get(node_id)
        if box is None:
            box = self.boxes.setdefault(node_id, [])
        box.extend(records)
        self.ready.add(node_id)

    def take_records(self) -> Iterator[tuple[str, list[bytes]]]:
        """Each ready peer's records, as they are now."""
        ready, boxes = self.ready, self.boxes
        while ready:
            node_id = ready.pop()
            box = boxes.get(node_id)
            if box:
                n = len(box)
                records = box[:n]
                del box[:n]  # a sender may append meanwhile: only what was copied goes
                yield node_id, records

    def take_items(self) -> Iterator[Any]:
        items = self.items
        while items:
            yield items.popleft()

    def acks_due(self, now: float) -> bool:
        """Whether the owed acks must leave now."""
        return self.ack_due is not None and now >= self.ack_due or self.owed_count >= self.ack_every

    def full(self) -> bool:
        """``ack_every`` acks are owed: they leave now, even in the middle of a burst being read."""
        return self.owed_count >= self.ack_every

    def take_acks(self) -> dict[StreamKey, int]:
        """What is owed, and the timer stopped."""
        self.ack_due = None
        self.owed_count = 0
        if not self.owed:
            return {}
        owed, self.owed = self.owed, {}
        return owed

    def go_idle(self, now: float, wake_at: float, next_deadline: Callable[[], float | None]) -> float:
        """The I/O thread is about to sleep until ``wake_at`` at the latest (its next beat or the
        first ask's deadline): how long it may.  Owed acks shorten it to their timer.  Idleness is
        announced before the last look, so a sender that queued before seeing the flag is caught
        here and one after it wakes the thread."""
        if self.owed:
            if self.ack_due is None:
                self.ack_due = now + self.ack_delay
            wake_at = min(wake_at, self.ack_due)
        self.wake_at = wake_at
        self.idle = True
        first = next_deadline()
        if self.items or self.ready or (first is not None and first < wake_at):
            return 0.0
        return wake_at - now

    def awake(self) -> None:
        self.idle = False
        self.wake_at = 0.0
