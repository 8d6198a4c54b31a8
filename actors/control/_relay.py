"""A per-host relay: the ranks of one host report their batches to it, and it tells the
coordinator one :class:`~actorwire.messages.RelayReport` per interval.

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

A relay delays a batch by up to one interval (default 0.1 s).  Syncs, metrics, evals and the
rest of the protocol go straight to the coordinator, as before.
"""

from __future__ import annotations

from actorwire.actors import _names
from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.runtime._replay import register_replayable
from actorwire.messages import Batch, Heartbeat, RelayReport, TimerFired
from actorwire.transport.internal import ActorDead, InvalidArgument, UnknownActor


class RelayBuffer:
    """What a relay holds between two reports (sans-IO: the caller decides when to take it)."""

    __slots__ = ("ranks", "batch_ms", "data_ms", "step_counts", "losses", "beats")

    def __init__(self) -> None:
        self.ranks: list[int] = []
        self.batch_ms: list[float] = []
        self.data_ms: list[float] = []
        self.step_counts: list[int] = []
        self.losses: list[float] = []
        self.beats: set[int] = set()

    def __len__(self) -> int:
        return len(self.ranks) + len(self.beats)

    def batch(self, rank: int, batch_ms: float, step_count: int, loss: float, data_ms: float = 0.0) -> None:
        self.ranks.append(rank)
        self.batch_ms.append(batch_ms)
        self.data_ms.append(data_ms)
        self.step_counts.append(step_count)
        self.losses.append(loss)

    def beat(self, rank: int) -> None:
        self.beats.add(rank)

    def take(self) -> RelayReport | None:
        """The report of everything added since the last one, or None when nothing was."""
        if not self:
            return None
        report = RelayReport(ranks=self.ranks, batch_ms=self.batch_ms, data_ms=self.data_ms,
                             step_counts=self.step_counts, losses=self.losses, beats=sorted(self.beats))
        self.__init__()  # type: ignore[misc]
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
    def on_timer(self, msg: TimerFired, ctx: Context) -> None:
        report = self.buffer.take()
        if report is None:
            return
        try:
            ctx.tell(self.coordinator, report)
        except (ActorDead, UnknownActor):
            ctx.log.warning("the coordinator is gone; the relay stops", coordinator=self.coordinator)
            ctx.stop()
