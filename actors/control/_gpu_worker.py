"""``GpuWorker``: the worker as an actor, for runs that let actorwire own the loop.

Where the embedded :class:`~actorwire.actors.control._worker.Worker` serves a loop the
user keeps, ``GpuWorker`` *is* the loop: each batch is one handler run (the
actor tells itself ``Throttle`` to take the next step; the coordinator's ``Throttle`` goes to the
protocol), so ``SyncNow``,
``ExtendPartition``, ``ExecuteEval`` and the rest are handled between two
batches, never behind a whole epoch.  Subclass it and give it the model::

    class MyWorker(GpuWorker):
        def setup(self) -> None:            # build model, optimizer, data
            ...
        def train_batch(self, indices: range) -> float:   # one step; returns the loss
            ...
        def evaluate(self, epoch: int) -> float: ...      # optional
        def parameters(self) -> list: ...                 # what SyncNow averages
        def optimizer(self): ...                          # optional: its state is averaged too

The all-reduce goes through a :class:`~actorwire.transport.comm.Communicator`
(gloo by default) formed by the coordinator's ``NewNcclSession``.

The decisions are :class:`~._rank.RankProtocol`'s, the machine the embedded
``Worker`` and the simulator run too.  The effects (``setup``, each training
step, the all-reduce, forming a group, evals, checkpoints) run in the actor's
effects adapter (:class:`GpuWorkerEffects`, ``worker/<rank>/io``, same process),
which calls the subclass's methods; the actor sees their outcomes as messages.
Control messages that arrive while a batch trains wait for it, so each batch
is still one step between two control messages, and a recording of the rank
replays with no model, no data and no process group.
"""

from __future__ import annotations

import time
from typing import Any

from actorwire.actors.control import _rank, _rank_effects
from actorwire.actors.control._rank import Effect, RankProtocol
from actorwire.actors.control._rank_ops import all_reduce, form_group, new_group_id, run_checkpoint, run_eval
from actorwire.actors.runtime._actor import Actor, EffectsAdapter, effects_name, handler
from actorwire.actors.runtime._context import Context
from actorwire.messages import Message
from actorwire.messages.kinds import (
    AbortComm,
    AllReduceParams,
    BatchTrained,
    Checkpoint,
    CheckpointResult,
    CoordHeartbeat,
    DeclareDead,
    Down,
    EpochAggregated,
    EvalBroadcast,
    EvalResult,
    Evicted,
    ExecuteEval,
    ExtendPartition,
    GroupIdMade,
    GroupJoined,
    JoinAccepted,
    JoinGroup,
    JoinRejected,
    NewGroupId,
    NewNcclSession,
    ParamsReduced,
    RequestNewNcclId,
    SetEpochCallbackRole,
    SetGlobalStep,
    Shutdown,
    ShutdownWithSave,
    StartEpoch,
    SyncNow,
    Throttle,
    TimerFired,
    TrainBatch,
)
from actorwire.transport import ActorDead, UnknownActor
from actorwire.transport.comm import Communicator

_FROM_COORDINATOR = (StartEpoch, ExtendPartition, SyncNow, SetGlobalStep, SetEpochCallbackRole, EpochAggregated,
                     EvalBroadcast, ExecuteEval, Checkpoint, RequestNewNcclId, NewNcclSession, DeclareDead,
                     Shutdown, ShutdownWithSave, CoordHeartbeat)


