"""The embedded ``Worker`` API: a custom training loop talks to the coordinator.

The user keeps ``main()``, the model and the loop.  The worker joins the
coordinator, hands out epoch plans, reports timing and metrics, runs the
work-weighted all-reduce when the coordinator says ``SyncNow``, and re-forms
the process group after a death, all from the training thread, between
steps, without blocking it except inside ``next_plan()`` and a sync::

    with Worker(rank=rank, world_size=world, model=model) as worker:
        while (plan := worker.next_plan()) is not None:
            for batch in worker.batches(plan, batch_size=32):
                loss = train_step(batch)
                worker.report_timing(batch_ms=..., batch_loss=loss)
            worker.report_epoch(plan)
        worker.finish()

Leaving the ``with`` block without ``finish()`` is an error exit: no
``Exiting`` is sent (the coordinator must see a death, never a clean exit), a
death record is written, and the process exits non-zero.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import pathlib
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from actorwire.actors import _names
from actorwire.actors.control._rank_ops import (
    run_checkpoint,
    run_eval,
    weighted_average,
)
from actorwire.messages import (
    ActorwireError,
    Batch,
    Checkpoint,
    CoordHeartbeat,
    DeclareDead,
    Down,
    EpochAggregated,
    EpochFnElapsed,
    EpochMetrics,
    EvalBroadcast,
    ExecuteEval,
    Exiting,
    ExtendPartition,
    Heartbeat,
    Intent,
    IntentKind,
    JoinRejected,
    JoinRequest,
    LrUpdate,
    Message,
    MetricsMsg,
    NewNcclIdGenerated,
    NewNcclSession,
    RequestNewNcclId,
    SaveReason,
    ScalarSum,
    SessionFailed,
    SetEpochCallbackRole,
    SetGlobalStep,
    Shutdown,
    ShutdownWithSave,
    StartEpoch,
    SyncAck,
    SyncNow,
    UsageError,
)
from actorwire.transport import ActorDead, SystemClosed, UnknownActor
from actorwire.transport._errors import InvalidArgument
from actorwire.transport._log import get_logger
from actorwire.transport._settings import settings
from actorwire.transport.comm import CommError, Communicator, GlooCommunicator

_SESSION_WAIT_S = 60.0


@dataclasses.dataclass
class Plan:
    """One epoch's work for this rank: ``size`` samples from ``offset``, plus extensions."""

    epoch: int
    offset: int
    size: int
    #: ``(offset, size)`` slices of dead ranks' work handed to this rank during the epoch.
    extensions: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    started: float = 0.0
    #: This plan is itself a slice handed over after this rank had reported the epoch.
    is_extension: bool = False

    @property
    def total(self) -> int:
        return self.size + sum(n for _, n in self.extensions)


class WorkerError(ActorwireError, RuntimeError):
    """The coordinator refused this worker, or went away."""


