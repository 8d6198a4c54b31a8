"""The coordinator's arithmetic, apart from its rules: every sample is handed out exactly once."""

from __future__ import annotations

import pytest

from actorwire import messages as m
from actorwire.actors.control._ledger import RankState, by_speed, hand_over, shares, split_range, unsynced


def _ranks(*speeds: float | None) -> list[RankState]:
    out = []
    for i, s in enumerate(speeds):
        r = RankState(i, f"worker/{i}", 0.0)
        r.ms_per_batch = s
        out.append(r)
    return out


@pytest.mark.parametrize("total", [1, 7, 100, 1001])
@pytest.mark.parametrize("speeds", [(None, None, None), (10.0, 20.0, 30.0), (1.0, None, 3.0), (5.0,)])
def test_shares_sum_to_the_total(total: int, speeds: tuple[float | None, ...]) -> None:
    parts = shares(total, _ranks(*speeds))
    assert sum(parts) == total and all(p >= 0 for p in parts)


def test_faster_ranks_get_more_once_every_rank_is_calibrated() -> None:
    assert shares(300, _ranks(10.0, 20.0)) == [200, 100]
    assert shares(300, _ranks(10.0, None)) == [150, 150]  # one uncalibrated rank: equal split


def test_by_speed_puts_uncalibrated_ranks_last_in_rank_order() -> None:
    assert [r.rank for r in by_speed(_ranks(None, 30.0, 10.0, None))] == [2, 1, 0, 3]


@pytest.mark.parametrize("size,parts", [(0, 3), (1, 3), (10, 3), (9, 3), (5, 1)])
def test_split_range_covers_the_range_without_gaps(size: int, parts: int) -> None:
    pieces = split_range(40, size, parts)
    assert len(pieces) == parts
    cursor = 40
    for start, n in pieces:
        assert start == cursor
        cursor += n
    assert cursor == 40 + size
    assert max(n for _, n in pieces) - min(n for _, n in pieces) <= 1


def test_quotas_fixed_and_adaptive() -> None:
    from actorwire.actors.control._ledger import quotas

    fast, slow = RankState(0, "worker/0", 0.0), RankState(1, "worker/1", 0.0)
    kw = dict(sync_every=4, anchor=2, dataset_size=1000, batch_size=10)
    assert quotas([fast, slow], policy="adaptive", **kw) == {0: 4, 1: 4}  # speeds unknown: sync_every
    fast.ms_per_batch, slow.ms_per_batch = 10.0, 30.0
    assert quotas([fast, slow], policy="fixed", **kw) == {0: 4, 1: 4}
    assert quotas([fast, slow], policy="adaptive", **kw) == {0: 6, 1: 2}  # three times as fast
    assert quotas([fast, slow], policy="adaptive", **{**kw, "anchor": 100}) == {0: 50, 1: 50}  # a share's cap
    assert quotas([], policy="adaptive", **kw) == {}


def test_the_anchor_doubles_at_most_and_shrinks_when_syncs_are_cheap() -> None:
    from actorwire.actors.control._ledger import adapt_anchor

    assert adapt_anchor(4, overhead=0.9, target=0.1) == 8  # nine times over: doubled, not more
    assert adapt_anchor(4, overhead=0.15, target=0.1) == 6
    assert adapt_anchor(10, overhead=0.01, target=0.1) == 8
    assert adapt_anchor(1, overhead=0.01, target=0.1) == 1
    assert adapt_anchor(5, overhead=0.07, target=0.1) == 5


def test_a_ranks_state_is_slotted_small_and_refuses_a_misspelt_field() -> None:
    """One per rank, walked at every cycle's close: 1.8 KB a rank with a dict of its own (its 30
    fields are past what an instance dict shares its keys for: 29 share them), 429 bytes slotted."""
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ranks = [RankState(i, "worker", 0.0) for i in range(2000)]
        per_rank = (tracemalloc.get_traced_memory()[0] - before) / len(ranks)
    finally:
        tracemalloc.stop()
    assert per_rank < 900, per_rank  # 429 here; a thread allocating meanwhile must not fail it
    with pytest.raises(AttributeError):
        ranks[0].acked_step = 3  # type: ignore[attr-defined]  # misspelt: an error, not a new field
    ranks[0].alive = False  # the flags still go through their setter
    assert not ranks[0].in_run


def test_what_a_lost_rank_trained_after_its_last_sync_is_handed_over_with_what_it_never_trained() -> None:
    """Batches of 10 over its plan (0, 45) and a slice handed to it (100, 20); 7 batches this epoch,
    the last completed sync covered 3 of them, the cycle in progress 5 (its ack not yet counted)."""
    r = RankState(0, "worker/0", 0.0)
    r.slices = [(0, 45), (100, 20)]
    r.epoch_start_steps, r.epoch_steps, r.synced_steps, r.acked_steps = 40, 7, 43, 45
    assert unsynced(r, acked=False, batch_size=10) == [(30, 15), (100, 20)]
    # Its ack says the reduce in progress completed: 5 batches of its work are in, its plan's 45 samples.
    assert unsynced(r, acked=True, batch_size=10) == [(100, 20)]
    # Each of its 7 batches in the model (it trained them all: 5 of its plan, 2 of the slice): nothing left.
    r.synced_steps = 99
    assert unsynced(r, acked=False, batch_size=10) == []


def test_a_lost_ranks_samples_are_dealt_to_the_survivors_in_order_and_counted_in_their_share() -> None:
    a, b = RankState(1, "worker/1", 0.0), RankState(2, "worker/2", 0.0)
    a.slices, b.slices = [(0, 10)], [(10, 10)]
    told = hand_over([(40, 5), (100, 20)], [a, b], epoch=3)
    assert [(s.rank, e) for s, e in told] == [
        (1, m.ExtendPartition(partition_offset=40, partition_size=5, epoch=3)),
        (1, m.ExtendPartition(partition_offset=100, partition_size=8, epoch=3)),
        (2, m.ExtendPartition(partition_offset=108, partition_size=12, epoch=3))]
    assert a.slices == [(0, 10), (40, 5), (100, 8)] and (a.extended, a.ext_sent) == (13, 2)
    assert b.slices == [(10, 10), (108, 12)] and (b.extended, b.ext_sent) == (12, 1)
    assert sum(e.partition_size for _, e in told) == 25  # every sample once
