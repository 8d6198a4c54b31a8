"""A per-host relay: the ranks of one host report to it, and it tells the coordinator one
:class:`~actorwire.messages.kinds.RelayReport` per interval; the coordinator tells the ranks through it
(:class:`~actorwire.messages.kinds.Fanout`: one message per host, not per rank).

One coordinator takes ``N x 11`` messages a second from ``N`` ranks (a ``Batch`` at 10 Hz, a
``Heartbeat`` a second), each decoded, numbered, acknowledged and handled on its own.  Past a few
thousand ranks that per-message cost fills the coordinator's process (``bench scale``: at 10,000
its mailbox grew by gigabytes).  Behind relays the coordinator gets ``hosts x 10`` messages a second
and applies each report's columns in one loop.

Trust is proven, not assumed: a rank names its relay in its ``JoinRequest`` (which the runtime
proves came from the rank), the coordinator takes a relay's report for a rank only from the
relay that rank named, and the relay takes a rank's ``Batch`` only from that rank's actor
(``worker/R``, or ``worker/R/heartbeat`` for a heartbeat).  A relay cannot speak for a rank that
did not choose it; a local actor cannot speak for a rank through the relay.

A relay delays a batch by up to one interval (default 0.1 s).  A ``SyncAck`` or a ``MetricsMsg``
goes at once when it completes its host's answer (every rank told the last ``SyncNow`` acked, or
every rank with a plan reported), else with the next report.  Evals, checkpoints, group formation
and the rest of what ranks say go straight to the coordinator.  The coordinator's ``Fanout`` is
taken only from the relay's coordinator.  A relay's death is a fault the coordinator and the ranks
handle: they talk directly from then on, and each tells again what the relay may have lost (each
side takes a message told twice once).
"""

from __future__ import annotations

from actorwire.actors import _names
from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.runtime._replay import register_replayable
from actorwire.messages import Message
from actorwire.messages.kinds import (
    Batch,
    ExtendPartition,
    Fanout,
    Heartbeat,
    MetricsMsg,
    RelayReport,
    StartEpoch,
    SyncAck,
    SyncNow,
    TimerFired,
)
from actorwire.transport.internal import ActorDead, InvalidArgument, UnknownActor


class RelayBuffer:
    """What a relay holds between two reports (sans-IO: the caller decides when to take it)."""

    __slots__ = ("ranks", "batch_ms", "data_ms", "step_counts", "losses", "beats", "acks", "metrics",
                 "awaiting_acks", "working", "_at", "_folded")

    def __init__(self) -> None:
        self._clear()
        #: Ranks told the last ``SyncNow`` that have not acked it, and ranks told a plan (``StartEpoch``
        #: or ``ExtendPartition``) that have not reported since: while none is left, an ack or a
        #: report completes the host's answer and goes at once (``due``).
        self.awaiting_acks: set[int] = set()
        self.working: set[int] = set()

    def _clear(self) -> None:
        self.ranks: list[int] = []
        self.batch_ms: list[float] = []
        self.data_ms: list[float] = []
        self.step_counts: list[int] = []
        self.losses: list[float] = []
        self.beats: set[int] = set()
        self.acks: list[SyncAck] = []
        self.metrics: list[MetricsMsg] = []
        self._at: dict[int, int] = {}  # rank -> its entry
        self._folded: list[int] = []   # batches in each entry

    def __len__(self) -> int:
        return len(self.ranks) + len(self.beats) + len(self.acks) + len(self.metrics)

    def batch(self, rank: int, batch_ms: float, step_count: int, loss: float, data_ms: float = 0.0,
              batches: int = 1) -> None:
        """``batches`` batches of ``rank`` (up to its ``step_count``; times and loss their mean): one
        entry per rank and report, their means taken (a rank's second batch in a report widens its
        entry; the coordinator counts a rank's batches by its step count)."""
        i = self._at.get(rank)
        if i is None or step_count == 0:  # (a step count of 0, "not said", is one batch an entry)
            self._at[rank] = len(self.ranks)
            self.ranks.append(rank)
            self.batch_ms.append(batch_ms)
            self.data_ms.append(data_ms)
            self.step_counts.append(step_count)
            self.losses.append(loss)
            self._folded.append(batches)
            return
        n = self._folded[i]
        total = n + batches
        self.batch_ms[i] = (self.batch_ms[i] * n + batch_ms * batches) / total
        self.data_ms[i] = (self.data_ms[i] * n + data_ms * batches) / total
        self.losses[i] = (self.losses[i] * n + loss * batches) / total
        self.step_counts[i] = max(self.step_counts[i], step_count)
        self._folded[i] = total

    def beat(self, rank: int) -> None:
        self.beats.add(rank)

    def take_report(self, report: RelayReport) -> None:
        """A relay below this one reported (a rack relay folds its host relays' reports again)."""
        for i, rank in enumerate(report.ranks):
            self.batch(rank, report.batch_ms[i], report.step_counts[i], report.losses[i], report.data_ms[i])
        self.beats.update(report.beats)
        for ack in report.acks:
            self.ack(ack)
        for metrics in report.metrics:
            self.report(metrics)

    def ack(self, msg: SyncAck) -> None:
        self.acks.append(msg)
        self.awaiting_acks.discard(msg.rank)

    def report(self, msg: MetricsMsg) -> None:
        self.metrics.append(msg)
        self.working.discard(msg.rank)

    def told(self, rank: int, message: Message) -> None:
        """The coordinator told ``rank`` ``message`` through this relay."""
        if isinstance(message, SyncNow):
            self.awaiting_acks.add(rank)
        elif isinstance(message, (StartEpoch, ExtendPartition)):
            self.working.add(rank)

    @property
    def due(self) -> bool:
        """An ack or a report completes what the host owes: report now, not at the interval."""
        return bool(self.acks and not self.awaiting_acks) or bool(self.metrics and not self.working)

    def take(self) -> RelayReport | None:
        """The report of everything added since the last one, or None when nothing was."""
        if not self:
            return None
        report = RelayReport(ranks=self.ranks, batch_ms=self.batch_ms, data_ms=self.data_ms,
                             step_counts=self.step_counts, losses=self.losses,
                             beats=sorted(self.beats.difference(self._at)),  # a batch says it is alive
                             acks=self.acks, metrics=self.metrics)
        self._clear()
        return report