class Worker:
    """See the module doc.  ``model`` (a torch module) is what ``SyncNow`` averages.

    ``dataset_size``, the samples this rank's data holds, is checked at the join: data shorter than
    the run's dataset is refused there, naming both sizes, instead of training empty slices.
    """

    def __init__(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        system: Any = None,
        model: Any = None,
        communicator: Communicator | None = None,
        coordinator: str = "coordinator",
        model_signature: str | None = None,
        eval_fn: Callable[[int], float] | None = None,
        checkpoint_fn: Callable[[int], str | None] | None = None,
        epoch_fn: Callable[[int], None] | None = None,
        coordinator_timeout: float = 30.0,
        death_dir: str | None = None,
        join_timeout: float = 60.0,
        heartbeat_interval: float = 1.0,
        dataset_size: int | None = None,
    ) -> None:
        from actorwire.actors.runtime._launch import attach

        self.system = system if system is not None else attach()
        from actorwire.actors.runtime._launch import launch_env

        found = launch_env()  # ours, torchrun's or SLURM's
        self.rank = rank if rank is not None else (found.rank if found.rank is not None else 0)
        self.world_size = world_size if world_size is not None else (found.world_size or 1)
        #: The launcher's local rank (which GPU of this host), when it said.
        self.local_rank = found.local_rank
        self.model = model
        self.comm = communicator
        if isinstance(communicator, GlooCommunicator) and communicator.towards is None:
            communicator.towards = self.system.endpoint  # peers reach this rank on the route to the root
        self.coordinator = coordinator
        self.eval_fn = eval_fn
        self.checkpoint_fn = checkpoint_fn
        self.epoch_fn = epoch_fn
        self.coordinator_timeout = coordinator_timeout
        self._snapshot: Any = None
        self._session_attempt = 0
        self.death_dir = death_dir or settings().death_dir or tempfile.gettempdir()
        self.log = get_logger(role="worker", rank=self.rank)
        self.name = _names.worker(self.rank)
        self.inbox = self.system.inbox(self.name)
        self._plans: collections.deque[Plan] = collections.deque()
        self._current: Plan | None = None
        self._metrics: collections.deque[EpochMetrics] = collections.deque()
        self._evals: collections.deque[tuple[int, float]] = collections.deque()
        self._aggregated: EpochMetrics | None = None
        self._shutdown: Shutdown | ShutdownWithSave | None = None
        self._scalars: dict[str, list[float]] = {}
        self._steps = 0
        self._steps_since_sync = 0
        self.global_step = 0
        self.epoch_role: int | None = None
        self._epoch_batches = 0
        self._epoch_loss = 0.0
        self._compute_ms = 0.0
        self._data_ms = 0.0
        self._last_batch_end = 0.0
        self._coord_seen = time.monotonic()
        self._last_lr: float | None = None
        self._finished = False
        self._exiting_sent = False
        self.system.wait_for(coordinator, timeout=join_timeout)
        signature = model_signature if model_signature is not None else _model_signature(model)
        reply = self.inbox.ask(coordinator, JoinRequest(rank=self.rank, world_size=self.world_size,
                                                        run_id=self.system.run_id, model_signature=signature,
                                                        host=socket.gethostname(), pid=os.getpid(),
                                                        dataset_size=dataset_size or 0),
                               timeout=join_timeout)
        if isinstance(reply, JoinRejected):
            raise WorkerError(f"the coordinator refused rank {self.rank}: {reply.reason}")
        self.inbox.watch(coordinator)
        # A rank blocked in a long step or a collective still reports in from a
        # thread of its own, so the coordinator tells slow from dead; the
        # runtime's own heartbeats cover the process.
        self._beating = threading.Event()
        self._beat_box = self.system.inbox(_names.worker_heartbeat(self.rank))  # its own sender: FIFO is per thread
        self._beat_thread = threading.Thread(target=self._beat, args=(heartbeat_interval,), daemon=True,
                                             name=f"actorwire heartbeat {self.name}")
        self._beat_thread.start()

    def _beat(self, interval: float) -> None:
        while not self._beating.wait(interval):
            try:
                self._beat_box.tell(self.coordinator, Heartbeat(rank=self.rank, step_count=self._steps),
                                    timeout=interval)
            except Exception:  # the coordinator is gone or the system is closing: the loop will notice
                return

    # -- the loop ---------------------------------------------------------------

    def next_plan(self, timeout: float | None = None) -> Plan | None:
        """The next epoch's plan, or None once the run is over.  Keeps serving control while it waits."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._plans:
            if self._shutdown is not None:
                return None
            wait = 0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic()))
            self._pump(wait)
            if deadline is not None and time.monotonic() >= deadline:
                return None
        plan = self._plans.popleft()
        plan.started = time.monotonic()
        self._current = plan
        self._epoch_batches = 0
        self._epoch_loss = 0.0
        self._compute_ms = self._data_ms = 0.0
        self._last_batch_end = plan.started
        if self.epoch_fn is not None and self.epoch_role == self.rank:
            t0 = time.monotonic()
            self.epoch_fn(plan.epoch)
            self._tell(EpochFnElapsed(rank=self.rank, epoch=plan.epoch,
                                                            elapsed_ms=(time.monotonic() - t0) * 1000))
        return plan

    def batches(self, plan: Plan, batch_size: int) -> Iterator[range]:
        """Index ranges of ``batch_size`` over the plan, then over slices handed over meanwhile."""
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be >= 1, got {batch_size}")
        slices = [(plan.offset, plan.size)]
        done = 0
        while True:
            while done < len(slices):
                start, size = slices[done]
                done += 1
                for first in range(start, start + size, batch_size):
                    yield range(first, min(first + batch_size, start + size))
            self._pump(0.0)  # a dead rank's remainder may have arrived
            more = plan.extensions[len(slices) - 1:]
            if not more or self._shutdown is not None:
                return
            slices.extend(more)

    def report_timing(self, batch_ms: float, batch_loss: float, *, data_ms: float = 0.0, lr: float | None = None,
                      param_norm: float | None = None) -> None:
        """One batch done: ``Batch`` (then ``LrUpdate``), then serve any control that arrived."""
        if not math.isfinite(batch_loss):  # never an epoch row: the run's weights are broken from here
            raise WorkerError(f"rank {self.rank}: the loss of batch {self._epoch_batches + 1} of epoch "
                              f"{self._current.epoch if self._current else '?'} is {batch_loss}")
        self._steps += 1
        self._steps_since_sync += 1
        self._epoch_batches += 1
        self._epoch_loss += batch_loss
        self._compute_ms += batch_ms
        self._data_ms += data_ms
        self._last_batch_end = time.monotonic()
        tell = self.inbox.tell
        try:
            tell(self.coordinator, Batch(rank=self.rank, batch_ms=batch_ms, step_count=self._steps,
                                         batch_loss=batch_loss, data_ms=data_ms, param_norm=param_norm))
            if lr is not None and lr != self._last_lr:
                # The coordinator caches the latest LR per rank, so an unchanged LR is not
                # sent again (it halves the cost of a step under a constant LR).
                self._last_lr = lr
                tell(self.coordinator, LrUpdate(rank=self.rank, lr=lr))
        except (ActorDead, UnknownActor, SystemClosed) as exc:
            self._coordinator_gone(exc)
        if len(self.inbox):
            self._pump(0.0)

    def _tell(self, message: Message) -> None:
        """Tell the coordinator; if it is gone, the run is over for this rank (``shutting_down``)."""
        try:
            self.inbox.tell(self.coordinator, message)
        except (ActorDead, UnknownActor, SystemClosed) as exc:
            self._coordinator_gone(exc)

    def _coordinator_gone(self, exc: Exception) -> None:
        if self._shutdown is None:
            self.log.error("coordinator is gone; shutting down locally", error=str(exc))
            self._shutdown = Shutdown()

    def record_scalar(self, name: str, value: float) -> None:
        acc = self._scalars.get(name)
        if acc is None:
            self._scalars[name] = [float(value), 1.0]
        else:
            acc[0] += value
            acc[1] += 1

    def report_epoch(self, plan: Plan | None = None, *, samples: int | None = None) -> None:
        """The plan is done: send ``MetricsMsg`` with this epoch's loss, timings and scalars."""
        plan = plan or self._current
        if plan is None:
            raise UsageError("report_epoch() before next_plan()")
        elapsed = (self._last_batch_end - plan.started) * 1000
        batches = self._epoch_batches
        covered = len(plan.extensions) + (1 if plan.is_extension else 0)
        self._tell(MetricsMsg(
            rank=self.rank, epoch=plan.epoch, avg_loss=self._epoch_loss / batches if batches else 0.0,
            batches_processed=batches, epoch_ms=max(0.0, (time.monotonic() - plan.started) * 1000),
            samples_processed=plan.total if samples is None else samples, share_complete_ms=max(0.0, elapsed),
            compute_only_ms=self._compute_ms, data_starve_ms=self._data_ms,
            scalars={k: ScalarSum(sum=v[0], count=int(v[1])) for k, v in self._scalars.items()},
            extensions=covered))
        self._scalars = {}
        self._current = None
        self._pump(0.0)

    def request_eval(self) -> None:
        """Ask for an eval at the next epoch boundary (on the elected rank, not necessarily this one)."""
        self._tell(Intent(rank=self.rank, kind=IntentKind.EVAL_NOW))

    def request_checkpoint(self) -> None:
        self._tell(Intent(rank=self.rank, kind=IntentKind.CHECKPOINT_NOW))

    # -- what the coordinator said ----------------------------------------------------

    def aggregated_metrics(self) -> EpochMetrics | None:
        """The latest epoch aggregate."""
        return self._aggregated

    def poll_metrics(self) -> list[EpochMetrics]:
        """Epoch aggregates received since the last call; never blocks."""
        self._pump(0.0)
        out = list(self._metrics)
        self._metrics.clear()
        return out

    def poll_eval(self) -> list[tuple[int, float]]:
        """``(epoch, metric)`` of evals broadcast since the last call; never blocks."""
        self._pump(0.0)
        out = list(self._evals)
        self._evals.clear()
        return out

    def drain_pending_shutdown(self) -> SaveReason | None:
        """Serve what is queued; the save reason if the coordinator asked for a save-and-shutdown."""
        try:
            self._pump(0.0)
        except Exception:  # teardown after an error: the queued message matters more
            self.log.exception("control pump failed while draining")
        if isinstance(self._shutdown, ShutdownWithSave):
            return self._shutdown.reason
        return None

    @property
    def shutting_down(self) -> bool:
        return self._shutdown is not None

    def compute_param_norm(self) -> float:
        """L2 norm of all parameters (``torch._foreach_norm``: one kernel per device, not per tensor)."""
        import torch

        params = [p.detach() for p in self.model.parameters()]
        if not params:
            return 0.0
        return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(params))))

    def abort_nccl(self) -> None:
        """Abort the communicator: a collective stuck on a dead peer returns (with an error) at once.

        Call it before :meth:`send_final_snapshot` when leaving on a shutdown:
        a pending all-reduce would otherwise hold the device copies behind it.
        """
        if self.comm is not None:
            self.comm.abort()

    def send_final_snapshot(self, *, prefix: str = "snapshot", timeout: float = 60.0) -> Any:
        """Send the model's exact weights through a tensor plane to ``{prefix}/r{rank}/consumer/0``.

        That consumer is a :class:`~._consumer.ModelConsumer` (or any
        :class:`~._consumer.WeightConsumer`) built with
        ``single_rank_plan(model, rank_prefix(prefix, rank))``, wherever the
        launcher wants the trained weights.  Returns the sync report; its
        ``consumer_digests[0]`` is the digest of what the consumer now holds.
        """
        from actorwire.actors.weights._plan import ModuleSource
        from actorwire.actors.weights._sender import WeightSender

        if self.model is None:
            raise WorkerError("send_final_snapshot() needs the model given to Worker(model=...)")
        name = _names.consumer(_names.rank_prefix(prefix, self.rank), 0)
        try:
            self.system.wait_for(name, timeout)
        except TimeoutError:
            raise WorkerError(f"no snapshot consumer named {name!r} within {timeout:g} s") from None
        if self._snapshot is None:
            self._snapshot = WeightSender(self.system, ModuleSource(self.model), consumer_ids=[0],
                                          prefix=_names.rank_prefix(prefix, self.rank), stall_timeout=timeout)
        return self._snapshot.send_weights()

    def write_bundle(self, stem: str, optimizer: Any = None) -> list[str]:
        """Save for ``ShutdownWithSave``: the primary rank writes the model, every rank its optimizer."""
        import torch

        primary = (self.epoch_role if self.epoch_role is not None else 0) == self.rank
        written = []
        path = pathlib.Path(stem)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if primary and self.model is not None:
                torch.save(self.model.state_dict(), f"{stem}.pt")
                written.append(f"{stem}.pt")
            if optimizer is not None:
                name = f"{stem}.optim.pt" if primary else f"{stem}.optim.r{self.rank}.pt"
                torch.save(optimizer.state_dict(), name)
                written.append(name)
        except Exception:  # never block the exit on a failed save
            self.log.exception("could not write the checkpoint bundle", stem=stem)
        return written

    # -- leaving ---------------------------------------------------------------------

    def report_exiting(self) -> None:
        """Say this rank is leaving cleanly.  Only on success: an error path must not call it."""
        if not self._exiting_sent:
            self._exiting_sent = True
            try:
                self.inbox.tell(self.coordinator, Exiting(rank=self.rank), timeout=5)
            except Exception:
                self.log.warning("coordinator gone; Exiting not delivered")

    def finish(self) -> None:
        """Leave cleanly: send ``Exiting`` and close."""
        self.report_exiting()
        self._finished = True
        self.close()

    def close(self) -> None:
        self._beating.set()
        if self.comm is not None:
            self.comm.abort()
        self.system.shutdown()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._finished:
            return
        self._beating.set()
        record = self._write_death_record(exc)
        self.log.error("worker left without finish(); no Exiting sent", death_record=record)
        if self.comm is not None:
            self.comm.abort()
        self.system.shutdown(timeout=0.5, clean=False)  # peers must see a death, not an exit
        if exc_type is None:
            raise SystemExit(1)

    def _write_death_record(self, exc: Any) -> str:
        path = pathlib.Path(self.death_dir) / f"actorwire-{self.system.run_id}-rank{self.rank}.death.json"
        try:
            path.write_text(json.dumps({"rank": self.rank, "run_id": self.system.run_id, "steps": self._steps,
                                        "error": repr(exc) if exc is not None else "left without finish()",
                                        "wall_time": time.time()}, indent=2))
        except OSError:
            return ""
        return str(path)

    # -- control -----------------------------------------------------------------------

    def _pump(self, wait: float) -> None:
        """Serve every control message waiting (waiting up to ``wait`` s for the first one)."""
        first = self.inbox.get(timeout=wait) if wait > 0 else self.inbox.poll()
        item = first
        while item is not None:
            self._handle(item.message)
            item = self.inbox.poll()
        if time.monotonic() - self._coord_seen > self.coordinator_timeout and self._shutdown is None:
            self.log.error("coordinator silent; shutting down locally", silent_s=self.coordinator_timeout)
            self._shutdown = Shutdown()

    def _handle(self, msg: Message) -> None:
        self._coord_seen = time.monotonic()
        if isinstance(msg, StartEpoch):
            if self._plans:
                self.log.warning("a new epoch plan arrived before the previous one was consumed", epoch=msg.epoch)
            self._plans.append(Plan(msg.epoch, msg.partition_offset, msg.partition_size))
        elif isinstance(msg, ExtendPartition):
            current = self._current
            if current is not None and current.epoch == msg.epoch:
                current.extensions.append((msg.partition_offset, msg.partition_size))
            else:
                # This rank already reported the epoch: the slice is more work for that
                # epoch, served before the next epoch's plan and reported on its own.
                self._plans.appendleft(Plan(msg.epoch, msg.partition_offset, msg.partition_size,
                                            is_extension=True))
        elif isinstance(msg, SyncNow):
            if not self._exiting_sent:
                self._sync(msg)
        elif isinstance(msg, SetGlobalStep):
            self.global_step = msg.global_step
        elif isinstance(msg, SetEpochCallbackRole):
            self.epoch_role = msg.rank
        elif isinstance(msg, EpochAggregated):
            self._aggregated = msg.metrics
            self._metrics.append(msg.metrics)
        elif isinstance(msg, EvalBroadcast):
            self._evals.append((msg.epoch, msg.metric))
        elif isinstance(msg, ExecuteEval):
            self._run_eval(msg)
        elif isinstance(msg, Checkpoint):
            self._run_checkpoint(msg)
        elif isinstance(msg, RequestNewNcclId):
            if self.comm is not None:
                try:
                    uid = self.comm.new_unique_id()
                except CommError as exc:  # the coordinator tries the next rank after its rendezvous timeout
                    self.log.error("could not make the new process group's id", attempt=msg.attempt, error=str(exc))
                    return
                self._tell(NewNcclIdGenerated(rank=self.rank, uid=uid, attempt=msg.attempt))
        elif isinstance(msg, NewNcclSession):
            self._session_attempt = max(self._session_attempt, msg.attempt)
            if self.comm is not None:
                try:
                    self.comm.init(msg.uid, msg.new_rank, msg.new_world_size)
                except CommError as exc:
                    self.log.warning("could not join the new process group", attempt=msg.attempt, error=str(exc))
                    self._tell(SessionFailed(rank=self.rank, attempt=msg.attempt,
                                                                    reason=str(exc)[:500]))
        elif isinstance(msg, DeclareDead):
            if self.comm is not None:
                self.comm.abort()
        elif isinstance(msg, (Shutdown, ShutdownWithSave)):
            self._shutdown = msg
        elif isinstance(msg, Down) and msg.name == self.coordinator:
            self.log.error("coordinator is down; shutting down locally", reason=msg.reason.value)
            self._shutdown = self._shutdown or Shutdown()
        elif isinstance(msg, (CoordHeartbeat, Heartbeat)):
            pass

    def _run_eval(self, msg: ExecuteEval) -> None:
        self._tell(run_eval(self.rank, msg, self.eval_fn))

    def _run_checkpoint(self, msg: Checkpoint) -> None:
        self._tell(run_checkpoint(self.rank, msg, self.checkpoint_fn))

    def _sync(self, msg: SyncNow) -> None:
        """Work-weighted all-reduce: each rank weighs its parameters by its steps since the last sync."""
        if self.comm is not None and self.model is not None:
            try:
                self._weighted_average()
            except CommError as exc:
                # A peer died mid-reduce.  The reduce is abandoned, not retried: the
                # survivors may have left it at different points.  Once the group is
                # re-formed the coordinator starts a new cycle that every survivor joins.
                self.log.warning("all-reduce failed; asking for a new group", error=str(exc), cycle=msg.cycle)
                # Said at once, not after a wait: when no death explains the failure (a hung
                # peer, a collective error), only this report makes the coordinator re-form the
                # group, so a stuck collective costs the communicator's timeout, not minutes.
                # After a death the coordinator is re-forming already and takes this as said.
                self._tell(SessionFailed(rank=self.rank, attempt=self._session_attempt,
                                         reason=f"collective failed: {str(exc)[:300]}"))
                if not self._wait_for_session(time.monotonic() + _SESSION_WAIT_S) and self._shutdown is None:
                    self.log.error("no new process group in time", waited_s=_SESSION_WAIT_S)
                return
        self._steps_since_sync = 0
        self._tell(SyncAck(rank=self.rank, step_count=self._steps))

    def _weighted_average(self) -> None:
        weighted_average(self.comm, list(self.model.parameters()), self._steps_since_sync)  # type: ignore[arg-type]

    def _wait_for_session(self, deadline: float) -> bool:
        """Serve control until the process group is re-formed; False on timeout or shutdown."""
        deferred: list[Message] = []
        try:
            while time.monotonic() < deadline:
                item = self.inbox.get(timeout=0.2)
                if item is None:
                    continue
                msg = item.message
                if isinstance(msg, NewNcclSession):
                    self._handle(msg)
                    if self.comm is not None and self.comm.ready:
                        return True
                    continue  # joining failed and was reported: the coordinator sends another session
                if isinstance(msg, (Shutdown, ShutdownWithSave, RequestNewNcclId, DeclareDead, Down,
                                    ExtendPartition, CoordHeartbeat)):
                    self._handle(msg)
                    if self._shutdown is not None:
                        return False
                else:
                    deferred.append(msg)
            return False
        finally:
            for msg in deferred:
                self._handle(msg)


def _model_signature(model: Any) -> str:
    """Names, shapes and dtypes of the parameters, hashed: ranks with different models cannot join."""
    if model is None:
        return ""
    import hashlib

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
    return h.hexdigest()[:16]
