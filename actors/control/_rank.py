"""The rank side of the coordinator protocol, sans-IO: one state machine that every rank runs.

:class:`RankProtocol` holds what a data-parallel rank knows (its plans, its
steps since the last sync, the group attempt it is in, whether the run is
over) and decides what to do about each input.  It does no I/O and reads no
clock: every input carries ``now``, every decision comes back as a list of
effects for the driver to carry out, and the result of any effect that takes
time (an all-reduce, forming a group, an eval, a checkpoint) comes back as one
more input.  Three drivers run it:

* :class:`~actorwire.actors.control._worker.Worker`, from the user's training loop;
* :class:`~actorwire.actors.control._gpu_worker.GpuWorker`, as an actor, one batch per handler;
* the deterministic simulator (``_simulate.py``), on a virtual clock with simulated groups.

So the simulator's thousands of seeded runs exercise the same decisions the
real ranks make.  Inputs and their effects:

=========================  ==================================================================
input                      effects
=========================  ==================================================================
``receive(StartEpoch)``     the plan is queued; ``start_plan()`` hands it to the loop
``receive(SyncNow)``        :class:`AllReduce` weighed by :func:`reduce_weight` (0 until the rank
                            holds the run's model), whose result is ``sync_done()``:
                            :class:`Send` ``SyncAck``, or ``SessionFailed`` and *regrouping*
``receive(Throttle)``       nothing; the rank takes no batch (``can_train`` is false) until its next
                            sync completes: it ran ahead of its peers (``SyncCadence.lead_bound``)
``receive(NewNcclSession)`` :class:`FormGroup`; ``group_formed()``: nothing, or ``SessionFailed``
                            (also without trying, when the session waited in the inbox past
                            half the formation timeout: :func:`late_for_group`)
``receive(RequestNewNcclId)`` :class:`MakeGroupId`; ``group_id_made()``: ``NewNcclIdGenerated``
``receive(ExecuteEval)``    :class:`Evaluate`; ``evaluated()`` sends the result
``receive(Checkpoint)``     :class:`SaveCheckpoint`; ``checkpointed()`` sends the result
``receive(DeclareDead)``    :class:`AbortGroup`
``receive(Shutdown...)``    :class:`Ended`
``receive(Evicted)``        :class:`Ended` with ``failed`` (``failure`` says why: the rank is out)
``receive(Down)``           :class:`Ended` with ``failed`` when the coordinator is down; the relay's:
                            reports go to the coordinator itself (``relay_gone``)
``tick()``                  a :class:`Log` warning after ``coordinator_timeout`` of silence
                            (again at each doubling: a busy coordinator is not a dead one;
                            its death is the runtime's ``Down``); the end of a regrouping
                            that waited ``regroup_wait``
=========================  ==================================================================

While *regrouping* (an all-reduce failed; the rank waits for the new group),
only what forms or ends a group is served; the rest (plans, syncs, evals) is
kept, in order, and served once the group is formed or the wait ends.
"""

from __future__ import annotations

import collections
import dataclasses
import math

from actorwire.actors.control._rank_effects import (
    AbortGroup,
    AllReduce,
    Effect,
    Ended,
    Evaluate,
    FormGroup,
    Log,
    MakeGroupId,
    Plan,
    RunEpochFn,
    SaveCheckpoint,
    Send,
    reduce_weight,
)
from actorwire.messages import ActorwireError, Message, UsageError
from actorwire.messages.kinds import (
    Batch,
    Checkpoint,
    CheckpointResult,
    CoordHeartbeat,
    DeclareDead,
    Down,
    EpochAggregated,
    EpochFnElapsed,
    EpochMetrics,
    EvalBroadcast,
    EvalResult,
    ExecuteEval,
    Exiting,
    ExtendPartition,
    Heartbeat,
    Intent,
    IntentKind,
    JoinAccepted,
    JoinRejected,
    JoinRequest,
    LrUpdate,
    MetricsMsg,
    NewNcclIdGenerated,
    NewNcclSession,
    RequestNewNcclId,
    ScalarSum,
    SessionFailed,
    SetEpochCallbackRole,
    SetGlobalStep,
    Shutdown,
    ShutdownWithSave,
    StartEpoch,
    SyncAck,
    SyncNow,
    Throttle,
)
from actorwire.messages.kinds._control import Evicted


