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

import functools
import hashlib
import json
import os
import pathlib
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from actorwire.actors import _names
from actorwire.actors.control import _rank, _rank_effects
from actorwire.actors.control._rank import Effect, Plan, RankProtocol, WorkerError
from actorwire.actors.control._rank_ops import carry_out
from actorwire.actors.control._rank_record import RecordedProtocol, recorded
from actorwire.messages.kinds import DeclareDead, EpochMetrics, IntentKind, SaveReason, ShutdownWithSave
from actorwire.transport import ActorDead, SystemClosed, UnknownActor
from actorwire.transport.comm import Communicator, GlooCommunicator
from actorwire.transport.internal import InvalidArgument, get_logger, settings

__all__ = ["Plan", "Worker", "WorkerError"]

_SESSION_WAIT_S = 60.0


class Worker:
    """See the module doc.  ``model`` (a torch module) is what ``SyncNow`` averages, and with it
    ``optimizer``'s state when one is given (every rank then leaves a sync with one momentum too).
    Its parameters are listed once, at the first sync, as DDP lists them when it wraps a model: a
    parameter added or replaced after that is not averaged (move the model between devices before
    or after, as you like: ``Module.to`` keeps the parameters).

    ``dataset_size``, the samples this rank's data holds, is checked at the join: data shorter than
    the run's dataset is refused there, naming both sizes, instead of training empty slices.

    ``relay`` names this host's :class:`~._relay.Relay`: ``Batch``, ``Heartbeat``, ``SyncAck`` and
    ``MetricsMsg`` go there, it tells the coordinator one report for all the host's ranks, and the
    coordinator tells this rank through it (docs/control-plane.md, "Relays").

    ``report_every``: at most one ``Batch`` report per this many seconds (default 5 ms); a report
    carries every batch trained since the last one, and what is held is reported before the rank
    waits for anything.

    The decisions are :class:`~._rank.RankProtocol`'s (the same machine the ``GpuWorker`` actor and
    the simulator run); this class carries out its effects from the training thread.
    """

    def __init__(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        system: Any = None,
        model: Any = None,
        optimizer: Any = None,
        communicator: Communicator | None = None,
        coordinator: str = "coordinator",
        model_signature: str | None = None,
        eval_fn: Callable[[int], float] | None = None,
        checkpoint_fn: Callable[[int], str | None] | None = None,
        restore_fn: Callable[[str, int], None] | None = None,
        epoch_fn: Callable[[int], None] | None = None,
        coordinator_timeout: float = 30.0,
        death_dir: str | None = None,
        join_timeout: float | None = None,
        heartbeat_interval: float = 1.0,
        dataset_size: int | None = None,
        relay: str = "",
        report_every: float = _rank.REPORT_EVERY_S,
    ) -> None:
        from actorwire.actors.runtime._launch import attach, launch_env

        if not (isinstance(report_every, (int, float)) and report_every >= 0):
            raise InvalidArgument(f"report_every must be a number of seconds >= 0, got {report_every!r}")
        self.system = system if system is not None else attach()
        found = launch_env()  # ours, torchrun's or SLURM's
        self.rank = rank if rank is not None else (found.rank if found.rank is not None else 0)
        self.world_size = world_size if world_size is not None else (found.world_size or 1)
        #: The launcher's local rank (which GPU of this host), when it said.
        self.local_rank = found.local_rank
        self.model = model
        self._params: list[Any] | None = None  # the model's parameters, listed at the first sync
        self._shuffle: Any = None  # the torch generator batches(shuffle_seed=...) seeds each epoch
        #: Its state (momentum, moments) is averaged with the model at each sync (``_rank_ops``).
        self.optimizer = optimizer
        self.comm = communicator
        if isinstance(communicator, GlooCommunicator) and communicator.towards is None:
            communicator.towards = self.system.endpoint  # peers reach this rank on the route to the root
        self.coordinator = coordinator
        self.eval_fn = eval_fn
        self.checkpoint_fn = checkpoint_fn
        self.epoch_fn = epoch_fn
        self.coordinator_timeout = coordinator_timeout
        self.dataset_size = dataset_size or 0
        # Recorded like an actor when the system records (actors/control/_rank_record.py).
        self.protocol: Any = recorded(RankProtocol(self.rank, self.world_size, coordinator=coordinator,
                                                   coordinator_timeout=coordinator_timeout,
                                                   regroup_wait=_SESSION_WAIT_S, relay=relay,
                                                   report_every=report_every),
                                      self.system, _names.worker(self.rank))
        self._snapshot: Any = None
        self.death_dir = death_dir or settings().death_dir or tempfile.gettempdir()
        self.log = get_logger(role="worker", rank=self.rank)
        self.name = _names.worker(self.rank)
        self.inbox = self.system.inbox(self.name)
        #: The training thread waits inside a collective (set around the all-reduce).
        self._in_collective = False
        if getattr(communicator, "abort_from_any_thread", False):
            self.inbox.on_arrival = self._abort_on_declare_dead
        self.system._retitle(self.name)  # ps shows `actorwire worker/<rank> (...)`
        self._finished = False
        # One default for the whole join (finding the root, then the coordinator, then its answer):
        # ACTORWIRE_JOIN_TIMEOUT (120 s), as attach() uses; it was 60 s here and 120 s there.
        join_timeout = settings().join_timeout if join_timeout is None else join_timeout
        self.system.wait_for(coordinator, timeout=join_timeout)
        signature = model_signature if model_signature is not None else _model_signature(model)
        request = self.protocol.join_request(run_id=self.system.run_id, model_signature=signature,
                                             host=socket.gethostname(), pid=os.getpid(),
                                             dataset_size=dataset_size or 0, evaluates=eval_fn is not None)
        reply = self.inbox.ask(coordinator, request, timeout=join_timeout)
        self.protocol.join_reply(reply, time.monotonic())  # a refusal raises WorkerError with the reason
        #: ``(path, epoch)`` of the checkpoint this rank loaded at its join (every rank had been lost
        #: and the launcher started them again), or None.
        self.resumed_from: tuple[str, int] | None = None
        resume = getattr(reply, "resume_from", None)
        if resume:
            epoch = reply.resume_epoch
            if restore_fn is None:
                raise WorkerError(f"rank {self.rank}: every rank was lost and the run resumes at epoch {epoch} from "
                                  f"checkpoint {resume}; this Worker has no restore_fn to load it (pass "
                                  f"Worker(restore_fn=...), the counterpart of checkpoint_fn)")
            restore_fn(resume, epoch)  # before the first plan: this rank trains from the checkpoint's model
            self.resumed_from = (resume, epoch)
            self.log.warning("resumed from the run's last checkpoint", path=resume, epoch=epoch)
        self.inbox.watch(coordinator)
        if relay:
            try:
                self.inbox.watch(relay)  # its Down: the rank reports to the coordinator itself
            except UnknownActor as exc:
                self._run(self.protocol.relay_gone(str(exc)))
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
            target = self.protocol.reports_to
            try:
                self._beat_box.tell(target, self.protocol.heartbeat(), timeout=interval)
            except Exception:  # the coordinator is gone or the system is closing: the loop will notice
                if target == self.coordinator:
                    return
                try:  # the relay is gone (the loop switches at its next report): straight to the coordinator
                    self._beat_box.tell(self.coordinator, self.protocol.heartbeat(), timeout=interval)
                except Exception:
                    return

    # -- what the protocol knows ---------------------------------------------------------

    @property
    def global_step(self) -> int:
        return self.protocol.global_step

    @property
    def epoch_role(self) -> int | None:
        return self.protocol.epoch_role

    @property
    def shutting_down(self) -> bool:
        return self.protocol.ended is not None

    # -- the loop ---------------------------------------------------------------

    @property
    def failure(self) -> str | None:
        """Why the run ended for this rank without it finishing (it was evicted, or the coordinator is
        gone), or None.  ``next_plan()`` raises :class:`WorkerError` with it."""
        return self.protocol.failure

    def next_plan(self, timeout: float | None = None) -> Plan | None:
        """The next epoch's plan, or None once the run is over.  Keeps serving control while it waits.

        Raises :class:`WorkerError` when the run ended for this rank without it finishing: it was
        evicted (counted dead after a stop, its share given to the others) or the coordinator is
        gone.  Its model is then not the run's result: do not save it as one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        p = self.protocol
        while not p.plans or not p.in_sync:
            if p.failure is not None:
                raise WorkerError(p.failure)
            if p.ended is not None:
                return None
            wait = 0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic()))
            self._pump(wait)
            if deadline is not None and time.monotonic() >= deadline and not (p.plans and p.in_sync):
                return None
        self._run(p.start_plan(time.monotonic()))
        return p.current

    def batches(self, plan: Plan, batch_size: int, *, shuffle_seed: int | None = None) -> Iterator[Any]:
        """Index ranges of ``batch_size`` over the plan, then over slices handed over meanwhile.

        With ``shuffle_seed``, each batch is instead a list of sample indices drawn from one
        permutation of the whole data set per epoch, made from ``(shuffle_seed, plan.epoch)``: the
        same on every rank (slices are offsets into the data set every rank holds in the same
        order), so the ranks' shares still cover every sample once, in a new order each epoch.
        It needs ``Worker(dataset_size=N)``.
        """
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be >= 1, got {batch_size}")
        order = None
        if shuffle_seed is not None:
            if not self.dataset_size:
                raise InvalidArgument("batches(shuffle_seed=...) needs Worker(dataset_size=N): the permutation is "
                                      "of the whole data set")
            if self.model is not None and self._shuffle is None:
                import torch

                self._shuffle = torch.Generator()
            order = epoch_order(self.dataset_size, shuffle_seed, plan.epoch, self.model is not None,
                                generator=self._shuffle)
        p = self.protocol
        while p.current is plan and p.ended is None:
            while p.throttled and p.ended is None:  # ran ahead of its peers: until the next sync
                self._pump(0.2)
            if p.current is not plan or p.ended is not None:
                return
            indices = p.take(batch_size)
            if indices is None:
                self._pump(0.0)  # a dead rank's remainder may have arrived
                indices = p.take(batch_size)
                if indices is None:
                    return
            yield indices if order is None else order[indices.start:indices.stop]

    def report_timing(self, batch_ms: float, batch_loss: float, *, data_ms: float = 0.0, lr: float | None = None,
                      param_norm: float | None = None) -> None:
        """One batch done: ``Batch`` (then ``LrUpdate``), then serve any control that arrived."""
        self._run(self.protocol.batch_done(time.monotonic(), batch_ms, batch_loss, data_ms=data_ms, lr=lr,
                                           param_norm=param_norm))
        if len(self.inbox):
            self._pump(0.0)

    def record_scalar(self, name: str, value: float) -> None:
        self.protocol.record_scalar(name, value)

    def report_epoch(self, plan: Plan | None = None, *, samples: int | None = None) -> None:
        """The plan is done: send ``MetricsMsg`` with this epoch's loss, timings and scalars."""
        self._run(self.protocol.report_epoch(time.monotonic(), samples=samples))
        self._pump(0.0)

    def request_eval(self) -> None:
        """Ask for an eval at the next epoch boundary (on the elected rank, not necessarily this one)."""
        self._run(self.protocol.intent(IntentKind.EVAL_NOW))

    def request_checkpoint(self) -> None:
        self._run(self.protocol.intent(IntentKind.CHECKPOINT_NOW))

    # -- what the coordinator said ----------------------------------------------------

    def aggregated_metrics(self) -> EpochMetrics | None:
        """The latest epoch aggregate: epoch, loss, epoch time and scalars (the per-rank lists go to the
        coordinator's metrics sink only)."""
        return self.protocol.latest

    def poll_metrics(self) -> list[EpochMetrics]:
        """Epoch aggregates received since the last call; never blocks."""
        self._pump(0.0)
        out = list(self.protocol.aggregated)
        self.protocol.aggregated.clear()
        return out

    def poll_eval(self) -> list[tuple[int, float]]:
        """``(epoch, metric)`` of evals broadcast since the last call; never blocks."""
        self._pump(0.0)
        out = list(self.protocol.evals)
        self.protocol.evals.clear()
        return out

    def drain_pending_shutdown(self) -> SaveReason | None:
        """Serve what is queued; the save reason if the coordinator asked for a save-and-shutdown."""
        try:
            self._pump(0.0)
        except Exception:  # teardown after an error: the queued message matters more
            self.log.exception("control pump failed while draining")
        ended = self.protocol.ended
        return ended.reason if isinstance(ended, ShutdownWithSave) else None

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
        for effect in self.protocol.exiting():
            try:
                self.inbox.tell(self.coordinator, effect.message, timeout=5)  # type: ignore[union-attr]
            except Exception:
                self.log.warning("coordinator gone; Exiting not delivered")

    def finish(self) -> None:
        """Leave cleanly: send ``Exiting`` and close.

        Raises :class:`WorkerError` instead when the run ended for this rank without it finishing
        (``failure``: evicted, or the coordinator gone), whatever the loop did before (a loop that
        leaves on ``shutting_down`` never calls ``next_plan()`` again): such a rank must not exit
        like one that finished, with its stale model as the result."""
        if self.protocol.failure is not None:
            raise WorkerError(self.protocol.failure)
        self.report_exiting()
        self._finished = True
        self.close()

    def close(self) -> None:
        self._beating.set()
        if self.comm is not None:
            self.comm.abort()
        if isinstance(self.protocol, RecordedProtocol):
            self.protocol.close()
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
        if isinstance(self.protocol, RecordedProtocol):
            self.protocol.close()  # what it did up to the error stays readable
        self.system.shutdown(timeout=0.5, clean=False)  # peers must see a death, not an exit
        if exc_type is None:
            raise SystemExit(1)

    def _write_death_record(self, exc: Any) -> str:
        path = pathlib.Path(self.death_dir) / f"actorwire-{self.system.run_id}-rank{self.rank}.death.json"
        try:
            path.write_text(json.dumps({"rank": self.rank, "run_id": self.system.run_id, "steps": self.protocol.steps,
                                        "error": repr(exc) if exc is not None else "left without finish()",
                                        "wall_time": time.time()}, indent=2))
        except OSError:
            return ""
        return str(path)

    # -- control: carrying out the protocol's effects ---------------------------------------

    def _pump(self, wait: float) -> None:
        """Serve every control message waiting (waiting up to ``wait`` s for the first one); while
        the protocol waits for a new group after a failed all-reduce, keep serving until it is in."""
        p = self.protocol
        if wait > 0:
            self._run(p.report_held(time.monotonic()))  # held batch reports: the coordinator counts them while it waits
        first = self.inbox.get(timeout=wait) if wait > 0 else self.inbox.poll()
        self._serve(first)
        while p.regrouping:  # the training thread waits here, as it would inside the collective
            self._serve(self.inbox.get(timeout=0.2))
            self._run(p.tick(time.monotonic()))
        self._run(p.tick(time.monotonic()))

    def _serve(self, first: Any) -> None:
        """Serve ``first`` and all that is queued behind it, but for what a newer group supersedes
        (``_rank_effects.current``); what comes while the effects run (a formation blocks) is served next."""
        while first is not None:
            items = [first]
            while (item := self.inbox.poll()) is not None:
                items.append(item)
            items = [item for item in items if self._told(item.envelope.sender, item.message)]
            for item in _rank_effects.current(items, lambda item: item.message):
                self._run(self._receive(item), item.received_at)
            first = self.inbox.poll()

    def _receive(self, item: Any) -> list[Effect]:
        if isinstance(self.protocol, RecordedProtocol):
            return self.protocol.receive(item.message, time.monotonic(), envelope=item.envelope)  # type: ignore[no-any-return]
        return self.protocol.receive(item.message, time.monotonic())  # type: ignore[no-any-return]

    def _parameters(self) -> list[Any]:
        """The model's parameters, listed at the first sync (listing them cost 23-27 us of the
        training thread's CPU a sync in ``bench train``, 5% of its time in actorwire calls)."""
        if self._params is None:
            self._params = list(self.model.parameters()) if self.model is not None else []
        return self._params

    def _told(self, sender: str, message: Any) -> bool:
        """Whether ``message`` may be served (``RankProtocol.refusal``); anything else is ignored."""
        refusal = self.protocol.refusal(sender, message)
        if refusal is None:
            return True
        self._run(refusal)
        return False

    @property
    def refused(self) -> dict[str, int]:
        """Messages ignored because someone other than the coordinator or this rank's relay sent them, by sender."""
        return self.protocol.refused  # type: ignore[no-any-return]

    def _abort_on_declare_dead(self, envelope: Any, message: Any) -> None:
        """In the I/O thread, as a message arrives: a ``DeclareDead`` while the training thread waits
        in a collective aborts the communicator now, so the collective returns with an error instead
        of at its own timeout (the training thread would serve the ``DeclareDead`` only after it).
        Only for a communicator whose ``abort()`` is safe from another thread (NCCL's), and only for
        the coordinator's (the training thread logs anyone else's when it serves it)."""
        if (isinstance(message, DeclareDead) and self._in_collective and self.comm is not None
                and self.protocol.speaks(envelope.sender)):
            self.log.warning("a peer was declared dead during a collective: aborting it", dead=message.rank)
            try:
                self.comm.abort()
            except Exception:  # never into the I/O thread; the collective then ends at its timeout
                self.log.exception("could not abort the communicator")

    def _run(self, effects: list[Effect], received_at: float | None = None) -> None:
        """Carry out ``effects``; ``received_at``: when the message they answer came in."""
        p = self.protocol
        for effect in effects:
            now = time.monotonic
            self._in_collective = isinstance(effect, _rank.AllReduce)
            try:
                more = carry_out(effect, p, self.comm, parameters=self._parameters, evaluate=self.eval_fn,
                                 checkpoint=self.checkpoint_fn, now=now, optimizer=self.optimizer,
                                 received_at=received_at)
            finally:
                self._in_collective = False
            if more is not None:
                self._run(more)
            elif isinstance(effect, _rank.Send):
                target = effect.to or self.coordinator
                try:
                    self.inbox.tell(target, effect.message)
                except (ActorDead, UnknownActor) as exc:
                    self._run(p.send_failed(effect.to, effect.message, str(exc)))
                except SystemClosed as exc:
                    self._run(p.coordinator_gone(str(exc)))
                else:
                    if isinstance(p, RecordedProtocol):
                        p.sent(effect, target, self.system._node.last_seq(self.name))
            elif isinstance(effect, _rank.RunEpochFn):
                if self.epoch_fn is not None:
                    t0 = now()
                    self.epoch_fn(effect.epoch)
                    self._run(p.epoch_fn_done(effect.epoch, (now() - t0) * 1000))
            elif isinstance(effect, _rank.Log):
                getattr(self.log, effect.level)(effect.event, **effect.fields)
            elif isinstance(effect, _rank.Ended):
                pass  # shutting_down is true now; the user's loop ends at its next next_plan()


