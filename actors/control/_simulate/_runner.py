"""One seeded run: the coordinator under the test kit's virtual clock, the simulated ranks, their
faults and the checks, and the entry points (``simulate``, ``run_seeds``)."""

from __future__ import annotations

import functools
import heapq
import itertools
import random
from collections.abc import Callable

from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.control._simulate import _faults, _invariants, _network
from actorwire.actors.control._simulate._model import (
    COORD,
    LAUNCHER,
    MORE_FAULTS,
    RUNTIME_STALENESS,
    SESSION_WAIT,
    SINK,
    Fault,
    InvariantBroken,
    Outcome,
    SimModel,
)
from actorwire.actors.control._simulate._rank import SimRank, _Group
from actorwire.actors.control._simulate._relays import SimRelay
from actorwire.actors.runtime._testkit import ActorHarness
from actorwire.messages import Message
from actorwire.messages import kinds as m


class Simulation:
    """One seeded run of the coordinator and ``ranks`` simulated ranks."""

    def __init__(self, seed: int, *, ranks: int | None = None, faults: list[Fault] | None = None,
                 epochs: int | None = None, dataset: int | None = None, restarts: bool = False,
                 backend: str | None = None, torchrun: bool = False, relays: bool = False) -> None:
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
                      sync_policy=rng.choice(["fixed", "adaptive"]), launcher_node=LAUNCHER)
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
        # Two ranks a host, each host's reports and the coordinator's tells through its relay (``_relays.py``).
        self.hosts = (self.world + 1) // 2 if relays else 0
        self.relays: dict[str, SimRelay] = {}
        for host in range(self.hosts):
            self.relays[f"relay/h{host}"] = SimRelay(self, f"relay/h{host}")
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
        if relays and faults is None:
            # Their own stream: a seed's other faults are the same with and without relays.
            relay_faults = random.Random(f"relay-faults-{seed}")
            if relay_faults.random() < 0.3:
                self.faults.append(Fault("kill_relay", relay_faults.uniform(0.0, 6.0), relay_faults.randrange(self.hosts)))
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
        self.ended: Message | None = None
        self.ended_at = 0.0
        self.sunk: list[tuple[float, Message]] = []
        self.told_end: set[int] = set()  # incarnations the coordinator told that the run ended  # what the metrics sink got, and when
        self.messages = 0
        #: Ranks whose training thread freezes this long once their join is accepted (``hang_after_join``).
        self.hang_after_join: dict[int, float] = {}
        #: The most batches a rank trained past its last sync, in its lead bounds (``SyncCadence.lead_bound``).
        self.lead = 0.0
        # Generous: the slowest rank's share of every epoch, every timeout that may fire, slack (twice
        # the epochs under torchrun: a restarted group trains the epochs after its checkpoint again).
        per_run = self.epochs * (self.dataset / self.batch) * 0.02 * 4
        self.deadline = 60.0 + per_run + 4 * SESSION_WAIT + (30.0 + per_run if torchrun else 0.0)

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
        return Outcome(self.seed, reason, detail, self.ended_at or self.now, len(self.coordinator.reports.history),
                       self.faults, self.messages)

    # What a run does, by concern, in the modules beside this one: each function takes the
    # simulation as ``self`` and is bound here, so they read and are typed as methods.
    def relay_of(self, rank: int) -> str:
        """The relay of ``rank``'s host, or "" (no relays)."""
        return f"relay/h{rank // 2}" if self.hosts else ""

    # faults
    _schedule = _faults._schedule
    _inject = _faults._inject
    _agent_stops_the_rest = _faults._agent_stops_the_rest
    _agent_restarts_all = _faults._agent_restarts_all
    _restart = _faults._restart
    _unslow = _faults._unslow
    slowness = _faults.slowness
    kill = _faults.kill
    process_exit = _faults.process_exit
    _exited = _faults._exited
    _cut_off = _faults._cut_off
    kill_coordinator = _faults.kill_coordinator
    _unreachable = _faults._unreachable
    # network
    at = _network.at
    after = _network.after
    _delay = _network._delay
    to_coordinator = _network.to_coordinator
    _deliver = _network._deliver
    _coordinator = _network._coordinator
    _route = _network._route
    _told = _network._told
    _advance_to = _network._advance_to
    # invariants
    trains_from = _invariants.trains_from
    reduced = _invariants.reduced
    _fail = _invariants._fail
    _check = _invariants._check
    _check_epochs = _invariants._check_epochs
    finishers = _invariants.finishers
    _check_model = _invariants._check_model
    _check_end = _invariants._check_end


def simulate(seed: int, ranks: int | None = None, *, restarts: bool = False, torchrun: bool = False,
             relays: bool = False) -> Outcome:
    """Run one seed; raises :class:`InvariantBroken` naming the rule, the time and the faults."""
    return Simulation(seed, ranks=ranks, restarts=restarts, torchrun=torchrun, relays=relays).run()


def run_seeds(seeds: range, ranks: int | None = None, *, progress: Callable[[str], None] | None = None,
              every: int = 1000, restarts: bool = False, torchrun: bool = False,
              relays: bool = False) -> tuple[list[Outcome], list[str]]:
    """Run ``seeds``; the outcomes and, for each broken invariant, its text and the command that
    replays it."""
    outcomes: list[Outcome] = []
    broken: list[str] = []
    for done, seed in enumerate(seeds, 1):
        try:
            outcomes.append(simulate(seed, ranks, restarts=restarts, torchrun=torchrun, relays=relays))
        except InvariantBroken as exc:
            broken.append(f"{exc}\n  replay: {replay_command(seed, ranks, restarts, torchrun, relays)}")
        except Exception as exc:  # a handler that raised is a broken rule too
            broken.append(f"seed {seed}: the coordinator raised {type(exc).__name__}: {exc}\n"
                          f"  replay: {replay_command(seed, ranks, restarts, torchrun, relays)}")
        if progress is not None and done % every == 0:
            progress(f"{done}/{len(seeds)} seeds, {len(broken)} broken")
    return outcomes, broken


def replay_command(seed: int, ranks: int | None = None, restarts: bool = False, torchrun: bool = False,
                   relays: bool = False) -> str:
    return (f"actorwire simulate --seed {seed}" + (f" --ranks {ranks}" if ranks else "")
            + (" --restarts" if restarts else "") + (" --torchrun" if torchrun else "")
            + (" --relays" if relays else ""))