class WorkerError(ActorwireError, RuntimeError):
    """The coordinator refused this worker, or went away, or the rank's training broke."""


# Served while regrouping: what forms, breaks or ends a group, and what only updates state. Plans
# and slices are kept with the rest, in order: a dead rank's slice served ahead of a kept
# StartEpoch would become a plan of its own, reported as the whole epoch.
_SERVED_WHILE_REGROUPING = (NewNcclSession, RequestNewNcclId, DeclareDead, Shutdown, ShutdownWithSave, Evicted, Down,
                            CoordHeartbeat, Heartbeat, SetGlobalStep, EvalBroadcast)


#: At most one ``Batch`` per this many seconds from a rank, and at most ``REPORT_HELD_MAX - 1``
#: batches held.  A report per batch cost the training thread a wake-up of its I/O thread per step
#: (``bench train``: report_timing, about half of the control plane's share of a step); the
#: coordinator counts batches by the step count a report carries, so a report for several batches
#: counts them all, as a relay's folded report does.  The count bound keeps the coordinator's
#: throttle on time whatever a step costs (decision 0020: 50 ms alone let a rank run 3.3 lead bounds
#: past its last sync in the simulator).
REPORT_EVERY_S = 0.005
REPORT_HELD_MAX = 4


@dataclasses.dataclass
class _HeldBatches:
    """The batches trained since the last ``Batch`` report: their sums and the latest parameter norm."""

    batches: int = 0
    batch_ms: float = 0.0
    data_ms: float = 0.0
    loss: float = 0.0
    param_norm: float | None = None

    def add(self, batch_ms: float, data_ms: float, loss: float, param_norm: float | None) -> None:
        self.batches += 1
        self.batch_ms += batch_ms
        self.data_ms += data_ms
        self.loss += loss
        if param_norm is not None:
            self.param_norm = param_norm