class GpuWorker(Actor):
    """A data-parallel rank as an actor; see the module doc."""

    def __init__(self, rank: int, world_size: int, run_id: str, *, batch_size: int = 32,
                 coordinator: str = "coordinator", model_signature: str = "", backend: str = "gloo",
                 coordinator_timeout: float = 30.0, regroup_wait: float = 60.0, relay: str = "") -> None:
        self.rank = rank
        self.world_size = world_size
        self.run_id = run_id
        self.batch_size = batch_size
        self.coordinator = coordinator
        self.model_signature = model_signature
        self.backend = backend
        self.comm: Communicator | None = None
        #: As the Worker: a coordinator silent this long (its CoordHeartbeat is every tick) is warned
        #: about; its Down ends the rank.
        self.coordinator_timeout = coordinator_timeout
        self.protocol = RankProtocol(rank, world_size, coordinator=coordinator,
                                     coordinator_timeout=coordinator_timeout, regroup_wait=regroup_wait, relay=relay,
                                     # A report per batch: the batch runs on the adapter, and the report
                                     # goes from this actor's thread, not the training loop's.
                                     report_every=0.0)
        self.stepping = False
        #: A batch is in the adapter: control messages wait for it (``held``).
        self.training = False
        self.held: list[Message] = []
        #: When each group session came (uid, attempt): one served after waiting past half the
        #: formation timeout (held behind a long batch, or in the adapter's mailbox) is refused.
        self.session_came: dict[tuple[bytes, int], float] = {}
        #: An all-reduce or a group formation is in the adapter: no batch starts before its outcome.
        self.collective = False

    # What tests and subclasses read, kept where they were.
    @property
    def steps(self) -> int:
        return self.protocol.steps

    @property
    def global_step(self) -> int:
        return self.protocol.global_step

    @property
    def refused(self) -> dict[str, int]:
        """Control messages ignored because someone other than the coordinator or this rank's relay sent them, by sender."""
        return self.protocol.refused

    @property
    def epoch_role(self) -> int | None:
        return self.protocol.epoch_role

    @property
    def aggregates(self) -> list[Any]:
        return list(self.protocol.aggregated)

    @property
    def evals(self) -> list[tuple[int, float]]:
        return list(self.protocol.evals)

    # -- for subclasses -------------------------------------------------------

    def setup(self) -> None:
        """Build the model, the optimizer and the data (runs in the actor's thread)."""

    def train_batch(self, indices: range) -> float:
        """Train on ``indices``; return the loss."""
        raise NotImplementedError(f"{type(self).__name__} must implement train_batch()")

    def parameters(self) -> list[Any]:
        """The tensors SyncNow averages (default: none, so sync is a no-op)."""
        return []

    def optimizer(self) -> Any:
        """The torch optimizer whose state (momentum, moments) SyncNow averages with the parameters,
        by the same weights (default: none, so each rank keeps its own)."""
        return None

    def evaluate(self, epoch: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} has no evaluate()")

    def checkpoint(self, version: int) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} has no checkpoint()")

    def make_communicator(self) -> Communicator:
        from actorwire.actors.runtime._launch import launch_env
        from actorwire.transport.comm import GlooCommunicator

        return GlooCommunicator(towards=launch_env().join)

    # -- lifecycle ------------------------------------------------------------

    def effects(self, name: str) -> Actor | None:
        return GpuWorkerEffects(name, self)

    def on_start(self, ctx: Context) -> None:
        self.io = effects_name(ctx.name)  # it ran setup() and made the communicator before this
        request = self.protocol.join_request(run_id=self.run_id, model_signature=self.model_signature,
                                             evaluates=type(self).evaluate is not GpuWorker.evaluate)
        ctx.ask(self.coordinator, request, timeout=60)

    @handler
    def on_joined(self, msg: JoinAccepted | JoinRejected, ctx: Context) -> None:
        try:
            self.protocol.join_reply(msg, ctx.now())
        except _rank.WorkerError as exc:
            ctx.log.error("the coordinator refused this rank", reason=str(exc))
            ctx.stop(str(exc))
            return
        # As the Worker does: a coordinator that dies ends this rank (it would wait for plans that never
        # come), a silent one is warned about.
        ctx.watch(self.coordinator)
        if self.protocol.relay:
            try:
                ctx.watch(self.protocol.relay)  # its Down: the rank reports to the coordinator itself
            except UnknownActor as exc:
                self._run(ctx, self.protocol.relay_gone(str(exc)))
        ctx.start_timer("coordinator-silence", min(1.0, self.coordinator_timeout / 2), periodic=True)

    @handler
    def on_coordinator_down(self, msg: Down, ctx: Context) -> None:
        if self.training:
            self.held.append(msg)
            return
        self._run(ctx, self.protocol.receive(msg, ctx.now()))

    @handler
    def on_timer(self, msg: TimerFired, ctx: Context) -> None:
        if msg.key == "coordinator-silence" and not self.training:
            self._run(ctx, self.protocol.tick(ctx.now()))
            self._schedule(ctx)  # a regrouping that timed out lets training go on

    @handler
    def on_control(self, msg: StartEpoch | ExtendPartition | SyncNow | SetGlobalStep | SetEpochCallbackRole
                   | EpochAggregated | EvalBroadcast | ExecuteEval | Checkpoint | RequestNewNcclId | NewNcclSession
                   | DeclareDead | Shutdown | ShutdownWithSave | Evicted | CoordHeartbeat, ctx: Context) -> None:
        if not self._from_coordinator(msg, ctx):
            return
        if isinstance(msg, NewNcclSession):
            self.session_came.setdefault((msg.uid, msg.attempt), ctx.now())
        if self.training:  # between two batches, as when a batch was one handler run
            self.held.append(msg)
            return
        self._run(ctx, self.protocol.receive(msg, ctx.now()))
        self._schedule(ctx)

    # -- the loop: one batch per handler run ------------------------------------

    def _schedule(self, ctx: Context) -> None:
        p = self.protocol
        if not self.stepping and p.can_train and (p.current is not None or p.plans):
            self.stepping = True
            ctx.tell(ctx.name, Throttle())  # the next batch, after whatever is already queued

    @handler
    def on_step(self, msg: Throttle, ctx: Context) -> None:
        """Its own ``Throttle`` is the next step; the coordinator's says the rank ran ahead of its peers:
        the protocol takes it (no batch until the next sync), between two batches as any control."""
        if ctx.sender != ctx.name:
            if not self._from_coordinator(msg, ctx):
                return
            if self.training:
                self.held.append(msg)
            else:
                self._run(ctx, self.protocol.receive(msg, ctx.now()))
            return
        self.stepping = False
        p = self.protocol
        if not p.can_train or self.training or self.collective:
            return
        if p.current is None:
            self._run(ctx, p.start_plan(ctx.now()))
        indices = p.take(self.batch_size)
        if indices is not None:
            self.training = True
            ctx.tell(self.io, TrainBatch(start=indices.start, stop=indices.stop))
            return
        self._after_batch(ctx)

    @handler
    def on_batch_trained(self, msg: BatchTrained, ctx: Context) -> None:
        if not self._from_io(msg, ctx) or not self.training:
            return
        self.training = False
        if msg.error is not None:
            self._release(ctx)
            raise _rank.WorkerError(f"rank {self.rank}: training batch {msg.start}-{msg.stop} failed: {msg.error}")
        self._run(ctx, self.protocol.batch_done(ctx.now(), msg.batch_ms, msg.loss))
        self._after_batch(ctx)
        self._release(ctx)

    def _after_batch(self, ctx: Context) -> None:
        p = self.protocol
        if p.current is not None and p.exhausted:
            self._run(ctx, p.report_epoch(ctx.now()))  # as soon as its last batch is in
        self._schedule(ctx)

    def _release(self, ctx: Context) -> None:
        """Handle what came while the batch trained, in order; of the group sessions, only the newest
        (``_rank_effects.current``: the others were formed and given up on while this rank trained)."""
        held, self.held = _rank_effects.current(self.held), []
        for i, msg in enumerate(held):
            if self.training:  # a message handled just now started another batch
                self.held = held[i:] + self.held
                return
            self._run(ctx, self.protocol.receive(msg, ctx.now()))
            self._schedule(ctx)

    def _from_coordinator(self, msg: Message, ctx: Context) -> bool:
        """Whether ``msg`` may be served (``RankProtocol.refusal``); anything else is ignored."""
        refusal = self.protocol.refusal(ctx.sender, msg)
        if refusal is None:
            return True
        self._run(ctx, refusal)
        return False

    def _from_io(self, msg: Message, ctx: Context) -> bool:
        if ctx.sender == self.io:
            return True
        ctx.log.warning("an effect reply not from this worker's adapter; ignored", kind=type(msg).wire_tag(),
                        sender=ctx.sender)
        return False

    # -- the adapter's answers -------------------------------------------------------

    @handler
    def on_reduced(self, msg: ParamsReduced, ctx: Context) -> None:
        if self._from_io(msg, ctx):
            self.collective = False
            self._run(ctx, self.protocol.sync_done(msg.cycle, msg.error, ctx.now(), msg.covered))
            self._schedule(ctx)

    @handler
    def on_group_joined(self, msg: GroupJoined, ctx: Context) -> None:
        if self._from_io(msg, ctx):
            self.collective = False
            self._run(ctx, self.protocol.group_formed(msg.attempt, msg.error, ctx.now()))
            self._schedule(ctx)

    @handler
    def on_group_id(self, msg: GroupIdMade, ctx: Context) -> None:
        if self._from_io(msg, ctx):
            self._run(ctx, self.protocol.group_id_made(msg.attempt, msg.uid, msg.error))

    @handler
    def on_evaluated(self, msg: EvalResult, ctx: Context) -> None:
        if self._from_io(msg, ctx):
            self._run(ctx, self.protocol.evaluated(msg))

    @handler
    def on_checkpointed(self, msg: CheckpointResult, ctx: Context) -> None:
        if self._from_io(msg, ctx):
            self._run(ctx, self.protocol.checkpointed(msg))

    # -- effects -----------------------------------------------------------------

    def _run(self, ctx: Context, effects: list[Effect]) -> None:
        p = self.protocol
        for effect in effects:
            if isinstance(effect, _rank.AbortGroup) and self.collective and self.comm is not None and getattr(
                    self.comm, "abort_from_any_thread", False):
                # The adapter's thread waits in the collective: the AbortComm it is told below would
                # reach it only after the collective's own timeout.  NCCL's abort frees it from here.
                ctx.log.warning("a peer was declared dead during a collective: aborting it")
                self.comm.abort()
            request = _request(effect)
            if isinstance(request, JoinGroup):
                key = (request.session.uid, request.session.attempt)
                request = JoinGroup(session=request.session, asked_at=_rank_effects.session_served(self.session_came, key, ctx.now()))
            if request is not None:
                if isinstance(request, (AllReduceParams, JoinGroup)):
                    self.collective = True
                ctx.tell(self.io, request)  # the outcome comes back as a message
            elif isinstance(effect, _rank.Send):
                try:
                    ctx.tell(effect.to or self.coordinator, effect.message)
                except (ActorDead, UnknownActor) as exc:
                    self._run(ctx, p.send_failed(effect.to, effect.message, str(exc)))
            elif isinstance(effect, _rank.Log):
                getattr(ctx.log, effect.level)(effect.event, **effect.fields)
            elif isinstance(effect, _rank.Ended):
                if not effect.failed:
                    for said in p.exiting():
                        self._run(ctx, [said])
                # A rank evicted, or left by its coordinator before the run ended, fails its process.
                ctx.stop(f"rank {self.rank}: {effect.why}" if effect.failed else "")


