"""The coordinator's epoch reports, as a machine: no I/O, no clock.

Each rank reports an epoch with ``MetricsMsg`` (one, or one per chunk of a slice handed over
later, summed); the epoch ends once every rank in the run reported and finished the slices it was
handed (``ext_done >= ext_sent``), and its reports become one ``EpochMetrics``: whole (with its
per-rank lists) for the metrics sink, its summary in the history.
A report told again (sent once more after the relay that carried it died) carries the ``seq`` it
had and is not added twice.  A whole-group restart rewinds to the epoch it resumes from.

The coordinator owns the ranks and the messages: it hands a report in (:meth:`take`), asks
whether the epoch can end (:meth:`complete`), closes it (:meth:`close`) and sends the aggregate.
Tests: tests/actors/test_reports.py.
"""

from __future__ import annotations

import dataclasses

from actorwire.actors.control._ledger import RankState, add_metrics, aggregate
from actorwire.messages.kinds import EpochMetrics, MetricsMsg


@dataclasses.dataclass(eq=False)
class EpochReports:
    """What each rank reported of each epoch, and the epochs that ended."""

    #: epoch -> rank -> that rank's report (its chunks summed).
    by_epoch: dict[int, dict[int, MetricsMsg]] = dataclasses.field(default_factory=dict)
    #: The summary of each epoch that ended, in order (what the ranks were told: no per-rank lists,
    #: which go to the metrics sink; kept, they were ten lists of N an epoch for the whole run).
    history: list[EpochMetrics] = dataclasses.field(default_factory=list)

    def told_again(self, r: RankState | None, msg: MetricsMsg) -> bool:
        """Whether ``msg`` was taken already: its ``seq`` is one ``r`` reported before."""
        return bool(msg.seq) and r is not None and msg.seq <= r.metrics_seq

    def take(self, r: RankState, msg: MetricsMsg, epoch: int) -> bool:
        """``r``'s report, added to its epoch (``epoch``: the one in progress); False for one
        taken already."""
        if msg.seq:
            if msg.seq <= r.metrics_seq:
                return False
            r.metrics_seq = msg.seq
        per_epoch = self.by_epoch.setdefault(msg.epoch, {})
        previous = per_epoch.get(msg.rank)
        per_epoch[msg.rank] = msg if previous is None else add_metrics(previous, msg)
        r.reported_epoch = max(r.reported_epoch, msg.epoch)
        if msg.epoch == epoch:
            r.ext_done += msg.extensions
        return True

    def complete(self, epoch: int, alive: list[RankState]) -> bool:
        """Every rank in the run reported ``epoch`` and finished every slice it was handed."""
        reports = self.by_epoch.get(epoch, {})
        return len(reports) >= len(alive) and all(r.rank in reports and r.ext_done >= r.ext_sent for r in alive)

    def close(self, epoch: int, world: int) -> EpochMetrics:
        """``epoch``'s reports as the run's ``EpochMetrics`` (per-rank lists span ``world``), its
        summary kept in the history.  The reports of ``epoch`` and earlier go: nothing reads them once their
        epoch ended, and kept they were N reports an epoch for the whole run (60,000 live objects
        after 3 epochs of 20,000 ranks, the most numerous in the coordinator's process; the garbage
        collector walked them all at each full collection)."""
        metrics = aggregate(epoch, self.by_epoch.get(epoch, {}), world)
        self.history.append(summary(metrics))
        self.by_epoch = {e: v for e, v in self.by_epoch.items() if e > epoch}
        return metrics

    def last(self) -> EpochMetrics | None:
        """The summary of the last epoch that ended, as the ranks were told it; None before one ended."""
        return self.history[-1] if self.history else None

    def rewind(self, epoch: int) -> None:
        """A restart trains ``epoch`` and every later one again: their reports and aggregates go."""
        self.history = [h for h in self.history if h.epoch < epoch]
        self.by_epoch = {e: v for e, v in self.by_epoch.items() if e < epoch}


def summary(metrics: EpochMetrics) -> EpochMetrics:
    """An epoch's aggregate without its per-rank lists: what the ranks are told (whole, it is O(N)
    bytes to each of N ranks; the lists go to the metrics sink only)."""
    return EpochMetrics(epoch=metrics.epoch, avg_loss=metrics.avg_loss, epoch_ms=metrics.epoch_ms,
                        scalars=metrics.scalars)
