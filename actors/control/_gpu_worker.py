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
"""

from __future__ import annotations

from typing import Any

from actorwire.actors.control._rank_ops import (
    run_checkpoint,
    run_eval,
    weighted_average,
)
from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.messages import (
    Batch,
    Checkpoint,
    CoordHeartbeat,
    DeclareDead,
    Down,
    EpochAggregated,
    EvalBroadcast,
    ExecuteEval,
    Exiting,
    ExtendPartition,
    JoinAccepted,
    JoinRejected,
    JoinRequest,
    MetricsMsg,
    NewNcclIdGenerated,
    NewNcclSession,
    RequestNewNcclId,
    SessionFailed,
    SetEpochCallbackRole,
    SetGlobalStep,
    Shutdown,
    ShutdownWithSave,
    StartEpoch,
    SyncAck,
    SyncNow,
    Throttle,
    TimerFired,
)
from actorwire.transport.comm import CommError, Communicator


class GpuWorker(Actor):
    """A data-parallel rank as an actor; see the module doc."""

    def __init__(self, rank: int, world_size: int, run_id: str, *, batch_size: int = 32,
                 coordinator: str = "coordinator", model_signature: str = "", backend: str = "gloo",
                 coordinator_timeout: float = 30.0) -> None:
        self.rank = rank
        self.world_size = world_size
        self.run_id = run_id
        self.batch_size = batch_size
        self.coordinator = coordinator
        self.model_signature = model_signature
        self.backend = backend
        self.comm: Communicator | None = None
        self.queue: list[tuple[int, int, int]] = []  # (epoch, next index, end) slices to train
        self.epoch = -1
        self.steps = 0
        self.steps_since_sync = 0
        self.epoch_batches = 0
        self.epoch_loss = 0.0
        self.epoch_samples = 0
        self.extensions = 0
        self.global_step = 0
        self.epoch_role: int | None = None
        self.aggregates: list[Any] = []
        self.evals: list[tuple[int, float]] = []
        self.stepping = False
        #: As the Worker: a coordinator silent this long (its CoordHeartbeat is every tick) is gone.
        self.coordinator_timeout = coordinator_timeout
        self.coord_seen = 0.0
        self.session_attempt = 0

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
        ctx.ask(self.coordinator, JoinRequest(rank=self.rank, world_size=self.world_size, run_id=self.run_id,
                                              model_signature=self.model_signature), timeout=60)

    def on_stop(self, ctx: Context) -> None:
        if self.comm is not None:
            self.comm.abort()

    @handler
    def on_joined(self, msg: JoinAccepted | JoinRejected, ctx: Context) -> None:
        if isinstance(msg, JoinRejected):
            ctx.log.error("the coordinator refused this rank", reason=msg.reason)
            ctx.stop()
            return
        # As the Worker does: a coordinator that dies or goes silent ends this rank (it used to
        # wait for plans that would never come).
        ctx.watch(self.coordinator)
        self.coord_seen = ctx.now()
        ctx.start_timer("coordinator-silence", min(1.0, self.coordinator_timeout / 2), periodic=True)

    @handler
    def on_coordinator_down(self, msg: Down, ctx: Context) -> None:
        if msg.name == self.coordinator:
            ctx.log.error("coordinator is down; stopping", reason=msg.reason.value)
            ctx.stop()

    @handler
    def on_timer(self, msg: TimerFired, ctx: Context) -> None:
        if msg.key == "coordinator-silence" and ctx.now() - self.coord_seen > self.coordinator_timeout:
            ctx.log.error("coordinator silent; stopping", silent_s=round(ctx.now() - self.coord_seen, 1))
            ctx.stop()

    # -- the loop: one batch per handler run ------------------------------------

    @handler
    def on_plan(self, msg: StartEpoch | ExtendPartition, ctx: Context) -> None:
        self.coord_seen = ctx.now()
        if isinstance(msg, StartEpoch):
            self.epoch = msg.epoch
            self.epoch_batches = self.epoch_samples = self.extensions = 0
            self.epoch_loss = 0.0
            self.epoch_started = ctx.now()
            self.queue.append((msg.epoch, msg.partition_offset, msg.partition_offset + msg.partition_size))
        else:
            self.extensions += 1
            self.queue.append((msg.epoch, msg.partition_offset, msg.partition_offset + msg.partition_size))
        self._schedule(ctx)

    def _schedule(self, ctx: Context) -> None:
        if not self.stepping and self.queue:
            self.stepping = True
            ctx.tell(ctx.name, Throttle())  # the next batch, after whatever is already queued

    @handler
    def on_step(self, msg: Throttle, ctx: Context) -> None:
        self.stepping = False
        if not self.queue:
            return
        epoch, start, end = self.queue[0]
        stop = min(start + self.batch_size, end)
        t0 = ctx.now()
        loss = float(self.train_batch(range(start, stop)))
        batch_ms = (ctx.now() - t0) * 1000
        self.steps += 1
        self.steps_since_sync += 1
        self.epoch_batches += 1
        self.epoch_loss += loss
        self.epoch_samples += stop - start
        ctx.tell(self.coordinator, Batch(rank=self.rank, batch_ms=batch_ms, step_count=self.steps,
                                         batch_loss=loss))
        if stop < end:
            self.queue[0] = (epoch, stop, end)
        else:
            self.queue.pop(0)
            if not self.queue:
                self._report(ctx, epoch)
        self._schedule(ctx)

    def _report(self, ctx: Context, epoch: int) -> None:
        elapsed = (ctx.now() - getattr(self, "epoch_started", ctx.now())) * 1000
        ctx.tell(self.coordinator, MetricsMsg(
            rank=self.rank, epoch=epoch, avg_loss=self.epoch_loss / max(1, self.epoch_batches),
            batches_processed=self.epoch_batches, epoch_ms=elapsed, samples_processed=self.epoch_samples,
            share_complete_ms=elapsed, extensions=self.extensions))
        self.epoch_batches = self.epoch_samples = self.extensions = 0
        self.epoch_loss = 0.0

    # -- control ----------------------------------------------------------------

    @handler
    def on_sync(self, msg: SyncNow, ctx: Context) -> None:
        self.coord_seen = ctx.now()
        params = self.parameters()
        if params and self.comm is not None:
            try:
                weighted_average(self.comm, params, self.steps_since_sync)
            except CommError as exc:
                # Abandoned: the coordinator redoes the cycle once the group is re-formed. Said at
                # once, as the Worker does: without a death, only this makes it re-form the group.
                ctx.log.warning("all-reduce failed; asking for a new group", error=str(exc))
                ctx.tell(self.coordinator, SessionFailed(rank=self.rank, attempt=self.session_attempt,
                                                         reason=f"collective failed: {str(exc)[:300]}"))
                return
        self.steps_since_sync = 0
        ctx.tell(self.coordinator, SyncAck(rank=self.rank, step_count=self.steps))

    @handler
    def on_rendezvous(self, msg: RequestNewNcclId | NewNcclSession | DeclareDead, ctx: Context) -> None:
        self.coord_seen = ctx.now()
        if self.comm is None:
            return
        if isinstance(msg, RequestNewNcclId):
            try:
                uid = self.comm.new_unique_id()
            except CommError as exc:  # the coordinator tries the next rank after its rendezvous timeout
                ctx.log.error("could not make the new process group's id", error=str(exc))
                return
            ctx.tell(self.coordinator, NewNcclIdGenerated(rank=self.rank, uid=uid, attempt=msg.attempt))
        elif isinstance(msg, NewNcclSession):
            self.session_attempt = max(self.session_attempt, msg.attempt)
            try:
                self.comm.init(msg.uid, msg.new_rank, msg.new_world_size)
            except CommError as exc:
                ctx.tell(self.coordinator, SessionFailed(rank=self.rank, attempt=msg.attempt, reason=str(exc)[:500]))
        else:
            self.comm.abort()

    @handler
    def on_eval(self, msg: ExecuteEval, ctx: Context) -> None:
        self.coord_seen = ctx.now()
        ctx.tell(self.coordinator, run_eval(self.rank, msg, self.evaluate))

    @handler
    def on_checkpoint(self, msg: Checkpoint, ctx: Context) -> None:
        self.coord_seen = ctx.now()
        ctx.tell(self.coordinator, run_checkpoint(self.rank, msg, self.checkpoint))

    @handler
    def on_info(self, msg: SetGlobalStep | SetEpochCallbackRole | EpochAggregated | EvalBroadcast | CoordHeartbeat,
                ctx: Context) -> None:
        self.coord_seen = ctx.now()
        if isinstance(msg, SetGlobalStep):
            self.global_step = msg.global_step
        elif isinstance(msg, SetEpochCallbackRole):
            self.epoch_role = msg.rank
        elif isinstance(msg, EpochAggregated):
            self.aggregates.append(msg.metrics)
        elif isinstance(msg, EvalBroadcast):
            self.evals.append((msg.epoch, msg.metric))

    @handler
    def on_end(self, msg: Shutdown | ShutdownWithSave, ctx: Context) -> None:
        self.coord_seen = ctx.now()
        if isinstance(msg, ShutdownWithSave):
            ctx.log.warning("the coordinator ended the run", reason=msg.reason.value)
        ctx.tell(self.coordinator, Exiting(rank=self.rank))
        ctx.stop()