def _request(effect: Effect) -> Message | None:
    """What the adapter is told to do for ``effect``; None for what the actor does itself."""
    if isinstance(effect, _rank.AllReduce):
        return AllReduceParams(cycle=effect.cycle, steps=effect.steps, weight=effect.weight)
    if isinstance(effect, _rank.FormGroup):
        return JoinGroup(session=effect.session)
    if isinstance(effect, _rank.MakeGroupId):
        return NewGroupId(attempt=effect.attempt)
    if isinstance(effect, _rank.AbortGroup):
        return AbortComm()
    if isinstance(effect, _rank.Evaluate):
        return effect.request
    if isinstance(effect, _rank.SaveCheckpoint):
        return effect.request
    return None


class GpuWorkerEffects(EffectsAdapter):
    """A GpuWorker's effects: its ``setup``, training steps, collectives, evals and checkpoints.

    It calls the methods of the worker it serves (the same object, in the same process): the model
    and the data are the subclass's; the decisions stay in the actor.
    """

    def __init__(self, owner: str, worker: GpuWorker) -> None:
        super().__init__(owner)
        self.worker = worker

    def on_start(self, ctx: Context) -> None:
        w = self.worker
        w.setup()
        w.comm = w.make_communicator()

    def on_stop(self, ctx: Context) -> None:
        if self.worker.comm is not None:
            self.worker.comm.abort()

    @handler
    def on_train(self, msg: TrainBatch, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        t0 = time.monotonic()
        try:
            loss = float(self.worker.train_batch(range(msg.start, msg.stop)))
        except Exception as exc:
            ctx.tell(self.owner, BatchTrained(start=msg.start, stop=msg.stop, error=f"{type(exc).__name__}: {exc}"))
            return
        ctx.tell(self.owner, BatchTrained(start=msg.start, stop=msg.stop, loss=loss,
                                          batch_ms=(time.monotonic() - t0) * 1000))

    @handler
    def on_all_reduce(self, msg: AllReduceParams, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        weight = msg.steps if msg.weight is None else msg.weight
        error, covered = all_reduce(self.worker.comm, self.worker.parameters(), weight, msg.steps,
                                    self.worker.optimizer())
        ctx.tell(self.owner, ParamsReduced(cycle=msg.cycle, error=error, covered=covered))

    @handler
    def on_join_group(self, msg: JoinGroup, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        late = None
        if msg.asked_at:
            late = _rank_effects.late_for_group(ctx.now() - msg.asked_at, getattr(self.worker.comm, "formation_timeout_s", None))
        error = late or form_group(self.worker.comm, msg.session)
        ctx.tell(self.owner, GroupJoined(attempt=msg.session.attempt, error=error))

    @handler
    def on_new_group_id(self, msg: NewGroupId, ctx: Context) -> None:
        if not self.obeys(ctx) or self.worker.comm is None:
            return  # no group to form here: the coordinator asks another rank
        uid, error = new_group_id(self.worker.comm)
        ctx.tell(self.owner, GroupIdMade(attempt=msg.attempt, uid=uid, error=error))

    @handler
    def on_abort(self, msg: AbortComm, ctx: Context) -> None:
        if self.obeys(ctx) and self.worker.comm is not None:
            self.worker.comm.abort()

    @handler
    def on_eval(self, msg: ExecuteEval, ctx: Context) -> None:
        if self.obeys(ctx):
            ctx.tell(self.owner, run_eval(self.worker.rank, msg, self.worker.evaluate))

    @handler
    def on_checkpoint(self, msg: Checkpoint, ctx: Context) -> None:
        if self.obeys(ctx):
            ctx.tell(self.owner, run_checkpoint(self.worker.rank, msg, self.worker.checkpoint))
