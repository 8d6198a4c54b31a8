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
