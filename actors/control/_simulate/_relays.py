"""Per-host relays in simulated time (``Simulation(relays=True)``, ``actorwire simulate --relays``).

Each relay folds the ``Batch``, ``Heartbeat``, ``SyncAck`` and ``MetricsMsg`` of its host's ranks
into one ``RelayReport`` per interval (at once when an ack or a report completes the host's
answer), with the real :class:`~actorwire.actors.control._relay.RelayBuffer`, and the coordinator
takes the report as it takes a real relay's (from the relay its ranks named at their join); the
coordinator's ``Fanout`` reaches the ranks through it.  A relay's death (``kill_relay``) loses what
it held, both ways; its ranks and the coordinator learn it from the runtime (``Down``) after the
launcher's exit detection, and what was sent to it before that is lost, as a tell to a process that
died is.  From then on the real rank protocol (``relay_gone``) and the real coordinator talk
directly, and each tells again what the relay may have lost.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from actorwire.actors.control._relay import RelayBuffer
from actorwire.actors.control._simulate._model import COORD, EXIT_DETECTION
from actorwire.messages import Message
from actorwire.messages import kinds as m

if TYPE_CHECKING:
    from actorwire.actors.control._simulate._rank import SimRank
    from actorwire.actors.control._simulate._runner import Simulation

#: How often a relay reports (the real relay's default).
RELAY_INTERVAL = 0.1
#: What a rank with a relay tells it rather than the coordinator.
RELAYED = (m.Batch, m.Heartbeat, m.SyncAck, m.MetricsMsg)


class SimRelay:
    """One host's relay."""

    def __init__(self, sim: Simulation, name: str) -> None:
        self.sim = sim
        self.name = name
        self.buffer = RelayBuffer()
        self.died_at: float | None = None
        sim.after(RELAY_INTERVAL, self.flush)

    def known_dead(self) -> bool:
        """The runtime knows it died: a tell to it fails (the rank reports to the coordinator itself)."""
        return self.died_at is not None and self.sim.now >= self.died_at + EXIT_DETECTION[1]

    def take(self, message: Message) -> None:
        if self.died_at is not None:
            return  # sent before the rank knew: lost with the process
        if isinstance(message, m.Batch):
            self.buffer.batch(message.rank, message.batch_ms, message.step_count, message.batch_loss, message.data_ms)
        elif isinstance(message, m.Heartbeat):
            self.buffer.beat(message.rank)
        elif isinstance(message, m.SyncAck):
            self.buffer.ack(message)
        elif isinstance(message, m.MetricsMsg):
            self.buffer.report(message)
        if self.buffer.due:
            self._report()

    def fan(self, fanout: m.Fanout) -> None:
        """The coordinator's ``Fanout``: each rank is told its message, in order per rank."""
        if self.died_at is not None:
            return  # lost with the process
        sim = self.sim
        one = len(fanout.messages) == 1
        for i, rank in enumerate(fanout.ranks):
            message = fanout.messages[0 if one else i]
            self.buffer.told(rank, message)
            target = next((r for r in sim.ranks if r.rank == rank), None)
            if target is not None:
                sim.messages += 1
                sim.at(sim._delay((self.name, target.name), rank), functools.partial(target.receive, message))

    def flush(self) -> None:
        if self.died_at is not None or self.sim.harness.ctx.stopped or self.sim.coordinator_died is not None:
            return
        self._report()
        self.sim.after(RELAY_INTERVAL, self.flush)

    def _report(self) -> None:
        sim = self.sim
        if sim.harness.ctx.stopped or sim.coordinator_died is not None:
            return
        report = self.buffer.take()
        if report is not None:
            sim.messages += 1
            when = sim._delay((self.name, COORD), -1)
            sim.at(when, lambda: sim._coordinator(functools.partial(self._deliver, report)))

    def _deliver(self, report: m.RelayReport) -> list[Any]:
        sim = self.sim
        sent = sim.harness.deliver(report, sender=self.name)
        for ack in report.acks:  # counted: the coordinator knows those ranks' work is in the model
            state = sim.coordinator.ranks.get(ack.rank)
            rank = next((r for r in sim.ranks if r.rank == ack.rank), None)
            if rank is not None and state is not None and state.alive and state.name == rank.name:
                rank.unacked.clear()
        return sent

    def kill(self) -> None:
        """Its process dies: what it held is lost; its ranks are told ``Down`` once the runtime knows."""
        if self.died_at is not None:
            return
        self.died_at = self.sim.now
        self.buffer = RelayBuffer()
        self.sim.after(EXIT_DETECTION[1], self._tell_down)

    def _tell_down(self) -> None:
        sim = self.sim
        down = m.Down(name=self.name, reason=m.DownReason.DEAD, detail="status -9")
        sim._coordinator(lambda: sim.harness.down(self.name, m.DownReason.DEAD, "status -9"))
        for rank in sim.incarnations:
            if rank.alive and rank.protocol.relay == self.name:
                rank.receive(down)


def route(sim: Simulation, rank: SimRank, message: Message) -> bool:
    """Send a rank's ``Batch``, ``Heartbeat``, ``SyncAck`` or ``MetricsMsg`` through its relay (as
    the real rank protocol does while it has one); False when it goes to the coordinator."""
    if not isinstance(message, RELAYED) or not rank.protocol.relay:
        return False
    if sim.now < sim.partitioned.get(rank.rank, 0.0):
        return False  # a cut host: its relay is cut too (the link to the coordinator holds it)
    relay = sim.relays[rank.protocol.relay]
    if relay.known_dead():
        # The real Worker's tell fails: it says so, and this report and the rest go straight.
        rank.run(rank.protocol.relay_gone(f"actor {relay.name!r} is dead"))
        return False
    sim.after(sim.rng.uniform(0.0001, 0.001), lambda: relay.take(message))
    return True
