"""The fault schedule and what each fault does to a rank, a link or the coordinator; the
launcher's and the runtime's part (exits seen, silence declared, torchrun's agent)."""

from __future__ import annotations

import functools
import random
from typing import TYPE_CHECKING

from actorwire.actors.control._simulate._model import (
    AGENT_STOP_S,
    COORD,
    EXIT_DETECTION,
    FAULTS,
    FORMATION_TIMEOUT,
    JOIN_GIVE_UP,
    LAUNCHER,
    RUNTIME_STALENESS,
    Fault,
)
from actorwire.actors.control._simulate._rank import SimRank
from actorwire.messages import kinds as m

if TYPE_CHECKING:
    from actorwire.actors.control._simulate._runner import Simulation


def _schedule(self: Simulation) -> list[Fault]:
    # A stream of its own: a run with the same seed and explicit faults differs from the drawn
    # run only by its faults, and a new kind of fault changes no other draw.
    rng = random.Random(f"faults-{self.seed}")
    faults = []
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        kind = rng.choice(FAULTS)
        rank = rng.randrange(self.world)
        at = rng.uniform(0.0, 3.0) if kind == "kill_before_join" else rng.uniform(0.0, 6.0)
        fault = Fault(kind, at, rank)
        if kind == "kill_two" and self.world > 1:
            fault.other = rng.choice([r for r in range(self.world) if r != rank])
        if kind in ("pause_short", "pause_long", "slow", "delay", "hang"):
            fault.duration = (rng.uniform(0.1, self.staleness * 0.6) if kind == "pause_short"
                              else rng.uniform(RUNTIME_STALENESS + 0.5, 8.0) if kind == "pause_long"
                              else rng.uniform(FORMATION_TIMEOUT + 1.0, 20.0) if kind == "hang"
                              else rng.uniform(1.0, 5.0))
        faults.append(fault)
    return faults


def _inject(self: Simulation, fault: Fault) -> None:
    rank = self.ranks[fault.rank]
    if fault.kind in ("kill", "kill_before_join", "kill_two"):
        self.kill(rank)
        if fault.other >= 0:
            self.kill(self.ranks[fault.other])
    elif fault.kind in ("pause_short", "pause_long"):
        if not rank.alive:
            return
        rank.paused_until = self.now + fault.duration
        if fault.duration > RUNTIME_STALENESS and rank.state != "starting":
            # The runtime hears nothing from the process: its actors are declared unreachable.
            self.after(RUNTIME_STALENESS, lambda: self._unreachable(rank))
    elif fault.kind == "slow":
        self.slow[fault.rank] = 5.0
        self.after(fault.duration, functools.partial(self._unslow, fault.rank))
    elif fault.kind == "delay":
        self.delayed_until = self.now + fault.duration
    elif fault.kind == "group_restart":
        if not rank.alive:
            return
        self.kill(rank)
        self.after(AGENT_STOP_S, self._agent_stops_the_rest)
        self.after(AGENT_STOP_S + fault.duration, self._agent_restarts_all)
    elif fault.kind == "restart":
        # Killed, then started again by its launcher under the same rank (torchrun, SLURM).
        if not rank.alive:
            return
        self.kill(rank)
        self.after(fault.duration, functools.partial(self._restart, rank))
    elif fault.kind in ("partition_short", "partition_long"):
        # The link between the rank and the coordinator is cut, then heals. The streams are
        # reliable: what was sent meanwhile arrives once it heals. Past the runtime's staleness
        # both sides are told the other is unreachable, and the rank's node was expelled.
        if not rank.alive:
            return
        self.partitioned[fault.rank] = self.now + fault.duration
        if fault.duration > RUNTIME_STALENESS and rank.state != "starting":
            self.after(RUNTIME_STALENESS, lambda: self._cut_off(rank))
    elif fault.kind == "kill_coordinator":
        self.kill_coordinator()
    elif fault.kind == "kill_relay":  # ``rank`` names the host
        self.relays[f"relay/h{fault.rank}"].kill()
    elif fault.kind == "hang_after_join":
        # Not drawn (explicit faults only): the outside fault matrix's case, a rank's training
        # thread frozen (ptrace) for ``duration`` from the moment its join is accepted.
        self.hang_after_join[fault.rank] = fault.duration
    elif fault.kind == "hang" and rank.alive and not rank.blocked:
        # The training thread is stuck in the user's code (a long step, a dead data loader):
        # it serves no message, enters no collective; its heartbeat thread goes on.
        rank.block()
        self.after(fault.duration, rank.unblock)


