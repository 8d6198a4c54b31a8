"""The coordinator's epoch reports (``_reports.EpochReports``): no actor, no clock."""

from __future__ import annotations

from actorwire.actors.control._ledger import RankState
from actorwire.actors.control._reports import EpochReports, summary
from actorwire.messages.kinds import MetricsMsg


def _ranks(n: int) -> list[RankState]:
    return [RankState(k, f"worker/{k}", 0.0) for k in range(n)]


def _report(rank: int, epoch: int = 0, *, loss: float = 1.0, batches: int = 2, samples: int = 8, seq: int = 0,
            extensions: int = 0) -> MetricsMsg:
    return MetricsMsg(rank=rank, epoch=epoch, avg_loss=loss, batches_processed=batches, epoch_ms=10.0 * (rank + 1),
                      samples_processed=samples, seq=seq, extensions=extensions)


def test_the_epoch_ends_once_every_rank_in_the_run_reported() -> None:
    reports, ranks = EpochReports(), _ranks(3)
    for r in ranks[:2]:
        assert reports.take(r, _report(r.rank), epoch=0)
        assert not reports.complete(0, ranks)
    assert reports.take(ranks[2], _report(2), epoch=0)
    assert reports.complete(0, ranks)
    assert not reports.complete(1, ranks)
    assert [r.reported_epoch for r in ranks] == [0, 0, 0]


def test_a_rank_still_on_a_slice_it_was_handed_holds_the_epoch_open_until_its_chunk_is_in() -> None:
    reports, ranks = EpochReports(), _ranks(2)
    ranks[1].ext_sent = 1  # a dead rank's remainder went to rank 1
    reports.take(ranks[0], _report(0), epoch=0)
    reports.take(ranks[1], _report(1), epoch=0)
    assert not reports.complete(0, ranks)
    reports.take(ranks[1], _report(1, batches=1, samples=4, loss=4.0, extensions=1), epoch=0)
    assert reports.complete(0, ranks)
    merged = reports.by_epoch[0][1]  # the chunks of one rank summed: batches, samples, a batch-weighted loss
    assert (merged.batches_processed, merged.samples_processed, merged.avg_loss) == (3, 12, 2.0)


def test_extensions_of_an_earlier_epoch_do_not_count_for_the_one_in_progress() -> None:
    reports, (r,) = EpochReports(), _ranks(1)
    reports.take(r, _report(0, epoch=0, extensions=1), epoch=1)
    assert r.ext_done == 0 and r.reported_epoch == 0


def test_a_report_told_again_is_counted_once() -> None:
    reports, (r,) = EpochReports(), _ranks(1)
    first = _report(0, seq=1)
    assert not reports.told_again(r, first)
    assert reports.take(r, first, epoch=0)
    assert reports.told_again(r, first)
    assert not reports.take(r, first, epoch=0)  # sent again after its relay died
    assert reports.by_epoch[0][0].batches_processed == 2
    assert reports.take(r, _report(0, seq=2), epoch=0)  # the next one is new
    assert reports.by_epoch[0][0].batches_processed == 4


def test_a_report_without_a_number_is_always_taken() -> None:
    reports, (r,) = EpochReports(), _ranks(1)
    assert not reports.told_again(r, _report(0)) and not reports.told_again(None, _report(0, seq=1))
    assert reports.take(r, _report(0), epoch=0) and reports.take(r, _report(0), epoch=0)
    assert reports.by_epoch[0][0].batches_processed == 4


def test_closing_an_epoch_aggregates_exactly_and_the_ranks_get_the_summary_without_per_rank_lists() -> None:
    reports, ranks = EpochReports(), _ranks(3)
    assert reports.last() is None
    for r, loss in zip(ranks, (1.0, 2.0, 6.0), strict=True):
        reports.take(r, _report(r.rank, loss=loss, batches=r.rank + 1, samples=10 * (r.rank + 1)), epoch=0)
    metrics = reports.close(0, world=4)  # rank 3 reported nothing: zeros and None
    assert metrics.avg_loss == (1.0 * 1 + 2.0 * 2 + 6.0 * 3) / 6
    assert metrics.per_rank_samples == [10, 20, 30, 0] and metrics.per_rank_loss == [1.0, 2.0, 6.0, None]
    assert reports.history == [summary(metrics)]
    told = reports.last()
    assert told == summary(metrics) and told is not None
    assert (told.epoch, told.avg_loss, told.epoch_ms) == (0, metrics.avg_loss, metrics.epoch_ms)
    assert told.per_rank_samples == [] and told.per_rank_loss == []


def test_a_restart_rewinds_to_the_epoch_it_resumes_from() -> None:
    reports, (r,) = EpochReports(), _ranks(1)
    for epoch in range(3):
        reports.take(r, _report(0, epoch=epoch), epoch=epoch)
        reports.close(epoch, world=1)
    reports.take(r, _report(0, epoch=3), epoch=3)
    reports.rewind(2)
    assert [h.epoch for h in reports.history] == [0, 1] and reports.by_epoch == {}
    last = reports.last()
    assert last is not None and last.epoch == 1


def test_an_epoch_s_reports_go_once_it_closed_and_a_later_epoch_s_stay() -> None:
    """Kept, they were N reports an epoch for the whole run in the coordinator's memory."""
    reports, (r,) = EpochReports(), _ranks(1)
    reports.take(r, _report(0, epoch=0), epoch=0)
    reports.take(r, _report(0, epoch=1), epoch=0)
    reports.close(0, world=1)
    assert sorted(reports.by_epoch) == [1]
    reports.close(1, world=1)
    assert reports.by_epoch == {} and [h.epoch for h in reports.history] == [0, 1]


def test_the_history_keeps_each_epoch_s_summary_not_its_per_rank_lists() -> None:
    """Ten lists of N an epoch, kept for the whole run, grew with ranks x epochs; the sink has them."""
    reports, ranks = EpochReports(), _ranks(3)
    for epoch in range(2):
        for r in ranks:
            reports.take(r, _report(r.rank, epoch=epoch), epoch=epoch)
        whole = reports.close(epoch, world=3)
        assert whole.per_rank_samples == [8, 8, 8]  # what the metrics sink gets
    assert [h.epoch for h in reports.history] == [0, 1]
    assert all(h.per_rank_samples == [] and h.per_rank_loss == [] and h.per_rank == [] for h in reports.history)
