"""The asks a node waits on, as a sans-IO machine: pending table, deadlines, who may answer.

An ask is opened with the correlation id the node gave it and its deadline.
Exactly one outcome settles it: the reply, a failure (the target went down,
the system closed) or the deadline.  A reply is matched on (answering node,
correlation id), never on the id alone: the id is a counter and so guessable,
and only the node hosting the target (the root, for node requests) may
answer.  The machine reads no clock and runs no callback: the node passes the
time in, and runs the callbacks of what :meth:`Asks.settle` hands back.

Who touches what: :meth:`open` and :meth:`cancel` from any thread (one dict
operation each, atomic under the GIL; the deadline heap has its own lock);
everything else from the node's I/O thread, which alone settles asks.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import threading
from collections.abc import Callable
from typing import Any

ROOT = "root"  # the target of a node-level request, answered by the root node


class Match(enum.Enum):
    """What a reply is to the pending asks."""

    ANSWER = "answer"  # the awaited reply, from the node that may give it
    UNKNOWN = "unknown"  # no such ask pending here: late (already settled) or never asked
    WRONG_NODE = "wrong node"  # a pending ask, answered by a node that does not host its target


@dataclasses.dataclass(eq=False)
class PendingAsk:
    correlation_id: int
    target: str
    kind: str
    timeout: float  # as the caller gave it, for the error text
    deadline: float
    on_reply: Callable[..., Any]
    on_failure: Callable[[int, Exception], Any]


class Asks:
    """The pending asks of one node."""

    def __init__(self) -> None:
        self._pending: dict[int, PendingAsk] = {}
        self._heap: list[tuple[float, int]] = []
        self._heap_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, correlation_id: object) -> bool:
        """Whether the ask with this correlation id still waits for its outcome."""
        return correlation_id in self._pending

    def open(self, pending: PendingAsk) -> None:
        """Wait for an answer to ``pending``: the table first, then the deadline, so that a reply
        that comes before :meth:`open` returns still finds it and its deadline outlives it."""
        self._pending[pending.correlation_id] = pending
        with self._heap_lock:
            heapq.heappush(self._heap, (pending.deadline, pending.correlation_id))

    def cancel(self, correlation_id: int) -> None:
        """Forget an ask whose request never left (its deadline entry expires as a no-op)."""
        self._pending.pop(correlation_id, None)

    def next_deadline(self) -> float | None:
        """The earliest deadline still in the heap (it may belong to a settled ask: waking for it
        costs one empty pass)."""
        heap = self._heap
        return heap[0][0] if heap else None

    def match(self, correlation_id: int, source: str | None,
              answerer: Callable[[PendingAsk], str | None]) -> tuple[Match, PendingAsk | None]:
        """Judge a reply with ``correlation_id`` from node ``source`` (None: this node, which may
        answer its own asks).  ``answerer`` names the node that may answer a pending ask now (the
        target's host can change with a takeover, so the node decides it at reply time)."""
        pending = self._pending.get(correlation_id)
        if pending is None:
            return Match.UNKNOWN, None
        if source is not None and source != answerer(pending):
            return Match.WRONG_NODE, pending
        return Match.ANSWER, pending

    def settle(self, pending: PendingAsk) -> bool:
        """Take ``pending`` out of the table; True exactly once per ask (the caller then runs one of
        its callbacks), False if it was settled already."""
        return self._pending.pop(pending.correlation_id, None) is pending

    def expired(self, now: float) -> list[PendingAsk]:
        """The asks whose deadline is ``now`` or earlier, still pending (not settled yet)."""
        heap = self._heap
        out: list[PendingAsk] = []
        while heap and heap[0][0] <= now:
            with self._heap_lock:
                _, corr = heapq.heappop(heap)
            pending = self._pending.get(corr)
            if pending is not None:
                out.append(pending)
        return out

    def of_target(self, target: str) -> list[PendingAsk]:
        """The pending asks sent to ``target`` (it went down: they fail)."""
        return [p for p in list(self._pending.values()) if p.target == target]

    def all(self) -> list[PendingAsk]:
        """Every pending ask (the node is closing: they all fail)."""
        return list(self._pending.values())
