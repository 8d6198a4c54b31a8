"""The rules checked after every step and at the end (see the package doc), and the model's
book-keeping at each reduce."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from actorwire.actors.control._simulate._model import (
    COORDINATOR_LOSS_BOUND,
    EXIT_DETECTION,
    PARAMS,
    InvariantBroken,
    SimModel,
)
from actorwire.actors.control._simulate._rank import SimRank, _Group
from actorwire.messages import kinds as m

if TYPE_CHECKING:
    from actorwire.actors.control._simulate._runner import Simulation


def trains_from(self: Simulation, rank: SimRank) -> None:
    """``rank`` trains a batch: on the run's one initial model, never on an initialisation of its own."""
    origin = rank.model.origin
    self.last_batch_at = self.now
    c = self.coordinator
    r = c.ranks.get(rank.rank)
    if r is not None:  # how far past its last sync it trains, in its lead bounds (Throttle's measure)
        self.lead = max(self.lead, (rank.protocol.steps_since_sync + 1) / c.sync.lead_bound(r))
    if len(c.losses.restarts) != self._restarts_seen:
        # The coordinator resumed a group its launcher started again; with no checkpoint it
        # started the run over, from a new initial model (the old one died with the ranks).
        self._restarts_seen = len(c.losses.restarts)
        if c.roles.written is None:
            self.trained_origin = None
    if self.trained_origin is None:
        self.trained_origin = origin
    elif origin != self.trained_origin:
        self._fail(f"rank {rank.rank} trains from initialisation {sorted(origin)}, not the run's "
                   f"{sorted(self.trained_origin)}: it never took the current model from a peer")


def reduced(self: Simulation, group: _Group, cycle: int) -> None:
    """Every member entered the all-reduce of ``cycle``: each now holds the same model, the average
    of the members' by their weights (``reduce_weight``); a weight of 0 takes the others' average."""
    weights = group.weights.get(cycle, {})
    members = sorted(group.members.items())
    group.covered = sum(r.protocol.steps_since_sync for _, r in members)
    weighted = [(weights.get(pos, 0.0), r) for pos, r in members if weights.get(pos, 0.0) > 0]
    if not weighted:
        group.covered = -1  # the real reduce raises: nobody holds the run's model
        return
    first = weighted[0][1].model
    for _, r in weighted[1:]:
        if r.model.origin != first.origin:
            self._fail(f"cycle {cycle}: rank {r.rank}'s initialisation {sorted(r.model.origin)} was averaged "
                       f"with initialisation {sorted(first.origin)}")
        if (r.model.base, r.model.base_steps) != (first.base, first.base_steps):
            self._fail(f"cycle {cycle}: ranks {weighted[0][1].rank} and {r.rank} averaged models that had "
                       f"not come from the same reduce")
    total = sum(w for w, _ in weighted)
    params = [sum(w * r.model.params[j] for w, r in weighted) / total for j in range(PARAMS)]
    base = first.base.copy()
    steps = first.base_steps
    for _, r in weighted:
        base.update(r.model.delta)
        steps += r.model.delta_steps
        r.unacked = r.model.delta.copy()
    for _, r in members:
        r.model = SimModel(list(params), first.origin, base.copy(), steps)
    self.reduced_steps = steps


def _fail(self: Simulation, rule: str) -> None:
    raise InvariantBroken(f"seed {self.seed} at {self.now:.3f} s: {rule} "
                          f"(faults: {'; '.join(map(str, self.faults)) or 'none'})")


def _check(self: Simulation) -> None:
    c = self.coordinator
    if self.coordinator_died is not None:
        if self.now > self.coordinator_died + COORDINATOR_LOSS_BOUND:
            left = [r.rank for r in self.incarnations if r.alive]
            self._fail(f"rank(s) {left} still running {COORDINATOR_LOSS_BOUND:g} s after the coordinator died")
        return
    if self.now > self.deadline:
        self._fail(f"the run has not ended after {self.deadline:.0f} s (phase {c.phase}, epoch {c.epoch})")
    in_run = [r for _, r in sorted(c.ranks.items()) if r.alive and not r.exited and not r.waiting]
    if c.alive() != in_run or c.roster.in_run != len(in_run):
        self._fail(f"the coordinator's list of ranks in the run {[r.rank for r in c.alive()]} "
                   f"(count {c.roster.in_run}) is not {[r.rank for r in in_run]}")
    sync = c.sync
    if not sync.in_progress:
        # The gate's kept scan (``SyncCadence.unchecked``) against a scan of every rank from scratch.
        live = [r for r in c.ranks.values() if r.alive and not r.exited]
        fresh = not any(sync.blocks(r, c.epoch, c.settings.batch_size) for r in live) and \
            any(r.steps_since_sync > 0 or r.throttled for r in live)
        kept = sync.gate_open(c.ranks.values(), c.epoch, c.settings.batch_size)
        if kept != fresh:
            self._fail(f"the sync gate's kept scan says {'open' if kept else 'closed'}, a scan of every rank "
                       f"{'open' if fresh else 'closed'} (epoch {c.epoch})")
    limit = self.staleness + self.tick + EXIT_DETECTION[1] + 0.1
    for rank, died in self.died_at.items():
        state = c.ranks.get(rank)
        # From its death, or from its join if that came later (a join held back by a cut link
        # arrives after the runtime gave up on the rank: the coordinator learns of it only then).
        if state is not None and state.alive and not state.exited and self.now - max(died, state.joined_at) > limit \
                and c.phase != "stopping":
            self._fail(f"rank {rank} died at {died:.3f} s and is still believed alive")
    for rank in self.exited_cleanly:
        state = c.ranks.get(rank)
        if rank in c.losses.at_start or (state is not None and not state.alive and not state.exited
                                       and not state.told_to_leave):
            self._fail(f"rank {rank} left cleanly and was counted as lost")


