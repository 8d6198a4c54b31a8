"""The coordinator's sync cadence and accounting (``_sync.SyncCadence``) on its own: no actor, no
clock but the numbers passed in."""

from __future__ import annotations

from actorwire.actors.control._ledger import RankState
from actorwire.actors.control._sync import SyncCadence


def _ranks(n: int, *, plan: int = 100) -> dict[int, RankState]:
    ranks = {r: RankState(r, f"worker/{r}", 0.0) for r in range(n)}
    for r in ranks.values():
        r.plan = (0, plan)
        r.given = plan
        r.has_model = True
    return ranks


def _train(r: RankState, batches: int) -> None:
    r.total_steps += batches
    r.epoch_steps += batches
    r.steps_since_sync += batches


def test_the_gate_opens_once_every_rank_reached_its_quota_and_one_moved() -> None:
    sync = SyncCadence("fixed", 4, 0.1)
    ranks = _ranks(3)
    sync.set_quotas(list(ranks.values()), dataset_size=300, batch_size=1)
    assert not sync.gate_open(ranks.values(), epoch=0, batch_size=1)  # nobody moved
    _train(ranks[0], 4)
    _train(ranks[1], 4)
    assert not sync.gate_open(ranks.values(), epoch=0, batch_size=1)
    assert sync.blocker is ranks[2]  # checked first next time
    _train(ranks[2], 3)
    assert not sync.gate_open(ranks.values(), epoch=0, batch_size=1)
    _train(ranks[2], 1)
    assert sync.gate_open(ranks.values(), epoch=0, batch_size=1) and sync.blocker is None


def test_a_rank_that_cannot_move_does_not_hold_the_gate() -> None:
    """Its slice done (or its epoch reported): waiting for it would wait for ever."""
    sync = SyncCadence("fixed", 8, 0.1)
    ranks = _ranks(2, plan=2)
    _train(ranks[0], 8)
    _train(ranks[1], 2)  # its whole plan: 2 samples of batch 1
    assert sync.gate_open(ranks.values(), epoch=0, batch_size=1)
    ranks[1].ext_sent = 1  # a dead rank's slice was handed to it and is not done
    sync.recheck()  # (the coordinator's, when it hands a slice over)
    assert not sync.gate_open(ranks.values(), epoch=0, batch_size=1)


def test_a_cycle_counts_what_each_rank_had_at_its_ack_not_the_batches_after() -> None:
    """The accounting bug of the first real-data run: the cycle's end zeroed every rank's steps since
    the sync, so batches a rank trained while the others acked were counted and never averaged."""
    sync = SyncCadence("fixed", 2, 0.1)
    ranks = _ranks(2)
    _train(ranks[0], 2)
    _train(ranks[1], 2)
    assert sync.arm(1.0, []) == 1 and sync.in_progress
    assert not sync.ack(ranks[0], step_count=2, covered=None, in_run=frozenset(ranks))
    _train(ranks[0], 3)  # trains on while rank 1 acks
    assert sync.ack(ranks[1], step_count=2, covered=None, in_run=frozenset(ranks))
    assert sync.settle(ranks) == 4
    assert ranks[0].steps_since_sync == 3 and ranks[1].steps_since_sync == 0  # rank 0's 3 wait
    assert sync.close(1.5) == 0.5 and not sync.in_progress and sync.window_started == 1.5


def test_the_reduces_own_count_wins_and_a_late_ack_is_counted_once() -> None:
    sync = SyncCadence("fixed", 2, 0.1)
    ranks = _ranks(2)
    _train(ranks[0], 2)
    _train(ranks[1], 2)
    sync.arm(0.0, [])
    sync.ack(ranks[0], step_count=2, covered=4, in_run=frozenset(ranks))  # rank 1 died before its ack
    assert sync.settle(ranks) == 4  # the reduce says it averaged 4 steps, rank 1's included
    cycle = sync.cycle
    sync.arm(1.0, [])  # a new group: the cycle starts again
    assert sync.late_ack(ranks[1], cycle, step_count=2, covered=4, ranks=ranks) == 0  # counted already
    assert ranks[1].synced_steps == 2
    assert sync.late_ack(ranks[1], cycle - 1, step_count=2, covered=3, ranks=ranks) == 3  # a cycle never counted
    assert sync.late_ack(ranks[1], cycle - 1, step_count=2, covered=3, ranks=ranks) == 0


def test_a_reduce_s_count_past_what_the_ranks_were_given_is_not_believed() -> None:
    """``covered`` is a rank's word: one past the samples handed out and not yet synced (each step
    takes one) made the global step whatever it said."""
    sync = SyncCadence("fixed", 2, 0.1)
    ranks = _ranks(2, plan=10)
    _train(ranks[0], 2)
    _train(ranks[1], 2)
    sync.arm(0.0, [])
    sync.ack(ranks[0], step_count=2, covered=10**9, in_run=frozenset(ranks))
    assert sync.settle(ranks) == 12  # rank 0's 2, and rank 1's 10 samples at most
    cycle = sync.cycle
    sync.arm(1.0, [])
    assert sync.late_ack(ranks[1], cycle - 1, step_count=2, covered=10**9, ranks=ranks) == 18  # 8 + 10 not synced


