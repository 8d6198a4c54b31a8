"""Events in simulated time and the network: every message delivered after a seeded delay, in
order per link."""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actorwire.actors import _names
from actorwire.actors.control._simulate._model import COORD, JOIN_GIVE_UP, SINK
from actorwire.actors.control._simulate._rank import SimRank
from actorwire.messages import Message
from actorwire.messages import kinds as m

if TYPE_CHECKING:
    from actorwire.actors.control._simulate._runner import Simulation


def at(self: Simulation, when: float, action: Callable[[], None]) -> None:
    heapq.heappush(self._events, (when, next(self._order), action))


def after(self: Simulation, delay: float, action: Callable[[], None]) -> None:
    self.at(self.now + delay, action)


def _delay(self: Simulation, link: tuple[str, str], rank: int) -> float:
    delay = self.rng.uniform(0.0002, 0.005) + (0.5 if self.now < self.delayed_until else 0.0)
    when = max(self.now + delay, self._links.get(link, 0.0))  # in order per link
    if self.now < self.partitioned.get(rank, 0.0):
        when = max(when, self.partitioned[rank])
    self._links[link] = when
    return when


def to_coordinator(self: Simulation, rank: SimRank, message: Message, *, sender: str, corr: int) -> None:
    self.messages += 1
    if self.coordinator_died is not None:  # nobody there: a join is never answered
        if isinstance(message, m.JoinRequest):
            self.after(JOIN_GIVE_UP, functools.partial(self.process_exit, rank, 1))
        return
    # Behind a cut link a message waits in the sender's process (ZeroMQ queues it there): a
    # process killed meanwhile takes it along.
    held = self.now < self.partitioned.get(rank.rank, 0.0)
    self.at(self._delay((rank.name, COORD), rank.rank), lambda: self._coordinator(
        functools.partial(self._deliver, rank, message, sender, corr, held)))


def _deliver(self: Simulation, rank: SimRank, message: Message, sender: str, corr: int, held: bool) -> list[Any]:
    if held and rank.state == "dead":
        return []
    sent = self.harness.deliver(message, sender=sender, correlation_id=corr)
    state = self.coordinator.ranks.get(rank.rank)
    if isinstance(message, m.SyncAck) and state is not None and state.alive and state.name == rank.name:
        rank.unacked.clear()  # counted: the coordinator knows its work is in the model
    return sent


def _coordinator(self: Simulation, step: Callable[[], list[Any]]) -> None:
    if self.harness.ctx.stopped or self.coordinator_died is not None:
        return
    self.harness.ctx.known.update(r.name for r in self.ranks if not r.declared_down)
    for r in self.ranks:
        if r.declared_down:
            self.harness.ctx.known.discard(r.name)
    self.harness.ctx.known.update(_names.worker_heartbeat(r.rank) for r in self.ranks)
    self.harness.ctx.known.update(name for name, relay in self.relays.items() if not relay.known_dead())
    for sent in step():
        self._route(sent)
    for r in self.ranks:
        if r.declared_down and r.name in self.harness.ctx.watched:
            # The runtime answers a watch of a name it has already declared down with Down at
            # once (a join held back by a cut link, or sent just before a stop, arrives late).
            reason = m.DownReason.UNREACHABLE if r.alive else m.DownReason.DEAD
            self._coordinator(functools.partial(self.harness.down, r.name, reason, "already down"))


def _route(self: Simulation, sent: Any) -> None:
    message = sent.message
    if sent.target == SINK:
        self.sunk.append((self.now, message))
        if isinstance(message, m.ShutdownWithSave) and self.ended is None:
            self.ended, self.ended_at = message, self.now
        return
    relay = self.relays.get(sent.target)
    if relay is not None:
        if isinstance(message, m.Fanout):
            one = len(message.messages) == 1
            for i, r in enumerate(message.ranks):
                self._told(_names.worker(r), message.messages[0 if one else i])
            self.messages += 1
            self.at(self._delay((COORD, relay.name), -1), functools.partial(relay.fan, message))
        return
    rank = self._told(sent.target, message)
    if rank is None:
        return
    self.messages += 1
    self.at(self._delay((COORD, rank.name), rank.rank), lambda: rank.receive(message))


def _told(self: Simulation, target: str, message: Message) -> SimRank | None:
    """What the coordinator told ``target`` (straight or through its relay), as the checks see it."""
    if isinstance(message, m.Shutdown) and self.ended is None and self.coordinator.phase == "stopping":
        self.ended, self.ended_at = message, self.now  # the end of the run, not one rank told to leave
    rank = next((r for r in self.ranks if r.name == target), None)
    if rank is None:
        return None
    if isinstance(message, (m.Shutdown, m.ShutdownWithSave)):
        self.told_end.add(id(rank))
    if isinstance(message, m.SetGlobalStep) and message.global_step != self.reduced_steps:
        self._fail(f"SetGlobalStep({message.global_step}) after a reduce that covered {self.reduced_steps} steps")
    return rank


def _advance_to(self: Simulation, when: float) -> list[Any]:
    return self.harness.advance(max(0.0, when - self.harness.ctx.clock))