def _agent_stops_the_rest(self: Simulation) -> None:
    for rank in self.ranks:
        if rank.alive and rank.state != "exited":
            self.kill(rank)


def _agent_restarts_all(self: Simulation) -> None:
    for old in list(self.ranks):
        if not old.alive:
            self._restart(old)


def _restart(self: Simulation, old: SimRank) -> None:
    new = SimRank(self, old.rank, old.batch_s)
    self.ranks[old.rank] = new
    self.incarnations.append(new)
    self.died_at.pop(old.rank, None)  # the death was judged; the new process is another one
    new.start()


def _unslow(self: Simulation, rank: int) -> None:
    self.slow.pop(rank, None)


def slowness(self: Simulation, rank: SimRank) -> float:
    return self.slow.get(rank.rank, 1.0)


def kill(self: Simulation, rank: SimRank) -> None:
    if not rank.alive:
        return
    joined = rank.state == "joined"
    rank.state = "dead"
    rank.ended_at = self.now
    self.died_at[rank.rank] = self.now
    self._deaths.append(self.now)
    # A gloo peer's collective fails at once (its connection resets); an NCCL peer's waits
    # until it is aborted (DeclareDead) or its own timeout passes.
    rank.leave_group(abort=self.backend == "gloo")
    self.after(self.rng.uniform(*EXIT_DETECTION), lambda: self._exited(rank, -9, joined))


def process_exit(self: Simulation, rank: SimRank, code: int) -> None:
    if not rank.alive:
        return
    rank.state = "exited" if code == 0 else "dead"
    rank.ended_at = self.now
    if code == 0:
        self.exited_cleanly.add(rank.rank)
    else:
        self.died_at[rank.rank] = self.now
        self._deaths.append(self.now)
    rank.leave_group()
    self.after(self.rng.uniform(*EXIT_DETECTION), lambda: self._exited(rank, code, True))


def _exited(self: Simulation, rank: SimRank, code: int, registered: bool) -> None:
    if not registered:
        rank.declared_down = True  # the registry drops the node: its name is nobody's now
    if registered and not rank.declared_down:
        rank.declared_down = True
        reason = m.DownReason.EXITED if code == 0 else m.DownReason.DEAD
        self._coordinator(lambda: self.harness.down(rank.name, reason, f"status {code}"))
    how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
    self._coordinator(lambda: self.harness.deliver(m.RankExited(rank=rank.rank, returncode=code, detail=how),
                                                   sender=f"~{LAUNCHER}/1"))


def _cut_off(self: Simulation, rank: SimRank) -> None:
    if rank.alive and not rank.declared_down and self.now < self.partitioned.get(rank.rank, 0.0):
        self.died_at.setdefault(rank.rank, self.now - RUNTIME_STALENESS)
        self._coordinator(lambda: self.harness.down(rank.name, m.DownReason.UNREACHABLE, "no heartbeat"))
        rank.declared_down = True
        down = m.Down(name=COORD, reason=m.DownReason.UNREACHABLE, detail="no heartbeat")
        self.at(self.partitioned[rank.rank], lambda: rank.receive(down))  # heard once it heals


def kill_coordinator(self: Simulation) -> None:
    """The coordinator's process dies: every rank hears its Down and leaves; a rank still joining
    gives up when its join times out."""
    if self.coordinator_died is not None or self.harness.ctx.stopped:
        return
    self.coordinator_died = self.now
    down = m.Down(name=COORD, reason=m.DownReason.DEAD, detail="status -9")
    for rank in self.ranks:
        if rank.state == "joined":
            self.after(self.rng.uniform(*EXIT_DETECTION), functools.partial(rank.receive, down))
        elif rank.state == "joining":  # its join was sent: no answer will come
            self.after(JOIN_GIVE_UP, functools.partial(self.process_exit, rank, 1))


def _unreachable(self: Simulation, rank: SimRank) -> None:
    if rank.alive and self.now < rank.paused_until and not rank.declared_down:
        rank.declared_down = True
        self.died_at.setdefault(rank.rank, self.now - RUNTIME_STALENESS)
        self._coordinator(lambda: self.harness.down(rank.name, m.DownReason.UNREACHABLE, "no heartbeat"))
