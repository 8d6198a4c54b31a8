"""A deterministic simulator of the control plane: the coordinator and N ranks in one process.

The real :class:`~actorwire.actors.control._coordinator.Coordinator` runs under
the test kit's virtual clock; each rank runs the real
:class:`~actorwire.actors.control._rank.RankProtocol` (the code the Worker and
the GpuWorker run), whose effects (batches, the all-reduce, group formation,
eval, checkpoint) are played in simulated time, and the network
between them delivers every message after a seeded delay, in order per link.
A seeded schedule of faults hits the ranks at any moment (kill, pause,
slowness, a delayed link), and the runtime's part is modelled too: a killed
process is reported to the coordinator (``Down``, and ``RankExited`` from its
launcher), a silent one after the runtime's staleness timeout.

After every step the invariants are checked:

* the run ends, by ``Shutdown`` or ``ShutdownWithSave`` with a reason, within a
  deadline computed from the configuration (no stall);
* every sample of every aggregated epoch was trained, and no two ranks the
  coordinator still counts trained the same sample in one epoch;
* no dead rank is believed alive past the staleness timeout (plus the
  coordinator's tick);
* a rank that left cleanly (``Exiting``) is never counted as a failure;
* no message a live rank sends is refused as out of phase (``stopping`` aside);
* no coordinator handler raises;
* the model (see :class:`SimModel`): every rank trains from the run's one initial model (a rank's
  own initialisation is never trained on, nor averaged in); every rank that finishes holds the same
  parameters; each announced global step equals the steps that the reduce before it covered, and
  the last one the steps the final model holds; every sample of every epoch is in the final model
  exactly once, except what a rank trained after its last completed sync and then took to its
  death: the rest of its epoch (from that sync on) is handed to the survivors, so only samples of
  an epoch that had already ended when it died are lost with it (``lost_with_dead``).

``actorwire simulate --seeds N`` runs seeds 0..N-1; a failing seed prints the
one command that replays it (``actorwire simulate --seed S``), which is exact:
the same seed gives the same run, message for message.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from actorwire import messages as m
from actorwire.actors import _names
from actorwire.actors.control import _rank
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.control._rank import Effect, RankProtocol
from actorwire.actors.runtime._testkit import ActorHarness
from actorwire.messages import ActorwireError

COORD = "coordinator"
SINK = "main"
RUNTIME_STALENESS = 3.0  # the runtime declares a silent process dead after this
EXIT_DETECTION = (0.001, 0.05)  # how long the launcher takes to see a process exit
AGENT_STOP_S = 0.3  # torchrun's agent stops the other workers this long after one died
FORMATION_TIMEOUT = 8.0  # a rank waits this long for a group to form (gloo's timeout)
SESSION_WAIT = 60.0  # after a failed all-reduce, a rank waits this long for a new group

FAULTS = ("kill", "kill_before_join", "pause_short", "pause_long", "slow", "delay", "kill_two", "hang")
#: Drawn from a stream of their own (``FAULTS`` must not change: the seeds of the tests name runs).
MORE_FAULTS = ("partition_short", "partition_long", "kill_coordinator")
JOIN_GIVE_UP = 10.0  # a rank whose join is never answered gives up after this (its join timeout)
#: Every rank has left this long after the coordinator died: a hang, a stop, a join's timeout.
COORDINATOR_LOSS_BOUND = 40.0


PARAMS = 4  # the simulated model's parameter count


@dataclasses.dataclass
class SimModel:
    """A rank's model: a parameter vector and what it is made of.

    ``params`` move by each batch, deterministically from the epoch and the sample indices, and are
    averaged at each sync by the weights the real all-reduce uses (``reduce_weight``).  The history
    says what they hold: ``origin`` (which initialisation), ``base`` (the samples, by epoch, and the
    steps that the last reduce or the initial model brought) and ``delta`` (what this rank trained
    since).  The simulator compares histories where the real code could only compare bits.
    """

    params: list[float]
    origin: frozenset[int]
    base: collections.Counter[tuple[int, int]] = dataclasses.field(default_factory=collections.Counter)
    base_steps: int = 0
    delta: collections.Counter[tuple[int, int]] = dataclasses.field(default_factory=collections.Counter)
    delta_steps: int = 0

    @classmethod
    def initial(cls, origin: int) -> SimModel:
        return cls([origin + 0.25 * j for j in range(PARAMS)], frozenset({origin}))

    def train(self, epoch: int, indices: range) -> None:
        for i in indices:
            for j in range(PARAMS):
                self.params[j] -= 0.01 * (((i * 31 + j * 17 + epoch * 7) % 13) - 6)
            self.delta[(epoch, i)] += 1
        self.delta_steps += 1

    def history(self) -> tuple[frozenset[int], collections.Counter[tuple[int, int]], int]:
        return self.origin, self.base, self.base_steps

    def holds(self) -> collections.Counter[tuple[int, int]]:
        return self.base + self.delta


class InvariantBroken(ActorwireError, AssertionError):
    """A rule of the control plane did not hold; the text says which and when."""


@dataclasses.dataclass
class Fault:
    kind: str
    at: float
    rank: int
    other: int = -1
    duration: float = 0.0

    def __str__(self) -> str:
        extra = f" and {self.other}" if self.other >= 0 else ""
        lasting = f" for {self.duration:.2f} s" if self.duration else ""
        return f"{self.kind} rank {self.rank}{extra} at {self.at:.2f} s{lasting}"


@dataclasses.dataclass
class Outcome:
    seed: int
    ended_by: str  # "shutdown", or the save reason
    detail: str
    at: float
    epochs: int
    faults: list[Fault]
    messages: int

    def line(self) -> str:
        faults = "; ".join(map(str, self.faults)) or "no fault"
        return (f"seed {self.seed}: {self.ended_by} at {self.at:.1f} s after {self.epochs} epoch(s), "
                f"{self.messages} messages ({faults})")


class _Group:
    """One process group being formed or formed: the ranks that joined it, by session position."""

    def __init__(self, uid: bytes, world: int) -> None:
        self.uid = uid
        self.world = world
        self.members: dict[int, SimRank] = {}
        self.formed = False
        self.broken = False
        self.reduce: dict[int, set[int]] = {}  # cycle -> positions that entered it
        self.weights: dict[int, dict[int, float]] = {}  # cycle -> position -> its weight in the reduce
        self.covered = 0  # the steps the last completed reduce averaged (its members' since their last)


class SimRank:
    """One rank: the real :class:`~._rank.RankProtocol` makes every decision; this driver plays its
    effects on the simulator's clock (batches take time, groups form when every member is in, an
    all-reduce completes when every member entered it, or fails after the gloo timeout)."""

    def __init__(self, sim: Simulation, rank: int, batch_s: float) -> None:
        self.sim = sim
        self.rank = rank
        self.name = _names.worker(rank)
        self.batch_s = batch_s
        self.protocol = RankProtocol(rank, sim.world, coordinator=COORD, coordinator_timeout=30.0,
                                     regroup_wait=SESSION_WAIT)
        self.state = "starting"  # starting, joining, joined, exited, dead
        self.paused_until = 0.0
        self.declared_down = False
        self.group: _Group | None = None
        self.position = -1
        self.syncing: int | None = None  # the cycle of the all-reduce it is in
        self.forming: tuple[_Group, float, int] | None = None  # group, deadline, attempt
        self.busy = False  # a batch is scheduled
        # Forming a group and an all-reduce block the real worker's thread (gloo's init and
        # all_reduce are calls that return when every member is there, or fail after the gloo
        # timeout): what arrives meanwhile waits in its inbox.
        self.blocked = False
        self.backlog: list[m.Message] = []
        self.trained: dict[int, set[int]] = {}  # epoch -> samples
        self.ended_at: float | None = None  # when its process ended
        #: Every process starts from an initialisation of its own (as ranks seeded differently do).
        self.model = SimModel.initial(next(sim.origins))
        #: What it brought to the last completed reduce, until the coordinator counts its ack.
        self.unacked: collections.Counter[tuple[int, int]] = collections.Counter()

    # -- plumbing -------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.state not in ("dead", "exited")

    @property
    def steps(self) -> int:
        return self.protocol.steps

    def send(self, message: m.Message, *, corr: int = 0, sender: str | None = None) -> None:
        if self.alive and self.sim.now >= self.paused_until:
            self.sim.to_coordinator(self, message, sender=sender or self.name, corr=corr)

    def later(self, delay: float, action: Callable[[], None]) -> None:
        def run() -> None:
            if not self.alive:
                return
            if self.sim.now < self.paused_until:  # stopped: it runs once the process is continued
                self.sim.at(self.paused_until, run)
                return
            action()
        self.sim.after(delay, run)

    def run(self, effects: list[Effect]) -> None:
        """Carry out the protocol's effects as the real Worker does, in simulated time."""
        p = self.protocol
        for effect in effects:
            if isinstance(effect, _rank.Send):
                self.send(effect.message)
            elif isinstance(effect, _rank.AllReduce):
                self.enter_reduce(effect.cycle, effect.weight)
            elif isinstance(effect, _rank.FormGroup):
                self.join_group(effect.session)
            elif isinstance(effect, _rank.MakeGroupId):
                self.later(0.01, functools.partial(self._id_made, effect.attempt))
            elif isinstance(effect, _rank.AbortGroup):
                self.leave_group()
            elif isinstance(effect, _rank.Evaluate):
                self.later(0.02, functools.partial(self._evaluated, effect.request))
            elif isinstance(effect, _rank.SaveCheckpoint):
                # Saved as the request is served, before anything after it (the Worker calls its
                # checkpoint_fn right there; a GpuWorker's adapter runs it before the next step):
                # the file holds the model at the epoch boundary, its history too.
                self.sim.checkpoints[f"sim-{effect.request.version}.pt"] = copy.deepcopy(self.model)
                self.later(0.02, functools.partial(self._checkpointed, effect.request))
            elif isinstance(effect, _rank.Ended):
                if not effect.failed:
                    self.run(p.exiting())
                self.sim.process_exit(self, 1 if effect.failed else 0)

    def _id_made(self, attempt: int) -> None:
        self.run(self.protocol.group_id_made(attempt, f"g{next(self.sim.uids)}".encode(), None))

    def _evaluated(self, request: m.ExecuteEval) -> None:
        self.run(self.protocol.evaluated(m.EvalResult(rank=self.rank, schedule_id=request.schedule_id,
                                                      epoch=request.epoch, metric=0.1, elapsed_ms=20.0)))

    def _checkpointed(self, request: m.Checkpoint) -> None:
        path = f"sim-{request.version}.pt"  # written when the request was served (``run``)
        self.run(self.protocol.checkpointed(m.CheckpointResult(rank=self.rank, version=request.version,
                                                               elapsed_ms=20.0, path=path)))

    # -- life -----------------------------------------------------------------------

    def start(self) -> None:
        if not self.alive:
            return
        if self.sim.now < self.paused_until:  # stopped before it could say anything
            self.sim.at(self.paused_until, self.start)
            return
        self.state = "joining"
        self.send(self.protocol.join_request(run_id=self.sim.run_id, model_signature="sim",
                                             dataset_size=self.sim.dataset), corr=1000 + self.rank)

    def beat(self) -> None:
        """The heartbeat thread: it beats whatever the training thread does."""
        if self.state == "joined":
            self.send(self.protocol.heartbeat(), sender=_names.worker_heartbeat(self.rank))
            self.later(1.0, self.beat)

    def tick(self) -> None:
        """The training thread's own clock checks (coordinator silence, the regrouping deadline)."""
        if self.state != "joined":
            return
        if not self.blocked:
            self.run(self.protocol.tick(self.sim.now))
            self.next_batch()
        self.later(1.0, self.tick)

    def receive(self, message: m.Message) -> None:
        if not self.alive:
            return
        if self.sim.now < self.paused_until:
            self.sim.at(self.paused_until, lambda: self.receive(message))
            return
        if self.blocked or self.busy:  # served between two batches, as the real drivers do
            self.backlog.append(message)
            return
        if self.declared_down:
            # The runtime expelled this process while it was stopped: its coordinator is gone from
            # its view, and the Worker ends the user's loop (shutting_down).
            self.state = "exited"
            return
        if isinstance(message, (m.JoinAccepted, m.JoinRejected)):
            try:
                self.protocol.join_reply(message, self.sim.now)
            except _rank.WorkerError:
                self.sim.process_exit(self, 1)
                return
            if isinstance(message, m.JoinAccepted) and message.resume_from:
                # The Worker's restore_fn, before its first plan: the checkpoint's model, history and all.
                self.model = copy.deepcopy(self.sim.checkpoints[message.resume_from])
            self.state = "joined"
            self.later(1.0, self.beat)
            self.later(1.0, self.tick)
            return
        self.run(self.protocol.receive(message, self.sim.now))
        self.next_batch()

    def block(self) -> None:
        self.blocked = True

    def unblock(self) -> None:
        self.blocked = False
        self.serve_backlog()

    def serve_backlog(self) -> None:
        self.backlog = _rank.current(self.backlog)
        while self.backlog and not self.blocked and not self.busy:  # in order; a call that blocks keeps the rest
            self.receive(self.backlog.pop(0))
        self.next_batch()

    # -- training ---------------------------------------------------------------------

    def next_batch(self) -> None:
        p = self.protocol
        if self.busy or self.blocked or self.syncing is not None or self.state != "joined" or not p.can_train:
            return
        if p.current is None:
            self.run(p.start_plan(self.sim.now))
            if p.current is None:
                return
        plan = p.current
        indices = p.take(self.sim.batch)
        if indices is None:  # the plan and the slices handed over so far: report the epoch
            self.run(p.report_epoch(self.sim.now))
            self.next_batch()
            return
        self.busy = True

        def done() -> None:
            self.busy = False
            if p.current is plan:
                self.trained.setdefault(plan.epoch, set()).update(indices)
                self.sim.trains_from(self)
                self.model.train(plan.epoch, indices)
                self.run(p.batch_done(self.sim.now, self.batch_s * 1000, 0.5))
            self.serve_backlog()

        self.later(self.batch_s * self.sim.slowness(self), done)

    # -- the all-reduce and group formation -----------------------------------------

    def enter_reduce(self, cycle: int, weight: float) -> None:
        group = self.group
        if group is None or not group.formed or group.broken:
            self.fail_reduce(cycle)
            return
        self.syncing = cycle
        self.block()
        entered = group.reduce.setdefault(cycle, set())
        entered.add(self.position)
        group.weights.setdefault(cycle, {})[self.position] = weight
        if len(entered) == group.world:
            self.sim.reduced(group, cycle)
            for member in list(group.members.values()):
                if member.syncing == cycle:
                    member.syncing = None
                    member.later(0.005, functools.partial(member.finish_reduce, cycle, group.covered))
            return

        def timeout() -> None:  # a member never came (stopped, or it left the group): gloo gives up
            if self.syncing == cycle and self.group is group:
                group.broken = True
                self.fail_reduce(cycle)

        self.later(FORMATION_TIMEOUT, timeout)

    def finish_reduce(self, cycle: int, covered: int) -> None:
        if covered < 0:
            self.run(self.protocol.sync_done(cycle, "no member holds the run's model", self.sim.now))
        else:
            self.run(self.protocol.sync_done(cycle, None, self.sim.now, covered))
        self.unblock()

    def fail_reduce(self, cycle: int) -> None:
        """The reduce cannot complete (a member is gone): the collective's error returns to the loop."""
        self.syncing = None
        self.run(self.protocol.sync_done(cycle, "collective failed", self.sim.now))
        if self.blocked:
            self.later(0.0, self.unblock)

    def leave_group(self, abort: bool = True) -> None:
        """Leave the group; ``abort``: the members' collective in progress fails now (gloo, or an
        abort), else it waits for its own timeout or abort (a dead NCCL peer)."""
        group = self.group
        if group is not None:
            group.broken = True
            for member in group.members.values():
                if abort and member.syncing is not None:
                    member.fail_reduce(member.syncing)
        self.group = None

    def join_group(self, session: m.NewNcclSession) -> None:
        self.leave_group()
        group = self.sim.groups.setdefault(session.uid, _Group(session.uid, session.new_world_size))
        group.members[session.new_rank] = self
        self.forming = (group, self.sim.now + FORMATION_TIMEOUT, session.attempt)
        self.block()
        # Formed once every member is in it at once: one that gave up on it (its formation timed out,
        # it moved to a newer group) left it for good, and a late member then waits in vain.
        if len(group.members) == group.world and all(
                r.alive and r.forming is not None and r.forming[0] is group for r in group.members.values()):
            group.formed = True
            for member in group.members.values():
                member.formed(group)
            return

        def timeout() -> None:
            if self.forming is not None and self.forming[0] is group and not group.formed:
                self.forming = None
                self.run(self.protocol.group_formed(session.attempt, "formation timed out", self.sim.now))
                self.unblock()

        self.later(FORMATION_TIMEOUT, timeout)

    def formed(self, group: _Group) -> None:
        attempt = self.forming[2] if self.forming is not None else self.protocol.session_attempt
        self.forming = None
        self.group = group
        self.position = next(p for p, r in group.members.items() if r is self)

        def resume() -> None:  # the group's init returns: the protocol hears it first, then the inbox
            self.blocked = False
            self.run(self.protocol.group_formed(attempt, None, self.sim.now))
            self.serve_backlog()  # unless what it did blocks again (an all-reduce it had put off)

        self.later(0.0, resume)


