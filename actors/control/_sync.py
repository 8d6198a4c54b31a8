"""The coordinator's sync cadence and its accounting, as a machine: no I/O, the clock passed in.

A sync cycle: the gate opens (every rank in the run reached its quota of batches since its last
sync, or cannot move), the cycle is armed (``SyncNow`` to every rank), each rank runs the
work-weighted all-reduce and acks with its step count, and the cycle closes once every rank in
the run acked.  What the cycle's reduce averaged is counted from the acks (``SyncAck.step_count``
and ``covered``): a rank that trains on while the others ack keeps those batches for the next sync.
The sync accounting bug of this project's first real-data run (batches counted in the global step
and never averaged) lived in state like this spread over the coordinator; here it is one object
with its own tests (tests/actors/test_sync.py).

The coordinator owns the ranks (``RankState``) and the messages; it asks this machine whether to
arm, tells it the acks, and sends what follows (``SyncNow``, ``SetGlobalStep``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from actorwire.actors.control._ledger import RankState, adapt_anchor, quotas

#: Late acks (of a cycle a new group started again) arrive soon: older counted cycles are forgotten.
_COUNTED_KEPT = 64


@dataclasses.dataclass(eq=False)
class SyncCadence:
    """When to sync, and what each completed sync put in the model."""

    policy: str
    sync_every: int
    overhead_target: float
    #: The adaptive policy's batches for the slowest rank between two syncs.
    anchor: int = 0
    #: The cycle last armed (``SyncNow.cycle``), when it was armed (None: no cycle in progress), and
    #: the ranks that acked it.
    cycle: int = 0
    armed_at: float | None = None
    acked: set[int] = dataclasses.field(default_factory=set)
    #: Since when the current window (from the last completed sync) runs.
    window_started: float = 0.0
    #: Batches each rank does between two syncs.
    quota: dict[int, int] = dataclasses.field(default_factory=dict)
    #: The rank that held the gate at the last scan: checked first next time (a full scan per Batch
    #: dominated the coordinator's CPU at a thousand ranks, bench scale).
    blocker: RankState | None = None
    #: The ranks not yet seen not to hold the gate in this window (None: all, from the next scan).
    #: Within a window a rank stops holding the gate (its quota reached, its slice done) and does
    #: not start again; what could make it (a new window or epoch, quotas, a slice handed over, a
    #: rank joining or leaving) calls ``recheck``.  A scan from the first rank at every report
    #: made each epoch's end quadratic: at 10,000 ranks, 47% of the coordinator's process
    #: (py-spy, bench scale) and 12 s from the last rank's metrics to the aggregate.
    unchecked: list[RankState] | None = None
    #: A rank already taken off ``unchecked`` in this window trained since the last sync.
    moved: bool = False
    #: The steps the armed cycle's reduce averaged, as its acks say (``SyncAck.covered``).
    covered: int | None = None
    #: Cycles whose reduce is counted in the global step.
    counted: set[int] = dataclasses.field(default_factory=set)
    #: A sync has completed: the run's model exists, and only ranks in a completed sync hold it.
    seeded: bool = False
    #: The rank named to seed the model, until a sync completes.
    source: int | None = None
    #: Ranks that do not hold the run's model yet (joined, not yet in a completed sync).
    fresh: set[int] = dataclasses.field(default_factory=set)

    def __post_init__(self) -> None:
        self.anchor = self.anchor or self.sync_every

    @property
    def in_progress(self) -> bool:
        return self.armed_at is not None

    # -- the gate -------------------------------------------------------------------------------

    def set_quotas(self, alive: list[RankState], dataset_size: int, batch_size: int) -> None:
        self.quota = quotas(alive, policy=self.policy, sync_every=self.sync_every, anchor=self.anchor,
                            dataset_size=dataset_size, batch_size=batch_size)
        self.recheck()

    def recheck(self) -> None:
        """Something may make a rank hold the gate again: the next scan looks at every rank."""
        self.unchecked = None
        self.blocker = None

    def quiesced(self, r: RankState, epoch: int, batch_size: int) -> bool:
        """A rank that finished its slice (or reported the epoch) cannot move: it must not block the gate."""
        if r.ext_done < r.ext_sent:
            return False
        return r.reported_epoch >= epoch or r.epoch_steps * batch_size >= r.plan[1] + r.extended

    def blocks(self, r: RankState, epoch: int, batch_size: int) -> bool:
        """Whether ``r`` holds the gate: alive, under its quota, and still able to move."""
        return (r.alive and not r.exited and not r.waiting and not r.throttled and r.steps_since_sync < self.quota.get(r.rank, self.sync_every)
                and not self.quiesced(r, epoch, batch_size))

    def gate_open(self, ranks: Iterable[RankState], epoch: int, batch_size: int) -> bool:
        """Every rank reached its quota or cannot move, and at least one trained since the last sync."""
        blocker = self.blocker
        if blocker is not None and self.blocks(blocker, epoch, batch_size):
            return False  # while it still blocks, nothing else can open the gate
        if self.unchecked is None:
            self.unchecked = list(ranks)
            self.unchecked.reverse()  # taken from the end: in the ranks' order
            self.moved = False
        unchecked = self.unchecked
        while unchecked:
            r = unchecked[-1]
            if r.alive and not r.exited:
                if self.blocks(r, epoch, batch_size):
                    self.blocker = r
                    return False
                self.moved = self.moved or r.steps_since_sync > 0 or r.throttled
            unchecked.pop()
        self.blocker = None
        # A rank taken off had reached its quota (it moved) or could not move; neither changes
        # before a ``recheck``.
        return self.moved

    def lead_bound(self, r: RankState) -> int:
        """The batches ``r`` may train past its last completed sync before it is told ``Throttle``:
        twice its quota (at least its quota plus 4).  Local SGD's drift grows with the steps a rank
        takes alone: without a bound, ranks whose peer is descheduled trained an epoch and more
        between two averages, and a run under a loaded SLURM ended 1.5 points below the others."""
        quota = self.quota.get(r.rank, self.sync_every)
        return quota + max(quota, 4)

    def ahead(self, r: RankState) -> bool:
        """Whether to tell ``r`` ``Throttle`` now: it holds the model, trained ``lead_bound`` batches
        since its last completed sync, was not told yet, and the sync that frees it is still to be
        sent (no cycle in progress, or ``r`` acked the one in progress): so ``Throttle`` always
        reaches it before the ``SyncNow`` that ends it.  A rank that has the cycle in progress to
        serve is about to sync anyway."""
        if r.throttled or not r.has_model:
            return False
        if self.armed_at is None:
            since = r.total_steps - r.synced_steps
        elif r.rank in self.acked:  # its reduce is done: what it trained after its ack counts
            since = r.total_steps - r.acked_steps
        else:
            return False
        return since >= self.lead_bound(r)

    # -- a cycle --------------------------------------------------------------------------------

    def arm(self, now: float, ranks: Iterable[RankState]) -> int:
        """A new cycle starts now; its number (``SyncNow.cycle``).  Its ``SyncNow`` ends every throttle."""
        for r in ranks:
            r.throttled = False
        self.cycle += 1
        self.armed_at = now
        self.acked = set()
        self.covered = None
        return self.cycle

    def late_ack(self, r: RankState, cycle: int, step_count: int, covered: int | None,
                 ranks: dict[int, RankState]) -> int:
        """An ack of a cycle that a new group started again: its reduce completed, so what it says
        still holds (the rank's work up to it is in the model).  The steps to add to the global step."""
        added = 0
        if covered is not None and cycle not in self.counted:
            self.counted.add(cycle)
            added = min(covered, unsynced_given(ranks))
        self.synced(r, step_count)
        self.recheck()  # its steps since the sync went down: it may hold the gate again
        return added

    def ack(self, r: RankState, step_count: int, covered: int | None, in_run: frozenset[int]) -> bool:
        """``r`` acked the cycle in progress; whether every rank in the run has now."""
        self.acked.add(r.rank)
        r.acked_steps = step_count
        if covered is not None:
            self.covered = max(self.covered or 0, covered)
        return len(self.acked) >= len(in_run) and self.acked.issuperset(in_run)

    def settle(self, ranks: dict[int, RankState]) -> int:
        """Count what the acks of the cycle in progress say was averaged into the model; the steps to
        add to the global step.

        A reduce covers what each rank had trained when it acked; the batches a rank reports after
        its ack wait for the next sync.  A rank declared dead after the reduce took its steps and
        before its ack came is in the model too: the reduce's own count (``SyncAck.covered``) says
        so.  Called when the cycle closes, and when a new group makes it start again (the acks that
        came are of a reduce that completed)."""
        covered = 0
        for rank in self.acked:
            r = ranks[rank]
            covered += max(0, r.acked_steps - r.synced_steps)
            self.synced(r, r.acked_steps)
        added = 0
        if self.acked and self.cycle not in self.counted:
            self.counted = {c for c in self.counted if c > self.cycle - _COUNTED_KEPT}
            self.counted.add(self.cycle)
            added = covered if self.covered is None else self.covered
            if added > covered:  # (a rank lost after the reduce took its steps) never past what was given
                added = min(added, covered + unsynced_given(ranks, but=self.acked))
        self.covered = None
        self.acked = set()
        self.recheck()
        return added

    def synced(self, r: RankState, steps: int) -> None:
        """``r`` took part in a completed reduce when it had trained ``steps``: that much is in the model."""
        r.synced_steps = max(r.synced_steps, steps)
        r.steps_since_sync = max(0, r.total_steps - r.synced_steps)
        self.seeded = True
        if not r.has_model:
            r.has_model = True
            self.fresh.discard(r.rank)

    def close(self, now: float) -> float:
        """The cycle in progress closed (after ``settle``): the window starts again, the adaptive
        anchor follows the sync's share of its window.  Returns the sync's seconds."""
        sync_s = now - (self.armed_at if self.armed_at is not None else now)
        window_s = max(1e-9, now - self.window_started)
        self.armed_at = None
        if self.policy == "adaptive":
            self.anchor = adapt_anchor(self.anchor, sync_s / window_s, self.overhead_target)
        self.window_started = now
        return sync_s

    def abandon(self) -> None:
        """No cycle in progress, nothing acked (every rank was lost: the run waits for a restart)."""
        self.armed_at = None
        self.acked = set()

    def reseed(self) -> None:
        """A restarted group: its first sync seeds the model from one rank again."""
        self.seeded = False
        self.source = None
        self.covered = None
        self.recheck()


def unsynced_given(ranks: dict[int, RankState], but: Collection[int] = ()) -> int:
    """The most steps a reduce can have averaged that no completed sync took: each rank's samples
    given (``RankState.given``) past its synced step count, for the ranks not in ``but`` (those that
    acked: the reduce covered what their acks say).  A ``SyncAck.covered`` past it is a lie."""
    return sum(max(0, r.given - r.synced_steps) for r in ranks.values() if r.rank not in but)