def _check_epochs(self: Simulation) -> None:
    """Every sample of every aggregated epoch trained, and no sample by two live ranks."""
    c = self.coordinator
    for metrics in c.reports.history:
        epoch = metrics.epoch
        trained = [r.trained.get(epoch, set()) for r in self.incarnations]
        covered = set().union(*trained)
        missing = set(range(self.dataset)) - covered
        if missing:
            self._fail(f"epoch {epoch} was aggregated with {len(missing)} samples never trained "
                       f"(first {min(missing)})")
        counted = [s for r, s in zip(self.incarnations, trained)
                   if self.ranks[r.rank] is r and c.ranks.get(r.rank) and c.ranks[r.rank].alive]
        for i, a in enumerate(counted):
            for b in counted[i + 1:]:
                if a & b:
                    self._fail(f"epoch {epoch}: two live ranks trained sample {min(a & b)}")


def finishers(self: Simulation) -> list[SimRank]:
    """The ranks that end the run: told that it ended, counted in it, and gone with status 0."""
    c = self.coordinator
    return [r for r in self.ranks if r.state == "exited" and id(r) in self.told_end
            and (state := c.ranks.get(r.rank)) is not None and state.alive and state.name == r.name]


def _check_model(self: Simulation) -> None:
    """At the end of a run that trained every epoch: one model on every rank, holding every sample of
    every epoch once (but those lost with a dead rank, see the module doc), and the last global step."""
    finishers = self.finishers()
    if not finishers:
        if not self.faults:
            self._fail("the run ended cleanly and no rank finished it")
        return  # the last ranks were lost after the last epoch, before they left: nothing to compare
    model = finishers[0].model
    for r in finishers[1:]:
        if r.model.params != model.params:
            self._fail(f"ranks {finishers[0].rank} and {r.rank} finished with different parameters "
                       f"({model.params} and {r.model.params}; unsynced steps "
                       f"{finishers[0].model.delta_steps} and {r.model.delta_steps})")
    holds = model.holds()
    final = {id(r) for r in finishers}
    lost: collections.Counter[tuple[int, int]] = collections.Counter()
    # Declared dead after a reduce took its work and before its ack was counted: the coordinator
    # hands what it trained since its previous sync to the survivors, so that part may be in the
    # model twice (never lost).
    twice: collections.Counter[tuple[int, int]] = collections.Counter()
    for r in self.incarnations:
        if id(r) not in final:
            lost.update(r.model.delta)
            twice.update(r.unacked)
    for metrics in self.coordinator.reports.history:
        epoch = metrics.epoch
        for i in range(self.dataset):
            n = holds[(epoch, i)]
            if n > 1 + twice[(epoch, i)]:
                self._fail(f"sample {i} of epoch {epoch} is in the final model {n} times")
            if n == 0 and not lost[(epoch, i)]:
                self._fail(f"sample {i} of epoch {epoch} is not in the final model, and no rank that died "
                           f"held it unsynced")
    steps = model.base_steps + model.delta_steps
    if self.coordinator.global_step != steps:
        self._fail(f"the last global step is {self.coordinator.global_step}; the final model holds {steps} steps")


def _check_end(self: Simulation) -> None:
    c = self.coordinator
    if self.coordinator_died is not None:
        left = [r.rank for r in self.incarnations if r.alive]
        if left:
            self._fail(f"rank(s) {left} never left after the coordinator died")
        self._check_epochs()
        return
    if self.ended is None:
        self._fail(f"the coordinator stopped without Shutdown or ShutdownWithSave (phase {c.phase})")
    if isinstance(self.ended, m.ShutdownWithSave) and not self.ended.detail:
        self._fail(f"ShutdownWithSave({self.ended.reason.value}) without a detail")
    if isinstance(self.ended, m.Shutdown) and len(c.reports.history) != self.epochs:
        self._fail(f"Shutdown after {len(c.reports.history)} of {self.epochs} epochs")
    self._check_epochs()
    if self.backend == "nccl" and isinstance(self.ended, m.Shutdown):
        started = next((t for t, msg in self.sunk if isinstance(msg, m.StartEpoch)), None)
        lost_running = started is not None and any(started < t < self.last_batch_at for t in self._deaths)
        live = [r for r in c.ranks.values() if r.alive]
        # A group the launcher started again whole is no survivor (a world of one restarted).
        restored = bool(c.losses.restarts) and len(live) == self.world
        if lost_running and len(live) < 2 and not restored:
            self._fail("an NCCL run went on with one survivor after a death (it must save: single_survivor)")
    if isinstance(self.ended, m.Shutdown):
        self._check_model()
    for r in self.ranks:
        state = c.ranks.get(r.rank)
        believed = state is not None and state.alive and not state.exited  # a dead one hears silence
        if believed and r.state == "joined" and not r.declared_down and id(r) not in self.told_end:
            self._fail(f"rank {r.rank} was never told that the run ended (it waits for plans)")
    early = {key: n for key, n in c.refused_from_live.items() if key[1] != "stopping"}
    if early:
        self._fail(f"the coordinator refused messages as out of phase: {early}")
    if self.faults == [] and isinstance(self.ended, m.ShutdownWithSave):
        self._fail(f"a run without faults ended with {self.ended.reason.value}: {self.ended.detail}")