class Simulation:
    """One seeded run of the coordinator and ``ranks`` simulated ranks."""

    def __init__(self, seed: int, *, ranks: int | None = None, faults: list[Fault] | None = None,
                 epochs: int | None = None, dataset: int | None = None, restarts: bool = False,
                 backend: str | None = None, torchrun: bool = False) -> None:
        self.seed = seed
        rng = self.rng = random.Random(seed)
        self.world = ranks or rng.randint(1, 6)
        self.batch = rng.choice([1, 2, 4, 8])
        drawn = self.world * self.batch * rng.randint(2, 24) + rng.randint(0, self.batch * 3)
        self.dataset = dataset or drawn
        self.epochs = epochs or rng.randint(1, 3)
        self.run_id = f"sim-{seed}"
        self.staleness = 3.0
        self.tick = 0.5
        config = dict(world_size=self.world, run_id=self.run_id, num_epochs=self.epochs, dataset_size=self.dataset,
                      batch_size=self.batch, sync_every=rng.randint(1, 6), staleness_timeout=self.staleness,
                      tick_interval=self.tick, join_timeout=20.0, rendezvous_timeout=5.0,
                      reduce_stall_timeout=30.0, exit_grace=10.0, form_group=True, metrics_sink=SINK,
                      eval_every=rng.choice([0, 1]), checkpoint_every=rng.choice([0, 1]),
                      sync_policy=rng.choice(["fixed", "adaptive"]))
        # Streams of their own, so that the draws above (and the seeds that name runs) stay as they were.
        drawn_backend = "nccl" if random.Random(f"backend-{seed}").random() < 0.25 else "gloo"
        self.backend = backend or drawn_backend
        config["backend"] = self.backend
        if torchrun:  # the launcher restarts the whole group: the coordinator waits, ranks resume
            config.update(restart_wait=30.0, checkpoint_every=1)
        self.checkpoints: dict[str, SimModel] = {}
        self._restarts_seen = 0
        self.coordinator = Coordinator(**config)
        self.harness = ActorHarness(self.coordinator, name=COORD, peers=[SINK])
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._links: dict[tuple[str, str], float] = {}
        self.uids = itertools.count(1)
        self.groups: dict[bytes, _Group] = {}
        self.origins = itertools.count()
        self.trained_origin: frozenset[int] | None = None  # the one initial model every rank trains from
        self.reduced_steps = 0  # the steps the last completed reduce's model holds
        self.last_batch_at = 0.0
        self.ranks = [SimRank(self, r, rng.uniform(0.002, 0.02)) for r in range(self.world)]
        self.incarnations = list(self.ranks)  # every process a rank ran as, restarts included
        self.faults = faults if faults is not None else self._schedule()
        if restarts and faults is None:
            # Their own stream too: a seed's other faults are the same with and without restarts.
            extra = random.Random(f"restarts-{seed}")
            self.faults.append(Fault("restart", extra.uniform(0.5, 6.0), extra.randrange(self.world),
                                     duration=extra.uniform(0.5, 4.0)))
        if torchrun and faults is None:
            # torchrun's agent: one rank dies, the agent stops the others, then starts all again.
            agent = random.Random(f"torchrun-{seed}")
            self.faults.append(Fault("group_restart", agent.uniform(0.5, 6.0), agent.randrange(self.world),
                                     duration=agent.uniform(0.5, 4.0)))
        if faults is None:
            more = random.Random(f"more-faults-{seed}")
            if more.random() < 0.2:
                kind = more.choice(MORE_FAULTS)
                duration = (more.uniform(0.2, RUNTIME_STALENESS * 0.8) if kind == "partition_short"
                            else more.uniform(RUNTIME_STALENESS + 0.5, 8.0) if kind == "partition_long" else 0.0)
                self.faults.append(Fault(kind, more.uniform(0.0, 6.0), more.randrange(self.world), duration=duration))
        self.coordinator_died: float | None = None
        self._deaths: list[float] = []  # when a rank was killed or died
        self.partitioned: dict[int, float] = {}  # rank -> until when its link to the coordinator is cut
        self.died_at: dict[int, float] = {}
        self.exited_cleanly: set[int] = set()
        self.delayed_until = 0.0
        self.slow: dict[int, float] = {}
        self.ended: m.Message | None = None
        self.ended_at = 0.0
        self.sunk: list[tuple[float, m.Message]] = []
        self.told_end: set[int] = set()  # incarnations the coordinator told that the run ended  # what the metrics sink got, and when
        self.messages = 0
        # Generous: the slowest rank's share of every epoch, every timeout that may fire, slack (twice
        # the epochs under torchrun: a restarted group trains the epochs after its checkpoint again).
        per_run = self.epochs * (self.dataset / self.batch) * 0.02 * 4
        self.deadline = 60.0 + per_run + 4 * SESSION_WAIT + (30.0 + per_run if torchrun else 0.0)

    # -- the fault schedule ---------------------------------------------------------

    def _schedule(self) -> list[Fault]:
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

    def _inject(self, fault: Fault) -> None:
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
        elif fault.kind == "hang" and rank.alive and not rank.blocked:
            # The training thread is stuck in the user's code (a long step, a dead data loader):
            # it serves no message, enters no collective; its heartbeat thread goes on.
            rank.block()
            self.after(fault.duration, rank.unblock)

    def _agent_stops_the_rest(self) -> None:
        for rank in self.ranks:
            if rank.alive and rank.state != "exited":
                self.kill(rank)

    def _agent_restarts_all(self) -> None:
        for old in list(self.ranks):
            if not old.alive:
                self._restart(old)

    def _restart(self, old: SimRank) -> None:
        new = SimRank(self, old.rank, old.batch_s)
        self.ranks[old.rank] = new
        self.incarnations.append(new)
        self.died_at.pop(old.rank, None)  # the death was judged; the new process is another one
        new.start()

    def _unslow(self, rank: int) -> None:
        self.slow.pop(rank, None)

    def slowness(self, rank: SimRank) -> float:
        return self.slow.get(rank.rank, 1.0)

    # -- the runtime -------------------------------------------------------------------

    def kill(self, rank: SimRank) -> None:
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

    def process_exit(self, rank: SimRank, code: int) -> None:
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

    def _exited(self, rank: SimRank, code: int, registered: bool) -> None:
        if not registered:
            rank.declared_down = True  # the registry drops the node: its name is nobody's now
        if registered and not rank.declared_down:
            rank.declared_down = True
            reason = m.DownReason.EXITED if code == 0 else m.DownReason.DEAD
            self._coordinator(lambda: self.harness.down(rank.name, reason, f"status {code}"))
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        self._coordinator(lambda: self.harness.deliver(m.RankExited(rank=rank.rank, returncode=code, detail=how),
                                                       sender="~launcher/1"))

    def _cut_off(self, rank: SimRank) -> None:
        if rank.alive and not rank.declared_down and self.now < self.partitioned.get(rank.rank, 0.0):
            self.died_at.setdefault(rank.rank, self.now - RUNTIME_STALENESS)
            self._coordinator(lambda: self.harness.down(rank.name, m.DownReason.UNREACHABLE, "no heartbeat"))
            rank.declared_down = True
            down = m.Down(name=COORD, reason=m.DownReason.UNREACHABLE, detail="no heartbeat")
            self.at(self.partitioned[rank.rank], lambda: rank.receive(down))  # heard once it heals

    def kill_coordinator(self) -> None:
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

    def _unreachable(self, rank: SimRank) -> None:
        if rank.alive and self.now < rank.paused_until and not rank.declared_down:
            rank.declared_down = True
            self.died_at.setdefault(rank.rank, self.now - RUNTIME_STALENESS)
            self._coordinator(lambda: self.harness.down(rank.name, m.DownReason.UNREACHABLE, "no heartbeat"))

    # -- the model -----------------------------------------------------------------------

    def trains_from(self, rank: SimRank) -> None:
        """``rank`` trains a batch: on the run's one initial model, never on an initialisation of its own."""
        origin = rank.model.origin
        self.last_batch_at = self.now
        c = self.coordinator
        if len(c.restarts) != self._restarts_seen:
            # The coordinator resumed a group its launcher started again; with no checkpoint it
            # started the run over, from a new initial model (the old one died with the ranks).
            self._restarts_seen = len(c.restarts)
            if c.checkpoint is None:
                self.trained_origin = None
        if self.trained_origin is None:
            self.trained_origin = origin
        elif origin != self.trained_origin:
            self._fail(f"rank {rank.rank} trains from initialisation {sorted(origin)}, not the run's "
                       f"{sorted(self.trained_origin)}: it never took the current model from a peer")

    def reduced(self, group: _Group, cycle: int) -> None:
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

    # -- events and the network ------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), action))

    def after(self, delay: float, action: Callable[[], None]) -> None:
        self.at(self.now + delay, action)

    def _delay(self, link: tuple[str, str], rank: int) -> float:
        delay = self.rng.uniform(0.0002, 0.005) + (0.5 if self.now < self.delayed_until else 0.0)
        when = max(self.now + delay, self._links.get(link, 0.0))  # in order per link
        if self.now < self.partitioned.get(rank, 0.0):
            when = max(when, self.partitioned[rank])
        self._links[link] = when
        return when

    def to_coordinator(self, rank: SimRank, message: m.Message, *, sender: str, corr: int) -> None:
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

    def _deliver(self, rank: SimRank, message: m.Message, sender: str, corr: int, held: bool) -> list[Any]:
        if held and rank.state == "dead":
            return []
        sent = self.harness.deliver(message, sender=sender, correlation_id=corr)
        state = self.coordinator.ranks.get(rank.rank)
        if isinstance(message, m.SyncAck) and state is not None and state.alive and state.name == rank.name:
            rank.unacked.clear()  # counted: the coordinator knows its work is in the model
        return sent

    def _coordinator(self, step: Callable[[], list[Any]]) -> None:
        if self.harness.ctx.stopped or self.coordinator_died is not None:
            return
        self.harness.ctx.known.update(r.name for r in self.ranks if not r.declared_down)
        for r in self.ranks:
            if r.declared_down:
                self.harness.ctx.known.discard(r.name)
        self.harness.ctx.known.update(_names.worker_heartbeat(r.rank) for r in self.ranks)
        for sent in step():
            self._route(sent)
        for r in self.ranks:
            if r.declared_down and r.name in self.harness.ctx.watched:
                # The runtime answers a watch of a name it has already declared down with Down at
                # once (a join held back by a cut link, or sent just before a stop, arrives late).
                reason = m.DownReason.UNREACHABLE if r.alive else m.DownReason.DEAD
                self._coordinator(functools.partial(self.harness.down, r.name, reason, "already down"))

    def _route(self, sent: Any) -> None:
        message = sent.message
        if sent.target == SINK:
            self.sunk.append((self.now, message))
            if isinstance(message, m.ShutdownWithSave) and self.ended is None:
                self.ended, self.ended_at = message, self.now
            return
        if isinstance(message, m.Shutdown) and self.ended is None and self.coordinator.phase == "stopping":
            self.ended, self.ended_at = message, self.now  # the end of the run, not one rank told to leave
        rank = next((r for r in self.ranks if r.name == sent.target), None)
        if rank is None:
            return
        if isinstance(message, (m.Shutdown, m.ShutdownWithSave)):
            self.told_end.add(id(rank))
        if isinstance(message, m.SetGlobalStep) and message.global_step != self.reduced_steps:
            self._fail(f"SetGlobalStep({message.global_step}) after a reduce that covered {self.reduced_steps} steps")
        self.messages += 1
        self.at(self._delay((COORD, rank.name), rank.rank), lambda: rank.receive(message))

    # -- running ----------------------------------------------------------------------

    def _advance_to(self, when: float) -> list[Any]:
        return self.harness.advance(max(0.0, when - self.harness.ctx.clock))

    def run(self) -> Outcome:
        for fault in self.faults:
            self.at(fault.at, functools.partial(self._inject, fault))
        for rank in self.ranks:
            self.at(self.rng.uniform(0.05, 2.0), rank.start)
        self._coordinator(self.harness.start)
        while not self.harness.ctx.stopped:
            if self.coordinator_died is not None and not any(r.alive for r in self.incarnations):
                break  # every rank has left after the coordinator's death
            gone = self.coordinator_died is not None  # its timers died with it
            timers = [] if gone else [due for due, _, _ in self.harness.ctx.timers.values()]
            next_event = self._events[0][0] if self._events else float("inf")
            due = min(timers, default=float("inf"))
            if due <= next_event:
                if due == float("inf"):
                    break
                self.now = due
                self._coordinator(functools.partial(self._advance_to, due))
            else:
                when, _, action = heapq.heappop(self._events)
                self.now = when
                if self.harness.ctx.clock < when:
                    self._coordinator(functools.partial(self._advance_to, when))
                action()
            self._check()
        self._check_end()
        reason = "coordinator_lost" if self.coordinator_died is not None else "shutdown" if isinstance(
            self.ended, m.Shutdown) else (
            self.ended.reason.value if isinstance(self.ended, m.ShutdownWithSave) else "none")
        detail = self.ended.detail if isinstance(self.ended, m.ShutdownWithSave) else ""
        return Outcome(self.seed, reason, detail, self.ended_at or self.now, len(self.coordinator.history),
                       self.faults, self.messages)

    # -- invariants --------------------------------------------------------------------

    def _fail(self, rule: str) -> None:
        raise InvariantBroken(f"seed {self.seed} at {self.now:.3f} s: {rule} "
                              f"(faults: {'; '.join(map(str, self.faults)) or 'none'})")

    def _check(self) -> None:
        c = self.coordinator
        if self.coordinator_died is not None:
            if self.now > self.coordinator_died + COORDINATOR_LOSS_BOUND:
                left = [r.rank for r in self.incarnations if r.alive]
                self._fail(f"rank(s) {left} still running {COORDINATOR_LOSS_BOUND:g} s after the coordinator died")
            return
        if self.now > self.deadline:
            self._fail(f"the run has not ended after {self.deadline:.0f} s (phase {c.phase}, epoch {c.epoch})")
        in_run = [r for _, r in sorted(c.ranks.items()) if r.alive and not r.exited and not r.waiting]
        if c.alive() != in_run or c._in_run_count != len(in_run):
            self._fail(f"the coordinator's list of ranks in the run {[r.rank for r in c.alive()]} "
                       f"(count {c._in_run_count}) is not {[r.rank for r in in_run]}")
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
            if rank in c.lost_at_start or (state is not None and not state.alive and not state.exited
                                           and not state.told_to_leave):
                self._fail(f"rank {rank} left cleanly and was counted as lost")

    def _check_epochs(self) -> None:
        """Every sample of every aggregated epoch trained, and no sample by two live ranks."""
        c = self.coordinator
        for metrics in c.history:
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

    def finishers(self) -> list[SimRank]:
        """The ranks that end the run: told that it ended, counted in it, and gone with status 0."""
        c = self.coordinator
        return [r for r in self.ranks if r.state == "exited" and id(r) in self.told_end
                and (state := c.ranks.get(r.rank)) is not None and state.alive and state.name == r.name]

    def _check_model(self) -> None:
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
        for metrics in self.coordinator.history:
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

    def _check_end(self) -> None:
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
        if isinstance(self.ended, m.Shutdown) and len(c.history) != self.epochs:
            self._fail(f"Shutdown after {len(c.history)} of {self.epochs} epochs")
        self._check_epochs()
        if self.backend == "nccl" and isinstance(self.ended, m.Shutdown):
            started = next((t for t, msg in self.sunk if isinstance(msg, m.StartEpoch)), None)
            lost_running = started is not None and any(started < t < self.last_batch_at for t in self._deaths)
            live = [r for r in c.ranks.values() if r.alive]
            # A group the launcher started again whole is no survivor (a world of one restarted).
            restored = bool(c.restarts) and len(live) == self.world
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


