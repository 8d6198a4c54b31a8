"""``GpuWorker``: the worker as an actor, for runs that let actorwire own the loop.

Where the embedded :class:`~actorwire.actors.control._worker.Worker` serves a loop the
user keeps, ``GpuWorker`` *is* the loop: each batch is one handler run (the
actor tells itself ``Throttle`` to take the next step), so ``SyncNow``,
``ExtendPartition``, ``ExecuteEval`` and the rest are handled between two
batches, never behind a whole epoch.  Subclass it and give it the model::

    class MyWorker(GpuWorker):
        def setup(self) -> None:            # build model, optimizer, data
            ...
        def train_batch(self, indices: range) -> float:   # one step; returns the loss
            ...
        def evaluate(self, epoch: int) -> float: ...      # optional
        def parameters(self) -> list: ...                 # what SyncNow averages

The all-reduce goes through a :class:`~actorwire.transport.comm.Communicator`
(gloo by default) formed by the coordinator's ``NewNcclSession``.

The decisions are :class:`~._rank.RankProtocol`'s, the machine the embedded
``Worker`` and the simulator run too; this actor carries out its effects.
"""

from __future__ import annotations

from typing import Any

from actorwire.actors.control import _rank
from actorwire.actors.control._rank import Effect, RankProtocol
from actorwire.actors.control._rank_ops import carry_out
from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.messages import (
    Checkpoint,
    CoordHeartbeat,
    DeclareDead,
    Down,
    EpochAggregated,
    EvalBroadcast,
    ExecuteEval,
    ExtendPartition,
    JoinAccepted,
    JoinRejected,
    NewNcclSession,
    RequestNewNcclId,
    SetEpochCallbackRole,
    SetGlobalStep,
    Shutdown,
    ShutdownWithSave,
    StartEpoch,
    SyncNow,
    Throttle,
    TimerFired,
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
        #: As the Worker: a coordinator silent this long (its CoordHeartbeat is every tick) is gone.
        self.coordinator_timeout = coordinator_timeout
        self.protocol = RankProtocol(rank, world_size, coordinator=coordinator,
                                     coordinator_timeout=coordinator_timeout, regroup_wait=regroup_wait, relay=relay)
        self.stepping = False

    # What tests and subclasses read, kept where they were.
    @property
    def steps(self) -> int:
        return self.protocol.steps

    @property
    def global_step(self) -> int:
        return self.protocol.global_step

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

    def evaluate(self, epoch: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} has no evaluate()")

    def checkpoint(self, version: int) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} has no checkpoint()")

    def make_communicator(self) -> Communicator:
        from actorwire.actors.runtime._launch import launch_env
        from actorwire.transport.comm import GlooCommunicator

        return GlooCommunicator(towards=launch_env().join)

    # -- lifecycle ------------------------------------------------------------

    def on_start(self, ctx: Context) -> None:
        self.setup()
        self.comm = self.make_communicator()
        request = self.protocol.join_request(run_id=self.run_id, model_signature=self.model_signature)
        ctx.ask(self.coordinator, request, timeout=60)

    def on_stop(self, ctx: Context) -> None:
        if self.comm is not None:
            self.comm.abort()

    @handler
    def on_joined(self, msg: JoinAccepted | JoinRejected, ctx: Context) -> None:
        try:
            self.protocol.join_reply(msg, ctx.now())
        except _rank.WorkerError as exc:
            ctx.log.error("the coordinator refused this rank", reason=str(exc))
            ctx.stop()
            return
        # As the Worker does: a coordinator that dies or goes silent ends this rank (it used to
        # wait for plans that would never come).
        ctx.watch(self.coordinator)
        ctx.start_timer("coordinator-silence", min(1.0, self.coordinator_timeout / 2), periodic=True)

    @handler
    def on_coordinator_down(self, msg: Down, ctx: Context) -> None:
        self._run(ctx, self.protocol.receive(msg, ctx.now()))

    @handler
    def on_timer(self, msg: TimerFired, ctx: Context) -> None:
        if msg.key == "coordinator-silence":
            self._run(ctx, self.protocol.tick(ctx.now()))
            self._schedule(ctx)  # a regrouping that timed out lets training go on

    @handler
    def on_control(self, msg: StartEpoch | ExtendPartition | SyncNow | SetGlobalStep | SetEpochCallbackRole
                   | EpochAggregated | EvalBroadcast | ExecuteEval | Checkpoint | RequestNewNcclId | NewNcclSession
                   | DeclareDead | Shutdown | ShutdownWithSave | CoordHeartbeat, ctx: Context) -> None:
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
        self.stepping = False
        p = self.protocol
        if not p.can_train:
            return
        if p.current is None:
            self._run(ctx, p.start_plan(ctx.now()))
        indices = p.take(self.batch_size)
        if indices is not None:
            t0 = ctx.now()
            loss = float(self.train_batch(indices))
            self._run(ctx, p.batch_done(ctx.now(), (ctx.now() - t0) * 1000, loss))
        if p.current is not None and p.exhausted:
            self._run(ctx, p.report_epoch(ctx.now()))  # as soon as its last batch is in
        self._schedule(ctx)

    # -- effects -----------------------------------------------------------------

    def _run(self, ctx: Context, effects: list[Effect]) -> None:
        p = self.protocol
        for effect in effects:
            more = carry_out(effect, p, self.comm, parameters=self.parameters, evaluate=self.evaluate,
                             checkpoint=self.checkpoint, now=ctx.now)
            if more is not None:
                self._run(ctx, more)
            elif isinstance(effect, _rank.Send):
                try:
                    ctx.tell(effect.to or self.coordinator, effect.message)
                except (ActorDead, UnknownActor) as exc:
                    self._run(ctx, p.coordinator_gone(str(exc)))
            elif isinstance(effect, _rank.Log):
                getattr(ctx.log, effect.level)(effect.event, **effect.fields)
            elif isinstance(effect, _rank.Ended):
                if not effect.coordinator_gone:
                    for said in p.exiting():
                        self._run(ctx, [said])
                ctx.stop()
