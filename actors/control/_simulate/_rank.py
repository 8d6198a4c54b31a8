"""A simulated rank: the real rank protocol, its effects played in simulated time; and the
process groups the ranks form."""

from __future__ import annotations

import collections
import copy
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from actorwire.actors import _names
from actorwire.actors.control import _rank, _rank_effects
from actorwire.actors.control._rank import Effect, RankProtocol
from actorwire.actors.control._simulate import _relays
from actorwire.actors.control._simulate._model import COORD, FORMATION_TIMEOUT, SESSION_WAIT, SimModel
from actorwire.messages import Message
from actorwire.messages import kinds as m

if TYPE_CHECKING:
    from actorwire.actors.control._simulate._runner import Simulation


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
                                     regroup_wait=SESSION_WAIT, relay=sim.relay_of(rank))
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
        self.backlog: list[Message] = []
        #: When each group session came in (uid, attempt): one that waited past half the formation
        #: timeout is not joined (``_rank_effects.late_for_group``, as the Worker does).
        self.session_came: dict[tuple[bytes, int], float] = {}
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

    def send(self, message: Message, *, corr: int = 0, sender: str | None = None) -> None:
        if self.alive and self.sim.now >= self.paused_until:
            if self.sim.relays and _relays.route(self.sim, self, message):
                return
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
                session = effect.session
                came = _rank_effects.session_served(self.session_came, (session.uid, session.attempt), self.sim.now)
                late = _rank_effects.late_for_group(self.sim.now - came, FORMATION_TIMEOUT)
                if late is None:
                    self.join_group(session)
                else:
                    self.run(p.group_formed(session.attempt, late, self.sim.now))
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

    def receive(self, message: Message) -> None:
        if not self.alive:
            return
        if self.sim.now < self.paused_until:
            self.sim.at(self.paused_until, lambda: self.receive(message))
            return
        if isinstance(message, m.NewNcclSession):  # stamped as it comes in (a stopped process: as it goes on)
            self.session_came.setdefault((message.uid, message.attempt), self.sim.now)
        if isinstance(message, m.DeclareDead) and self.syncing is not None and self.sim.backend == "nccl":
            # The workers abort an NCCL collective their training thread waits in from the thread that
            # receives DeclareDead (NCCL's abort is safe from another thread): it fails now, not at its
            # timeout, and the group is done with.  The message itself is served as any other.
            if self.group is not None:
                self.group.broken = True
            self.fail_reduce(self.syncing)
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
            frozen = self.sim.hang_after_join.pop(self.rank, None)
            if frozen is not None:  # the training thread stuck right after its join; heartbeats go on
                self.block()
                self.sim.after(frozen, self.unblock)
            return
        self.run(self.protocol.receive(message, self.sim.now))
        self.next_batch()

    def block(self) -> None:
        self.blocked = True

    def unblock(self) -> None:
        self.blocked = False
        self.serve_backlog()

    def serve_backlog(self) -> None:
        self.backlog = _rank_effects.current(self.backlog)
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
        abort), else it waits for its own timeout or abort (a dead NCCL peer).  Only the collectives
        of this group: a member that has since moved to a newer group is in that group's reduce."""
        group = self.group
        if group is not None:
            group.broken = True
            for member in group.members.values():
                if abort and member.syncing is not None and member.group is group:
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