class RankProtocol:
    """The worker side of the coordinator protocol for rank ``rank``; see the module doc."""

    def __init__(self, rank: int, world_size: int, *, coordinator: str = "coordinator",
                 coordinator_timeout: float = 30.0, regroup_wait: float = 60.0, relay: str = "",
                 report_every: float = REPORT_EVERY_S) -> None:
        self.rank = rank
        self.world_size = world_size
        self.coordinator = coordinator
        #: Where ``Batch``, ``Heartbeat``, ``SyncAck`` and ``MetricsMsg`` go: a per-host relay
        #: (``actors/control/_relay.py``), or "" for the coordinator itself.  The join names it, so the
        #: coordinator takes its reports, and tells this rank through it (``Fanout``).
        self.relay = relay
        #: Who may tell this rank what the coordinator says: the coordinator, and the relay named at
        #: the join (the coordinator tells the rank through it; kept after it died, when nothing more
        #: comes from it).  See :meth:`speaks`.
        self.told_by = {coordinator, relay} - {""}
        #: Messages refused because someone else sent them (:meth:`refusal`), by sender.
        self.refused: dict[str, int] = {}
        self.coordinator_timeout = coordinator_timeout
        self.regroup_wait = regroup_wait
        self.joined = False
        self.plans: collections.deque[Plan] = collections.deque()
        self.current: Plan | None = None
        self.steps = 0
        self.steps_since_sync = 0
        #: It took part in a completed sync: it holds the run's model and may train.
        self.in_sync = False
        #: Told ``Throttle``: it trains no more until its next sync completes.
        self.throttled = False
        #: The coordinator named it the source of the run's initial model (``SyncNow.source``).
        self.model_source = False
        self.global_step = 0
        self.epoch_role: int | None = None
        self.session_attempt = 0
        self.aggregated: collections.deque[EpochMetrics] = collections.deque()
        self.latest: EpochMetrics | None = None
        self.evals: collections.deque[tuple[int, float]] = collections.deque()
        self.ended: Shutdown | ShutdownWithSave | None = None
        #: Why the run ended for this rank without it finishing (evicted; the coordinator gone):
        #: the Worker's ``next_plan()`` raises it, and the rank exits non-zero.
        self.failure: str | None = None
        self.exiting_sent = False
        self.coord_seen = 0.0
        #: The silence warning repeats at ``coordinator_timeout`` times this (doubling).
        self._silence_warned = 1
        #: Waiting for a new group after a failed all-reduce, until this time (None: not waiting).
        self.regroup_until: float | None = None
        self._deferred: list[Message] = []
        self._last_lr: float | None = None
        #: ``Batch`` reports are folded: at most one per ``report_every`` s, carrying the batches
        #: trained since the last one (their mean times and loss, the step count reached).
        self.report_every = report_every
        self._reported_at = -math.inf
        self._held = _HeldBatches()
        self._scalars: dict[str, list[float]] = {}
        self._batches = 0
        self._loss = 0.0
        self._compute_ms = 0.0
        self._data_ms = 0.0
        self._last_batch_end = 0.0
        # What a relay that dies may have lost, sent again to the coordinator itself
        # (``relay_gone``), and what the coordinator may tell again once its relay died (what was
        # taken once is not taken twice):
        self._answered_cycle = 0      # the last SyncNow.cycle answered with an AllReduce
        self._last_epoch = -1         # the last epoch a StartEpoch planned
        self._slices_taken: set[tuple[int, int, int]] = set()  # ExtendPartition (epoch, offset, size)
        self._aggregated_epoch = -1   # the last EpochAggregated taken
        self._metrics_seq = 0
        self._unconfirmed: list[MetricsMsg] = []  # sent through the relay, epoch not aggregated yet
        self._last_ack: SyncAck | None = None     # sent through the relay, cycle not closed yet

    # -- state the drivers read ---------------------------------------------------------------

    @property
    def regrouping(self) -> bool:
        return self.regroup_until is not None

    @property
    def can_train(self) -> bool:
        """Whether the loop may take a batch now: the run not over, not waiting for a group,
        holding the run's model (it took part in a completed sync), and not throttled."""
        return self.ended is None and not self.regrouping and self.in_sync and not self.throttled

    # -- joining ------------------------------------------------------------------------------

    def join_request(self, *, run_id: str, model_signature: str, host: str = "", pid: int = 0,
                     dataset_size: int = 0, evaluates: bool = True) -> JoinRequest:
        return JoinRequest(rank=self.rank, world_size=self.world_size, run_id=run_id,
                           model_signature=model_signature, host=host, pid=pid, dataset_size=dataset_size,
                           relay=self.relay, evaluates=evaluates)

    @property
    def reports_to(self) -> str:
        """The actor a ``Batch`` or a ``Heartbeat`` is told to."""
        return self.relay or self.coordinator

    def join_reply(self, reply: Message, now: float) -> list[Effect]:
        """The coordinator's answer to the join; a refusal raises :class:`WorkerError` naming the reason."""
        if isinstance(reply, JoinRejected):
            raise WorkerError(f"the coordinator refused rank {self.rank}: {reply.reason}")
        if not isinstance(reply, JoinAccepted):
            raise WorkerError(f"rank {self.rank}: the coordinator answered the join with {type(reply).__name__}")
        self.joined = True
        self.coord_seen = now
        return []

    # -- what the coordinator says --------------------------------------------------------------

    def speaks(self, sender: str | None) -> bool:
        """Whether a message signed ``sender`` is the coordinator's word to this rank.  The drivers
        hand :meth:`receive` only those (and the runtime's ``Down``, which no peer can send): any
        proven peer could tell a rank ``Evicted``, ``Shutdown``, ``DeclareDead`` or a plan, and it
        was believed."""
        return sender in self.told_by

    def refusal(self, sender: str | None, msg: Message) -> list[Effect] | None:
        """None when ``msg`` may be handed to :meth:`receive`: the coordinator's word
        (:meth:`speaks`) or the runtime's ``Down``.  Anything else is counted by sender and
        ignored; the effects returned log the first from each sender."""
        if isinstance(msg, Down) or sender in self.told_by:
            return None
        who = sender or "?"
        count = self.refused[who] = self.refused.get(who, 0) + 1
        if count > 1:
            return []
        return [Log("warning", "a message only the coordinator may send came from someone else; ignored (further "
                    "ones are counted)", {"sender": who, "kind": type(msg).wire_tag(), "coordinator": self.coordinator})]

    def receive(self, msg: Message, now: float) -> list[Effect]:
        """A message from the coordinator (or the runtime's ``Down`` of a watched actor)."""
        if isinstance(msg, Down):
            if self.relay and msg.name == self.relay:
                return self.relay_gone(f"down ({msg.reason.value})")
            if msg.name != self.coordinator:
                return []
            return self._end(Shutdown(), f"coordinator is down ({msg.reason.value})", gone=True)
        self.coord_seen = now
        self._silence_warned = 1
        if self.ended is not None:
            return []  # the run is over here: nothing more is done for it
        if self.regrouping and not isinstance(msg, _SERVED_WHILE_REGROUPING):
            self._deferred.append(msg)
            return []
        if isinstance(msg, StartEpoch):
            if msg.epoch <= self._last_epoch:
                return []  # told again after this rank's relay died: planned once
            self._last_epoch = msg.epoch
            effects: list[Effect] = []
            if self.plans:
                effects.append(Log("warning", "a new epoch plan arrived before the previous one was consumed",
                                   {"epoch": msg.epoch}))
            self.plans.append(Plan(msg.epoch, msg.partition_offset, msg.partition_size))
            return effects
        if isinstance(msg, ExtendPartition):
            key = (msg.epoch, msg.partition_offset, msg.partition_size)
            if key in self._slices_taken:
                return []  # told again after this rank's relay died
            self._slices_taken.add(key)
            # The plan of that epoch takes the slice, whether it is being trained or still queued (a
            # queued plan skipped here was trained after the slice and reported twice; simulator).
            owner = next((plan for plan in (self.current, *self.plans)
                          if plan is not None and plan.epoch == msg.epoch), None)
            if owner is not None:
                owner.extensions.append((msg.partition_offset, msg.partition_size))
            else:
                # This rank already reported the epoch: the slice is more work for that epoch,
                # served before the next epoch's plan and reported on its own.
                self.plans.appendleft(Plan(msg.epoch, msg.partition_offset, msg.partition_size, is_extension=True))
            return []
        if isinstance(msg, SyncNow):
            if self.exiting_sent or (msg.cycle and msg.cycle <= self._answered_cycle):
                return []  # (a cycle told again after this rank's relay died is answered once)
            self._answered_cycle = max(self._answered_cycle, msg.cycle)
            if msg.source == self.rank:
                self.model_source = True
            holds = self.in_sync or self.model_source
            return [AllReduce(msg.cycle, self.steps_since_sync, reduce_weight(self.steps_since_sync, holds))]
        if isinstance(msg, Throttle):
            # Sent only while the sync that ends it is still to come (``SyncCadence.ahead``).
            if self.in_sync and not self.exiting_sent:
                self.throttled = True
            return []
        if isinstance(msg, SetGlobalStep):
            self.global_step = msg.global_step
            self._last_ack = None  # the cycle closed: its acks were in
        elif isinstance(msg, SetEpochCallbackRole):
            self.epoch_role = msg.rank
        elif isinstance(msg, EpochAggregated):
            if msg.metrics.epoch <= self._aggregated_epoch:
                return []  # told again after this rank's relay died
            self._aggregated_epoch = msg.metrics.epoch
            self._unconfirmed = [u for u in self._unconfirmed if u.epoch > msg.metrics.epoch]
            self.aggregated.append(msg.metrics)
            self.latest = msg.metrics
        elif isinstance(msg, EvalBroadcast):
            self.evals.append((msg.epoch, msg.metric))
        elif isinstance(msg, ExecuteEval):
            return [Evaluate(msg)]
        elif isinstance(msg, Checkpoint):
            return [SaveCheckpoint(msg)]
        elif isinstance(msg, RequestNewNcclId):
            return [MakeGroupId(msg.attempt)]
        elif isinstance(msg, NewNcclSession):
            self.session_attempt = max(self.session_attempt, msg.attempt)
            return [FormGroup(msg)]
        elif isinstance(msg, DeclareDead):
            return [AbortGroup()]
        elif isinstance(msg, (Shutdown, ShutdownWithSave)):
            why = "the run ended" if isinstance(msg, Shutdown) else f"the coordinator ended the run ({msg.reason.value})"
            return self._end(msg, why)
        elif isinstance(msg, Evicted):
            return self._end(Shutdown(), f"evicted from the run: {msg.detail or 'counted dead'}", failed=True)
        return []

    def tick(self, now: float) -> list[Effect]:
        """Time passed: a silent coordinator ends the run here; a regrouping that waited too long ends."""
        if self.ended is not None or not self.joined:
            return []
        effects: list[Effect] = []
        if self._held.batches and now - self._reported_at >= self.report_every:
            effects.append(self._report(now))
        silence = now - self.coord_seen
        if silence > self.coordinator_timeout * self._silence_warned:
            # Load is not death: a saturated coordinator stops sending CoordHeartbeat long before
            # libzmq's heartbeats (run outside the GIL) would say its process is gone.
            self._silence_warned *= 2
            effects.append(Log("warning", "the coordinator has been silent; waiting for the runtime to report it down",
                               {"silent_s": round(silence, 1), "warn_after_s": self.coordinator_timeout}))
            return effects
        if self.regroup_until is not None and now >= self.regroup_until:
            effects.append(Log("error", "no new process group in time", {"waited_s": self.regroup_wait}))
            return effects + self._stop_regrouping(now)
        return effects

    def _end(self, message: Shutdown | ShutdownWithSave, why: str, gone: bool = False,
             failed: bool = False) -> list[Effect]:
        if self.ended is not None:
            return []
        self.ended = message
        self.regroup_until = None
        self._deferred = []  # plans and syncs for a run that is over
        failed = failed or gone
        if failed:
            self.failure = f"rank {self.rank}: {why}; its model is not the run's result"
        level = "error" if failed else "warning" if isinstance(message, ShutdownWithSave) else "info"
        return [Log(level, why), Ended(message, why, gone, failed)]

    def relay_gone(self, error: str) -> list[Effect]:
        """This host's relay is gone (a tell to it failed, or its ``Down``): ``Batch`` and ``Heartbeat``
        go to the coordinator itself from now on, which takes them from the rank as from any rank
        without a relay.  What the relay held and had not reported is not counted; the rank's own
        step count (in its ``SyncAck``) is what the sync accounting uses."""
        if not self.relay:
            return []
        relay, self.relay = self.relay, ""
        # The sync's ack and the epochs' reports the relay may have held go again; the coordinator
        # counts each once (by cycle, and by ``MetricsMsg.seq``).
        again: list[Effect] = [Send(self._last_ack)] if self._last_ack is not None else []
        again += [Send(u) for u in self._unconfirmed]
        return [Log("warning", "the relay is gone; reporting to the coordinator directly", {"relay": relay,
                                                                                           "error": error}),
                *again]

    def send_failed(self, to: str, message: Message, error: str) -> list[Effect]:
        """A :class:`Send` to ``to`` ("" : the coordinator) failed, its target gone: the coordinator's
        loss ends the run for this rank; the relay's sends ``message``, and the rest, to the
        coordinator itself (``relay_gone``)."""
        if not to or to == self.coordinator:
            return self.coordinator_gone(error)
        effects = self.relay_gone(error)
        if not any(isinstance(e, Send) and e.message is message for e in effects):
            effects.append(Send(message))
        return effects

    def coordinator_gone(self, error: str) -> list[Effect]:
        """A tell to the coordinator failed: it is gone, and the run is over for this rank."""
        return self._end(Shutdown(), f"coordinator is gone ({error})", gone=True)

    # -- the results of effects --------------------------------------------------------------------

    def sync_done(self, cycle: int, error: str | None, now: float, covered: int | None = None) -> list[Effect]:
        """The all-reduce of ``cycle`` returned (``error``: it failed; a peer died or hung); ``covered``: the
        steps it averaged, summed over the members."""
        if error is None:
            self.steps_since_sync = 0
            self.in_sync = True
            self.throttled = False
            ack = SyncAck(rank=self.rank, step_count=self.steps, covered=covered, cycle=cycle)
            if self.relay:
                self._last_ack = ack
            return [Send(ack, to=self.relay)]
        # Abandoned, not retried: the survivors may have left it at different points. Said at once:
        # when no death explains the failure (a hung peer) only this report makes the coordinator
        # form the group again. Until the new group is in, the rank serves only what forms it.
        self.regroup_until = now + self.regroup_wait
        return [Log("warning", "all-reduce failed; asking for a new group", {"cycle": cycle, "error": error}),
                Send(SessionFailed(rank=self.rank, attempt=self.session_attempt,
                                   reason=f"collective failed: {error[:300]}"))]

    def group_formed(self, attempt: int, error: str | None, now: float) -> list[Effect]:
        """Joining the group of ``attempt`` finished (``error``: it failed, and the rank says so)."""
        if error is not None:
            return [Log("warning", "could not join the new process group", {"attempt": attempt, "error": error}),
                    Send(SessionFailed(rank=self.rank, attempt=attempt, reason=error[:500]))]
        return self._stop_regrouping(now, formed=True) if self.regrouping else []

    def group_id_made(self, attempt: int, uid: bytes | None, error: str | None) -> list[Effect]:
        if uid is None:  # the coordinator asks the next rank after its rendezvous timeout
            return [Log("error", "could not make the new process group's id", {"attempt": attempt, "error": error})]
        return [Send(NewNcclIdGenerated(rank=self.rank, uid=uid, attempt=attempt))]

    def evaluated(self, result: EvalResult) -> list[Effect]:
        return [Send(result)]

    def checkpointed(self, result: CheckpointResult) -> list[Effect]:
        return [Send(result)]

    def epoch_fn_done(self, epoch: int, elapsed_ms: float) -> list[Effect]:
        return [Send(EpochFnElapsed(rank=self.rank, epoch=epoch, elapsed_ms=elapsed_ms))]

    def _stop_regrouping(self, now: float, formed: bool = False) -> list[Effect]:
        self.regroup_until = None
        deferred, self._deferred = self._deferred, []
        # A SyncNow kept while regrouping came before the session just formed: it was for a group
        # that is gone, and the coordinator asks again on the new one (after a formation every
        # member must run the same collectives: a rank that ran a kept SyncNow while another had
        # not kept it would leave the two a reduce apart).  Without a new
        # group, only the last one is still asked for.
        syncs = [i for i, msg in enumerate(deferred) if isinstance(msg, SyncNow)]
        keep = -1 if formed or not syncs else syncs[-1]
        deferred = [msg for i, msg in enumerate(deferred) if not isinstance(msg, SyncNow) or i == keep]
        effects: list[Effect] = []
        for msg in deferred:
            effects.extend(self.receive(msg, now))
        return effects

    # -- the training loop ---------------------------------------------------------------------------

    def start_plan(self, now: float) -> list[Effect]:
        """Make the next queued plan ``current`` (none once the run is over)."""
        if self.ended is not None or not self.plans:
            return []
        plan = self.plans.popleft()
        plan.started = now
        plan._slice, plan._next = 0, plan.offset
        self.current = plan
        self._batches = 0
        self._loss = self._compute_ms = self._data_ms = 0.0
        self._last_batch_end = now
        return [RunEpochFn(plan.epoch)] if self.epoch_role == self.rank else []

    def take(self, batch_size: int) -> range | None:
        """The next ``batch_size`` indices of the current plan (its slice, then the slices handed
        over so far); None once they are all taken."""
        plan = self.current
        if plan is None:
            return None
        slices = plan.slices()
        while plan._slice < len(slices):
            start, size = slices[plan._slice]
            if plan._next < start + size:
                first = plan._next
                plan._next = min(first + batch_size, start + size)
                return range(first, plan._next)
            plan._slice += 1  # a handed-over slice may lie anywhere, before this one too
            if plan._slice < len(slices):
                plan._next = slices[plan._slice][0]
        return None

    @property
    def exhausted(self) -> bool:
        """Every index of the current plan, handed-over slices included, has been taken."""
        plan = self.current
        if plan is None:
            return True
        cursor = plan._slice, plan._next
        left = self.take(1)
        plan._slice, plan._next = cursor
        return left is None

    def batch_done(self, now: float, batch_ms: float, loss: float, *, data_ms: float = 0.0,
                   lr: float | None = None, param_norm: float | None = None) -> list[Effect]:
        """One batch trained: ``Batch`` (and ``LrUpdate`` when it changed).  A loss that is not finite
        raises :class:`WorkerError` naming rank, batch and epoch: it never becomes an epoch row."""
        if not math.isfinite(loss):
            epoch = self.current.epoch if self.current else "?"
            raise WorkerError(f"rank {self.rank}: the loss of batch {self._batches + 1} of epoch {epoch} is {loss}")
        self.steps += 1
        self.steps_since_sync += 1
        self._batches += 1
        self._loss += loss
        self._compute_ms += batch_ms
        self._data_ms += data_ms
        self._last_batch_end = now
        self._held.add(batch_ms, data_ms, loss, param_norm)
        effects: list[Effect] = []
        if now - self._reported_at >= self.report_every or self._held.batches >= REPORT_HELD_MAX:
            effects.append(self._report(now))
        if lr is not None and lr != self._last_lr:
            # The coordinator keeps the latest LR per rank: an unchanged LR is not sent again.
            self._last_lr = lr
            effects.append(Send(LrUpdate(rank=self.rank, lr=lr)))
        return effects

    def _report(self, now: float) -> Send:
        held = self._held
        n = held.batches
        self._reported_at = now
        batch = Batch(rank=self.rank, batch_ms=held.batch_ms / n, step_count=self.steps, batch_loss=held.loss / n,
                      data_ms=held.data_ms / n, param_norm=held.param_norm)
        self._held = _HeldBatches()
        return Send(batch, to=self.relay)

    def report_held(self, now: float) -> list[Effect]:
        """The batches held since the last ``Batch``, reported now (the driver calls it before it waits:
        what the coordinator's sync gate counts must not sit in a rank that blocks)."""
        return [self._report(now)] if self._held.batches and self.ended is None else []

    def record_scalar(self, name: str, value: float) -> None:
        acc = self._scalars.get(name)
        if acc is None:
            self._scalars[name] = [float(value), 1.0]
        else:
            acc[0] += value
            acc[1] += 1

    def report_epoch(self, now: float, *, samples: int | None = None) -> list[Effect]:
        """The current plan is done: ``MetricsMsg`` with its loss, timings and scalars."""
        plan = self.current
        if plan is None:
            raise UsageError("report_epoch() before next_plan()")
        batches = self._batches
        covered = len(plan.extensions) + (1 if plan.is_extension else 0)
        metrics = MetricsMsg(
            rank=self.rank, epoch=plan.epoch, avg_loss=self._loss / batches if batches else 0.0,
            batches_processed=batches, epoch_ms=max(0.0, (now - plan.started) * 1000),
            samples_processed=plan.total if samples is None else samples,
            share_complete_ms=max(0.0, (self._last_batch_end - plan.started) * 1000),
            compute_only_ms=self._compute_ms, data_starve_ms=self._data_ms,
            scalars={k: ScalarSum(sum=v[0], count=int(v[1])) for k, v in self._scalars.items()},
            extensions=covered, step_count=self.steps, seq=self._metrics_seq + 1)
        self._metrics_seq += 1
        self._scalars = {}
        self._held = _HeldBatches()  # counted by the metrics' step count
        self.current = None
        if self.relay:
            self._unconfirmed.append(metrics)
        return [Send(metrics, to=self.relay)]

    def intent(self, kind: IntentKind) -> list[Effect]:
        return [Send(Intent(rank=self.rank, kind=kind))]

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(rank=self.rank, step_count=self.steps)

    def exiting(self) -> list[Effect]:
        """Say this rank leaves cleanly (once); only on success: an error path must not say it."""
        if self.exiting_sent:
            return []
        self.exiting_sent = True
        return [Send(Exiting(rank=self.rank))]