@functools.lru_cache(maxsize=2)
def epoch_order(size: int, seed: int, epoch: int, with_torch: bool = False, *, generator: Any = None) -> list[int]:
    """The order of the data set's ``size`` samples in ``epoch``: one permutation per (seed, epoch),
    the same in every process.  ``with_torch`` (the Worker has a model: every rank of the run has
    the same one, the join's signature says so, so every rank takes the same path): torch's CPU
    generator, seeded from the pair (0.03 ms for 1,400 samples); else Python's own (0.31 ms: in
    ``bench train`` a fifth of the trainer thread's time in actorwire calls).  ``generator``: a
    torch generator of the caller's to seed (one thread's: it is seeded anew, so the order is the
    same), instead of a new one each epoch (96 -> 79 us after a training step, caches cold)."""
    key = f"actorwire-shuffle:{seed}:{epoch}"
    if with_torch:
        import torch

        seed64 = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") & (2**63 - 1)
        made = (generator if generator is not None else torch.Generator()).manual_seed(seed64)
        return torch.randperm(size, generator=made).tolist()  # type: ignore[no-any-return]
    order = list(range(size))
    random.Random(key).shuffle(order)
    return order


def _model_signature(model: Any) -> str:
    """Names, shapes and dtypes of the parameters, hashed: ranks with different models cannot join."""
    if model is None:
        return ""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
    return h.hexdigest()[:16]