def test_a_fresh_rank_holds_the_model_once_in_a_completed_sync() -> None:
    sync = SyncCadence("fixed", 2, 0.1)
    ranks = _ranks(2)
    ranks[1].has_model = False
    sync.fresh.add(1)
    sync.arm(0.0, [])
    sync.ack(ranks[0], step_count=0, covered=0, in_run=frozenset(ranks))
    sync.ack(ranks[1], step_count=0, covered=0, in_run=frozenset(ranks))
    assert sync.settle(ranks) == 0
    assert ranks[1].has_model and not sync.fresh and sync.seeded
    sync.reseed()  # a restarted group seeds the model again
    assert not sync.seeded and sync.source is None


def test_the_adaptive_anchor_grows_while_syncs_cost_more_than_the_target() -> None:
    sync = SyncCadence("adaptive", 4, 0.1)
    assert sync.anchor == 4
    sync.window_started = 0.0
    sync.arm(0.8, [])
    sync.close(1.0)  # the sync took 0.2 s of a 1 s window: twice the target
    assert sync.anchor == 8
    sync.arm(10.0, [])
    sync.close(10.001)  # far under half the target: shrinks by a fifth
    assert sync.anchor == 6


def test_a_rank_that_ran_its_lead_bound_past_its_last_sync_is_throttled_once() -> None:
    """Nothing bounded how far a rank trained alone: with a peer descheduled, ranks trained an epoch
    and more between two averages (local SGD's drift), and a run under a loaded SLURM ended 1.5
    points below the others.  Twice the quota (at least quota + 4) past the last sync, it is told
    ``Throttle``; once."""
    sync = SyncCadence("fixed", 8, 0.1)
    ranks = _ranks(2)
    sync.set_quotas(list(ranks.values()), dataset_size=300, batch_size=1)
    assert sync.lead_bound(ranks[0]) == 16
    _train(ranks[0], 15)
    assert not sync.ahead(ranks[0])
    _train(ranks[0], 1)
    assert sync.ahead(ranks[0])
    ranks[0].throttled = True
    assert not sync.ahead(ranks[0])  # told once
    ranks[1].has_model = False
    _train(ranks[1], 40)
    assert not sync.ahead(ranks[1])  # a rank without the model trains nothing: no throttle for it


def test_small_quotas_leave_a_lead_of_four_batches() -> None:
    sync = SyncCadence("fixed", 1, 0.1)
    ranks = _ranks(1)
    sync.set_quotas(list(ranks.values()), dataset_size=300, batch_size=1)
    assert sync.lead_bound(ranks[0]) == 5


def test_throttle_is_never_sent_before_a_sync_the_rank_still_has_to_serve() -> None:
    """A Throttle that reaches a rank after the SyncNow that should end it holds the rank for ever (the
    simulator's seed 307 hung): while a cycle is armed, only a rank that acked it is throttled, and
    its lead counts from its ack."""
    sync = SyncCadence("fixed", 4, 0.1)
    ranks = _ranks(2)
    sync.set_quotas(list(ranks.values()), dataset_size=300, batch_size=1)
    _train(ranks[0], 9)
    _train(ranks[1], 4)
    sync.arm(1.0, ranks.values())
    assert not sync.ahead(ranks[0])  # SyncNow is on its way to it
    sync.ack(ranks[0], step_count=9, covered=None, in_run=frozenset(ranks))
    assert not sync.ahead(ranks[0])  # its reduce covered all 9
    _train(ranks[0], 7)
    assert not sync.ahead(ranks[0])
    _train(ranks[0], 1)
    assert sync.ahead(ranks[0])  # 8 past its ack


def test_a_throttled_rank_does_not_hold_the_gate_and_the_next_sync_frees_it() -> None:
    sync = SyncCadence("fixed", 4, 0.1)
    ranks = _ranks(2)
    sync.set_quotas(list(ranks.values()), dataset_size=300, batch_size=1)
    _train(ranks[1], 4)
    ranks[0].throttled = True  # however few batches it counts, it waits for the next sync
    assert sync.gate_open(ranks.values(), epoch=0, batch_size=1)
    sync.arm(1.0, ranks.values())
    assert not ranks[0].throttled


def test_the_gate_looks_at_each_rank_once_per_window_until_something_may_make_it_hold_again() -> None:
    """Every report scanned the ranks from the first: each epoch's end was quadratic (at 10,000 ranks
    47% of the coordinator's process, 12 s from the last metrics to the aggregate)."""
    sync = SyncCadence("fixed", 2, 0.1)
    ranks = _ranks(4)
    sync.set_quotas(list(ranks.values()), dataset_size=400, batch_size=1)
    for r in (0, 1, 2):
        _train(ranks[r], 2)
    assert not sync.gate_open(ranks.values(), epoch=0, batch_size=1) and sync.blocker is ranks[3]
    assert sync.unchecked == [ranks[3]]  # 0, 1 and 2 are past it for this window
    ranks[0].steps_since_sync = 0  # (what only a recheck may follow: a late ack)
    _train(ranks[3], 2)
    assert sync.gate_open(ranks.values(), epoch=0, batch_size=1)  # rank 0 is not looked at again
    sync.recheck()
    assert not sync.gate_open(ranks.values(), epoch=0, batch_size=1) and sync.blocker is ranks[0]


def test_a_window_where_nobody_moved_stays_closed_without_a_rescan() -> None:
    sync = SyncCadence("fixed", 2, 0.1)
    ranks = _ranks(2, plan=0)  # nothing to train: nobody holds the gate, nobody moved
    assert not sync.gate_open(ranks.values(), epoch=0, batch_size=1)
    assert sync.unchecked == [] and not sync.gate_open(ranks.values(), epoch=0, batch_size=1)