def simulate(seed: int, ranks: int | None = None, *, restarts: bool = False, torchrun: bool = False) -> Outcome:
    """Run one seed; raises :class:`InvariantBroken` naming the rule, the time and the faults."""
    return Simulation(seed, ranks=ranks, restarts=restarts, torchrun=torchrun).run()


def run_seeds(seeds: range, ranks: int | None = None, *, progress: Callable[[str], None] | None = None,
              every: int = 1000, restarts: bool = False,
              torchrun: bool = False) -> tuple[list[Outcome], list[str]]:
    """Run ``seeds``; the outcomes and, for each broken invariant, its text and the command that
    replays it."""
    outcomes: list[Outcome] = []
    broken: list[str] = []
    for done, seed in enumerate(seeds, 1):
        try:
            outcomes.append(simulate(seed, ranks, restarts=restarts, torchrun=torchrun))
        except InvariantBroken as exc:
            broken.append(f"{exc}\n  replay: {replay_command(seed, ranks, restarts, torchrun)}")
        except Exception as exc:  # a handler that raised is a broken rule too
            broken.append(f"seed {seed}: the coordinator raised {type(exc).__name__}: {exc}\n"
                          f"  replay: {replay_command(seed, ranks, restarts, torchrun)}")
        if progress is not None and done % every == 0:
            progress(f"{done}/{len(seeds)} seeds, {len(broken)} broken")
    return outcomes, broken


def replay_command(seed: int, ranks: int | None = None, restarts: bool = False, torchrun: bool = False) -> str:
    return (f"actorwire simulate --seed {seed}" + (f" --ranks {ranks}" if ranks else "")
            + (" --restarts" if restarts else "") + (" --torchrun" if torchrun else ""))
