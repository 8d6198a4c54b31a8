"""The coordinator's arithmetic, apart from its rules: every sample is handed out exactly once."""

from __future__ import annotations

import pytest

from actorwire.actors.control._ledger import RankState, by_speed, shares, split_range


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