@register_replayable
class Relay(Actor):
    """Forwards the ``Batch`` and ``Heartbeat`` reports of the ranks of its host, ``interval`` s at
    a time.  Run one per host (``relay/<host>``) and give each rank ``relay=`` that name."""

    def __init__(self, coordinator: str = "coordinator", interval: float = 0.1) -> None:
        if interval <= 0:
            raise InvalidArgument(f"interval must be positive, got {interval}")
        self.coordinator = coordinator
        self.interval = interval
        self.buffer = RelayBuffer()
        #: Reports refused because the sender was not the rank's actor, by sender.
        self.refused: dict[str, int] = {}

    def on_start(self, ctx: Context) -> None:
        ctx.start_timer("flush", self.interval, periodic=True)

    def _from(self, ctx: Context, rank: int, *allowed: str) -> bool:
        if ctx.sender in allowed:
            return True
        sender = ctx.sender or "?"
        self.refused[sender] = self.refused.get(sender, 0) + 1
        if self.refused[sender] == 1:
            ctx.log.warning("refused a report for a rank from an actor that is not that rank; further "
                            "ones are counted", rank=rank, sender=sender)
        return False

    @handler
    def on_batch(self, msg: Batch, ctx: Context) -> None:
        if self._from(ctx, msg.rank, _names.worker(msg.rank)):
            self.buffer.batch(msg.rank, msg.batch_ms, msg.step_count, msg.batch_loss, msg.data_ms)

    @handler
    def on_heartbeat(self, msg: Heartbeat, ctx: Context) -> None:
        if self._from(ctx, msg.rank, _names.worker(msg.rank), _names.worker_heartbeat(msg.rank)):
            self.buffer.beat(msg.rank)

    @handler
    def on_sync_ack(self, msg: SyncAck, ctx: Context) -> None:
        if self._from(ctx, msg.rank, _names.worker(msg.rank)):
            self.buffer.ack(msg)
            if self.buffer.due:
                self._flush(ctx)

    @handler
    def on_metrics(self, msg: MetricsMsg, ctx: Context) -> None:
        if self._from(ctx, msg.rank, _names.worker(msg.rank)):
            self.buffer.report(msg)
            if self.buffer.due:
                self._flush(ctx)

    @handler
    def on_fanout(self, msg: Fanout, ctx: Context) -> None:
        """Tell each rank what the coordinator told it, in order; only the coordinator's."""
        if ctx.sender != self.coordinator or len(msg.messages) not in (1, len(msg.ranks)):
            sender = ctx.sender or "?"
            self.refused[sender] = self.refused.get(sender, 0) + 1
            if self.refused[sender] == 1:
                ctx.log.warning("refused a fanout: not from the coordinator, or its lists do not match; "
                                "further ones are counted", sender=sender, coordinator=self.coordinator)
            return
        one = len(msg.messages) == 1
        for i, rank in enumerate(msg.ranks):
            message = msg.messages[0 if one else i]
            self.buffer.told(rank, message)
            try:
                ctx.tell(_names.worker(rank), message)
            except (ActorDead, UnknownActor):
                pass  # a rank that just went: the coordinator hears of it from the runtime

    @handler
    def on_timer(self, msg: TimerFired, ctx: Context) -> None:
        self._flush(ctx)

    def _flush(self, ctx: Context) -> None:
        report = self.buffer.take()
        if report is None:
            return
        try:
            ctx.tell(self.coordinator, report)
        except (ActorDead, UnknownActor):
            ctx.log.warning("the coordinator is gone; the relay stops", coordinator=self.coordinator)
            ctx.stop()
