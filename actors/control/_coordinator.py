"""The training coordinator: a sans-IO state machine that runs as an actor.

It owns the data-parallel control plane (see
``docs/control-plane.md``): who is in the run, who is alive, which slice of
the dataset each rank trains on, when ranks all-reduce, who evaluates and
checkpoints, and how the run ends.  Every input is a message (worker reports,
``Down`` from the runtime, its own ``TimerFired`` tick); every output is a
message.  Time comes from ``ctx.now()``, so the unit tests drive it with a
virtual clock and a recording replays it exactly.

Ranks are addressed by the actor name they joined from (``worker/3``).
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Callable
from typing import Any

import msgspec

from actorwire.actors.control._endings import (
    CASCADE_S,
    AwaitRestart,
    End,
    EpochEnd,
    Finish,
    Resume,
    RunEnd,
    Start,
    WatchCascade,
    after_loss,
    after_restart_wait,
    at_the_end,
    before_start,
    epoch_end,
    unrecoverable,
)
from actorwire.actors.control._groups import NO_GENERATOR, ROUNDS, GroupFormation
from actorwire.actors.control._ledger import (
    EWMA,
    FINAL_EVAL,
    META_SCHEMA,
    CoordinatorConfig,
    RankState,
    hand_over,
    join_refusal,
    shares,
    unsynced,
)
from actorwire.actors.control._losses import Losses
from actorwire.actors.control._outcome import CoordinatorEffects, RunOutcome, outcome_of
from actorwire.actors.control._phases import ACCEPTED, Event, Phase, next_phase
from actorwire.actors.control._reports import EpochReports
from actorwire.actors.control._roles import Roles
from actorwire.actors.control._roster import Roster
from actorwire.actors.control._routes import RelayFan, Relays, sort_report
from actorwire.actors.control._sync import SyncCadence
from actorwire.actors.runtime._actor import Actor, effects_name, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.runtime._replay import register_replayable
from actorwire.messages import Message
from actorwire.messages.kinds import (
    ActorDetail,
    Batch,
    Checkpoint,
    CheckpointResult,
    CoordHeartbeat,
    DeclareDead,
    Down,
    DownReason,
    EpochAggregated,
    EpochFnElapsed,
    EvalBroadcast,
    EvalResult,
    Evicted,
    ExecuteEval,
    Exiting,
    ExtendPartition,
    GroupFormed,
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
    RankExited,
    RankLost,
    RankStatus,
    RelayReport,
    RequestNewNcclId,
    SaveReason,
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
    WriteMeta,
)
from actorwire.transport import ActorDead, UnknownActor
from actorwire.transport.internal import InvalidArgument


def _phased(fn: Callable[[Coordinator, Any, Context], None]) -> Callable[[Coordinator, Any, Context], None]:
    """Run the handler only for a message its phase takes (``_phases.ACCEPTED``); refuse any other."""

    @functools.wraps(fn)
    def gate(self: Coordinator, msg: Any, ctx: Context) -> None:
        if type(msg) in self._taken:  # on every message: one set lookup (ACCEPTED of the phase)
            fn(self, msg, ctx)
        else:
            self._refuse(msg, ctx)

    return gate


def _settings(config: dict[str, Any]) -> CoordinatorConfig:
    fields = {f.name: f for f in msgspec.structs.fields(CoordinatorConfig)}
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise InvalidArgument(f"Coordinator: no setting named {', '.join(map(repr, unknown))}; the settings are "
                              f"{', '.join(fields)} (docs/control-plane.md)")
    missing = [name for name, f in fields.items() if f.required and name not in config]
    if missing:
        raise InvalidArgument(f"Coordinator: {', '.join(missing)} must be given")
    try:
        return msgspec.convert(config, CoordinatorConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"Coordinator: {exc}") from None


def _count_batch(r: RankState, cost: float | None, step_count: int = 0) -> None:
    """A report that ``r`` trained batches: up to its own ``step_count`` (what it counted since it
    joined), or one where it says none (0).  Counted by the rank's count, a batch a relay reports
    after the rank's ``MetricsMsg`` or ``SyncAck`` said more is not counted twice, and one the relay
    still holds is counted when those say so: counted one per report, with relays the coordinator
    closed epochs and ended runs before a sync covered the ranks' last batches (the simulator with
    relays: ranks finished with different parameters in 252 of 500 seeds).  ``step_count`` is
    already bounded by ``Coordinator._claimed``; a report that names none is counted only while the
    rank has samples left that it was given."""
    if step_count > 0:
        new = step_count - r.total_steps
        if new <= 0:
            return
    elif r.total_steps < r.given:
        new = 1
    else:
        return
    r.steps_since_sync += new
    r.total_steps += new
    r.epoch_steps += new
    if cost is not None:
        r.ms_per_batch = cost if r.ms_per_batch is None else (1 - EWMA) * r.ms_per_batch + EWMA * cost


@register_replayable
class Coordinator(Actor):
    """See the module doc and ``docs/control-plane.md``."""

    def __init__(self, **config: Any) -> None:
        """``config``: the fields of :class:`CoordinatorConfig` (``world_size``, ``run_id``,
        ``num_epochs`` and ``dataset_size`` required; the table in docs/control-plane.md, "The
        coordinator's settings").  An unknown name or a value of the wrong type is one
        :class:`InvalidArgument` naming it."""
        self.settings = _settings(config)
        self._config_kwargs = dict(config)
        self.phase = Phase.JOINING
        self._taken = ACCEPTED[self.phase]  # what the phase takes; set with the phase, read per message
        #: Messages refused because they did not belong in the phase they arrived in, by (kind, phase).
        self.refused: collections.Counter[tuple[str, str]] = collections.Counter()
        #: Those of them sent by a rank counted alive.
        self.refused_from_live: collections.Counter[tuple[str, str]] = collections.Counter()
        self.epoch = -1
        self.failures = 0
        self.global_step = 0
        #: The sync cadence and what each sync put in the model (``_sync.SyncCadence``).
        self.sync = SyncCadence(self.settings.sync_policy, self.settings.sync_every, self.settings.overhead_target)
        #: The ranks, by number and by name, and who of them is in the run (``_roster.Roster``).
        self.roster = Roster(self.sync.recheck)
        self.ranks = self.roster.ranks
        #: Each epoch's reports by rank, and the aggregates of the epochs that ended (``_reports.EpochReports``).
        self.reports = EpochReports()
        #: Who runs evals, checkpoints and the epoch callback, and when they are due (``_roles.Roles``).
        self.roles = Roles(self.settings.eval_every, self.settings.checkpoint_every)
        #: How far the run is from its end: why it cannot go on, what the ranks were told and when,
        #: a whole-group restart watched for or waited for (``_endings.RunEnd``).
        self.end = RunEnd()
        #: Forming the process group again after a loss or a rejoin (``_groups.GroupFormation``).
        self.groups = GroupFormation(self.settings.rendezvous_timeout)
        #: The model signature every join must match: the settings', else the first join's.
        self._signature = ""
        self.started_at = 0.0
        #: When the silence of the ranks was last checked (``_check_silence``; not at every tick).
        self._silence_checked = float("-inf")
        #: Ranks lost before and while the run went on, and how; those that rejoined; the restarts.
        self.losses = Losses()
        #: Relays the ranks named (watched), and those that died: their ranks are told directly.
        self.relays = Relays()
        #: What was told last that a rank behind a relay that died is told again (``_state_of``).
        self.sync_said: SyncNow | None = None

    def config(self) -> dict[str, Any]:
        return dict(self._config_kwargs)

    def status(self, now: float) -> ActorDetail:
        """The phase, the epoch and every rank, for ``actorwire status`` (read from another thread:
        the rank table is copied whole, each rank's fields read once)."""
        ranks = []
        for state in sorted(list(self.ranks.values()), key=lambda r: r.rank):
            if state.exited:  # also one that left before the run ended (its share went to the others)
                how = "exited"
            elif not state.alive:
                how = "dead"
            elif state.waiting:
                how = "waiting"
            elif self.phase is Phase.JOINING:
                how = "joined"  # waiting for the others before the first epoch
            else:
                how = "training"
            ranks.append(RankStatus(rank=state.rank, state=how, epoch=state.reported_epoch, steps=state.total_steps,
                                    ms_per_batch=state.ms_per_batch, silent_s=round(max(0.0, now - state.last_seen), 1)))
        notes = {"global step": str(self.global_step), "failures": str(self.failures)}
        if self.groups.search is not None:
            notes["forming a group"] = f"attempt {self.groups.attempt}"
        return ActorDetail(phase=self.phase.value, epoch=self.epoch, ranks=ranks, notes=notes)

    # -- phases ---------------------------------------------------------------

    def _move(self, event: Event) -> None:
        self.phase = next_phase(self.phase, event)
        self._taken = ACCEPTED[self.phase]

    def _refuse(self, msg: Message, ctx: Context) -> None:
        """A message that does not belong in this phase: named, counted, and nothing changes.  In
        ``stopping``, reports still in flight are expected, and so are those of a rank counted dead
        that speaks again: those are logged at debug level."""
        key = (type(msg).wire_tag(), self.phase.value)
        self.refused[key] += 1
        rank = self.roster.of(ctx.sender or "")
        live = rank is not None and rank.alive and not rank.exited
        if live:
            self.refused_from_live[key] += 1
        # A rank counted dead that speaks again (it was stopped) sends what it was doing: expected.
        log = ctx.log.warning if live and self.phase is not Phase.STOPPING else ctx.log.debug
        log("message refused: not taken in this phase", kind=type(msg).wire_tag(), phase=self.phase.value,
            rank=getattr(msg, "rank", None), sender=ctx.sender)

    # -- helpers ------------------------------------------------------------

    def alive(self) -> list[RankState]:
        """The ranks in the run: alive, not left, and not waiting for the next epoch to take part."""
        return self.roster.alive()

    def _tell_all(self, ctx: Context, message: Message) -> None:
        self._broadcast(ctx, self.alive(), message)

    def _tell(self, ctx: Context, r: RankState, message: Message) -> None:
        """Tell one rank; one that went down a moment ago is skipped: its Down is on the way and is
        handled as its death.  (A raise here would leave a handler half done: an epoch dispatched
        to the ranks before it and not after.)  A rank behind a relay is told through it."""
        if r.relay:
            self._tell_each(ctx, [(r, message)])
            return
        try:
            ctx.tell(r.name, message)
        except (ActorDead, UnknownActor):
            pass

    def _tell_each(self, ctx: Context, told: list[tuple[RankState, Message]]) -> None:
        """Tell each rank its message: those behind a relay in one ``Fanout`` per relay (one message
        when they all get the same), the others one by one.  Every tell to a rank behind a relay goes
        through it, so a rank hears the coordinator in the order told."""
        direct, fans = self.relays.fan(told)
        for r, message in direct:
            try:
                ctx.tell(r.name, message)
            except (ActorDead, UnknownActor):
                pass
        self._tell_fans(ctx, fans)

    def _broadcast(self, ctx: Context, ranks: list[RankState], message: Message) -> None:
        """``_tell_each`` of one message to each of ``ranks`` (a list the coordinator keeps: its
        grouping by relay is kept with it, ``Relays.broadcast``)."""
        direct, fans = self.relays.broadcast(ranks, message)
        for r in direct:
            try:
                ctx.tell(r.name, message)
            except (ActorDead, UnknownActor):
                pass
        self._tell_fans(ctx, fans)

    def _tell_fans(self, ctx: Context, fans: list[RelayFan[RankState]]) -> None:
        for fan in fans:
            try:
                ctx.tell(fan.relay, fan.fanout)
            except (ActorDead, UnknownActor) as exc:
                self._relay_lost(ctx, fan.relay, str(exc))  # tells them directly, what it may have lost first
                self._tell_each(ctx, fan.tells())

    def _relay_lost(self, ctx: Context, relay: str, why: str) -> None:
        """A relay died: its ranks are told directly from now on, and what it may have held for them
        is told again (each rank takes what it was told once: ``RankProtocol.receive``); their
        reports through it are no longer taken (they send straight, and send again what the relay
        may have lost: ``RankProtocol.relay_gone``)."""
        behind = self.relays.lost(relay, self.ranks.values())
        if behind is None:
            return
        ctx.log.warning("a relay is gone; its ranks are told directly", relay=relay, why=why,
                        ranks=len(behind))
        for r in sorted(behind, key=lambda r: r.rank):
            if r.alive and not r.exited:
                for message in self._state_of(r):
                    self._tell(ctx, r, message)

    def _state_of(self, r: RankState) -> list[Message]:
        """What a rank must have been told by now, for one whose relay died: its epoch's plan and
        slices, the sync in progress, the global step, the last aggregate, the final eval it owes,
        and the end of the run."""
        said: list[Message] = []
        if self.phase is Phase.STOPPING:
            return [self.end.message] if self.end.message is not None else []
        if self.epoch >= 0 and r.slices and not r.waiting:
            offset, size = r.plan
            said.append(StartEpoch(epoch=self.epoch, partition_offset=offset, partition_size=size))
            said += [ExtendPartition(partition_offset=start, partition_size=n, epoch=self.epoch)
                     for start, n in r.slices[1:]]
        if self.sync.in_progress:
            # The cycle's SyncNow went to the ranks in the run: one waiting to rejoin is not in its group.
            if r.rank not in self.sync.acked and not r.waiting and self.sync_said is not None:
                said.append(self.sync_said)
        else:  # (while one is, its end tells every rank the global step)
            said.append(SetGlobalStep(global_step=self.global_step))
        last = self.reports.last()
        if last is not None:
            said.append(EpochAggregated(metrics=last))
        if self.roles.awaits_eval(FINAL_EVAL, r.rank) and self.roles.final_eval_said is not None:
            said.append(self.roles.final_eval_said)
        return said

    def _sink(self, ctx: Context, message: Message) -> None:
        if self.settings.metrics_sink:
            try:
                ctx.tell(self.settings.metrics_sink, message)
            except Exception:  # a sink that left must not stop the run
                ctx.log.warning("metrics sink unreachable", sink=self.settings.metrics_sink)

    def _seen(self, ctx: Context, rank: int) -> RankState | None:
        r = self.ranks.get(rank)
        if r is not None and r.alive:
            r.last_seen = ctx.now()
            r.silence_warned = 1
        return r

    def _from_rank(self, ctx: Context, claimed: int) -> RankState | None:
        """The rank a report comes from, refusing reports from an actor that is not that rank."""
        r = self.ranks.get(claimed)
        if r is None or r.name != ctx.sender:
            ctx.log.warning("report from an actor that is not that rank", rank=claimed, sender=ctx.sender)
            return None
        r.last_seen = ctx.now()
        r.silence_warned = 1
        self._evict_if_dead(ctx, r)
        return r

    def _claimed(self, ctx: Context, r: RankState, step_count: int) -> int:
        """``r``'s own step count (``Batch``, ``SyncAck``, ``MetricsMsg``), believed up to the samples it
        was given: a count past them moved the global step and the sync gate by whatever a rank said."""
        if step_count <= r.given:
            return step_count
        if not r.overclaimed:
            r.overclaimed = True
            ctx.log.warning("a rank says it trained more steps than the samples it was given; counted up to them",
                            rank=r.rank, said=step_count, given=r.given)
        return r.given

    def _evict_if_dead(self, ctx: Context, r: RankState) -> None:
        if not r.alive and not r.told_to_leave and self.phase is not Phase.STOPPING:
            # Declared dead (its process stopped or cut off past the runtime's timeout) and speaking again:
            # its share went to the others. It is told to leave, once, rather than left to wait for
            # plans that never come (a revived SIGSTOPped worker would crash).
            r.told_to_leave = True
            ctx.log.warning("a rank declared dead spoke again; telling it to leave", rank=r.rank)
            try:  # not Shutdown: it must not end like a rank that finished, its model is stale
                ctx.tell(r.name, Evicted(detail=f"rank {r.rank} was counted dead ({r.lost_why}) and its share went "
                                                f"to the others; the run goes on without it"))
            except (ActorDead, UnknownActor):
                pass

    # -- join ---------------------------------------------------------------

    def on_start(self, ctx: Context) -> None:
        self.started_at = ctx.now()
        ctx.start_timer("tick", self.settings.tick_interval, periodic=True)

    @handler
    @_phased
    def on_join(self, msg: JoinRequest, ctx: Context) -> None:
        # A rank restarted by its launcher (a new incarnation under the same name) or one that came
        # late may join a running run: it gets a share from the next epoch on, or, once the last
        # epoch ended, the final model before the end. A rank is refused only while an incarnation
        # of it is alive.
        current = self.ranks.get(msg.rank)
        live = {msg.rank: current} if current is not None and current.alive else {}  # all join_refusal reads
        reason = join_refusal(self.settings, msg, joined=live, signature=self.settings.model_signature or self._signature)
        if self.end.saved is not None:
            reason = f"the run has ended ({self.end.saved.value})"
        elif self.phase is Phase.STOPPING:
            reason = f"the run has ended; rank {msg.rank} cannot join now"
        if reason is not None:
            ctx.log.warning("join refused", rank=msg.rank, reason=reason)
            if ctx.correlation_id:
                ctx.reply(JoinRejected(reason=reason))
            return
        name = ctx.sender or ""
        try:  # nothing is claimed before the joiner is proven to be a registered actor
            ctx.watch(name)
        except (UnknownActor, ActorDead) as exc:
            ctx.log.warning("join refused", rank=msg.rank, reason=str(exc))
            if ctx.correlation_id:
                ctx.reply(JoinRejected(reason=f"the sender {name!r} is not a registered actor"))
            return
        if not self.settings.model_signature and not self.ranks:
            self._signature = msg.model_signature
        r = RankState(msg.rank, name, ctx.now())
        r.relay = self._watch_relay(ctx, msg.relay, msg.rank)
        r.evaluates = msg.evaluates
        r.waiting = self.phase is not Phase.JOINING  # a rejoin takes part from the next epoch
        old = self.ranks.get(msg.rank)
        if old is not None and old.in_run:
            old.alive = False  # never: a live incarnation is refused above; kept true to the count
        self.roster.add(r)  # counted from here on
        self.losses.joined(msg.rank, rejoin=r.waiting)  # a new incarnation: what was lost is back
        self.sync.fresh.add(msg.rank)  # it takes the run's model in its first sync, before it trains
        if r.waiting and self.phase is Phase.FINISHING:
            ctx.log.warning("rank rejoined after the last epoch; it takes the final model", rank=msg.rank)
        elif r.waiting:
            ctx.log.warning("rank rejoined; it gets a share from the next epoch", rank=msg.rank, epoch=self.epoch)
        accepted = JoinAccepted(rank=msg.rank, world_size=self.settings.world_size)
        if self.phase is Phase.RESTARTING and self.roles.written is not None:
            # No rank holds the model: each new incarnation loads the last checkpoint before it trains.
            accepted = JoinAccepted(rank=msg.rank, world_size=self.settings.world_size,
                                    resume_from=self.roles.written.path, resume_epoch=self.roles.written.version)
        if ctx.correlation_id:
            ctx.reply(accepted)
        self._sink(ctx, accepted)  # the user's view shows the joins as they come
        ctx.log.info("rank joined", rank=msg.rank, joined=self.roster.in_run, world_size=self.settings.world_size,
                     progress=f"joined {self.roster.in_run}/{self.settings.world_size}")
        if self.phase is Phase.JOINING:
            self._maybe_begin(ctx)
        elif self.phase is Phase.RESTARTING:
            self._maybe_resume(ctx, ctx.now())
        elif self.phase is Phase.FINISHING:
            self._maybe_finish(ctx)  # it takes the final model before anyone is told Shutdown

    def _watch_relay(self, ctx: Context, relay: str, rank: int) -> str:
        """The relay a joining rank named, watched (its death is a fault the coordinator handles); ""
        for one that is not a registered actor, or died: the rank is told directly."""
        what = self.relays.named(relay)
        if what != "watch":
            return relay if what == "use" else ""
        try:
            ctx.watch(relay)
        except (UnknownActor, ActorDead) as exc:
            ctx.log.warning("a rank named a relay that is not there; it is told directly", rank=rank,
                            relay=relay, error=str(exc))
            return ""
        self.relays.watching(relay)
        return relay

    @handler
    @_phased
    def on_rank_exited(self, msg: RankExited, ctx: Context) -> None:
        """The launcher saw a rank's process exit; the only news of a rank that never joined.  Taken
        only from the launcher's node (``launcher_node``): a joined rank is counted dead on it."""
        node = self.settings.launcher_node
        if not node or not (ctx.sender or "").startswith(f"~{node}/"):
            ctx.log.warning("a rank's exit reported by someone other than its launcher; ignored", rank=msg.rank,
                            sender=ctx.sender, launcher_node=node or "(none set)")
            return
        r = self.ranks.get(msg.rank)
        if r is not None:
            if msg.returncode != 0 and r.alive and not r.exited and self.phase is not Phase.STOPPING:
                self._death(ctx, r, msg.detail)  # its Down may still be on the way; this is as sure
            return
        if self.phase is not Phase.JOINING or msg.rank in self.losses.at_start or msg.rank >= self.settings.world_size:
            return
        self.failures += 1
        why = self.losses.lost_before_start(msg.rank, f"{msg.detail or 'exited'} before it joined")
        ctx.log.error("rank lost before joining", rank=msg.rank, phase=self.phase, reason=msg.detail)
        self._sink(ctx, RankLost(rank=msg.rank, epoch=-1, reason=why,
                                 world_size=self.roster.in_run))
        self._maybe_begin(ctx)

    def _maybe_begin(self, ctx: Context) -> None:
        """Start once every rank joined or was lost; end at once if too few can ever start."""
        c = self.settings
        alive = self.roster.in_run
        waiting = c.world_size - len(self.ranks) - sum(1 for k in self.losses.at_start if k not in self.ranks)
        verdict = before_start(c, alive=alive, waiting=waiting, lost=self.losses.at_start,
                               restart_since=self.end.restart_since, now=ctx.now())
        if verdict is Start.HOLD:
            return
        if verdict is Start.WAIT_FOR_LAUNCHER:
            if self.end.restart_since is None:
                self.end.restart_since = ctx.now()
                ctx.log.warning("too few ranks left before the start; waiting for the launcher to start them again",
                                wait_s=c.restart_wait, lost=sorted(self.losses.at_start))
            return
        if isinstance(verdict, End):
            self._save_and_shutdown(ctx, verdict.reason, verdict.detail)
            return
        self.end.restart_since = None  # no longer waiting for a restart
        if verdict is Start.BEGIN:
            self._begin(ctx)

    def _begin(self, ctx: Context) -> None:
        self._move(Event.ALL_IN)
        if self.losses.at_start:
            ctx.log.warning("starting without the ranks lost before the start", world_size=len(self.alive()),
                            lost=sorted(self.losses.at_start))
        self._elect_roles(ctx)
        # With fewer ranks than planned, the workers cannot form the group they were launched for:
        # the coordinator forms it for the ranks that are here.
        if self.settings.form_group or len(self.alive()) < self.settings.world_size:
            self._start_rendezvous(ctx)
        self._dispatch_epoch(ctx, 0)

    # -- liveness -----------------------------------------------------------

    @handler
    @_phased
    def on_tick(self, msg: TimerFired, ctx: Context) -> None:
        now = ctx.now()
        if self.phase is Phase.JOINING:
            beat = CoordHeartbeat(seq=msg.count)
            self._broadcast(ctx, self.alive(), beat)
            self._check_silence(ctx, now, self.alive)
            if self.phase is Phase.JOINING and self.end.restart_since is not None:
                self._maybe_begin(ctx)  # ends the run once restart_wait has passed without enough ranks
            if self.phase is Phase.JOINING and now - self.started_at >= self.settings.join_timeout:
                missing = sorted(set(range(self.settings.world_size)) - set(self.ranks) - set(self.losses.at_start))
                for rank in missing:
                    self.losses.lost_before_start(rank, f"did not join within {self.settings.join_timeout:g} s")
                ctx.log.warning("not every rank joined in time; starting with those that did",
                                joined=sorted(r.rank for r in self.alive()), missing=missing,
                                world_size=self.settings.world_size)
                self._maybe_begin(ctx)
            return
        if self.phase in (Phase.RUNNING, Phase.FINISHING):
            # One by one (``_tell_each`` skips a rank that just went down): a broadcast raised at the
            # first rank that had just gone down, and the rest of the tick did not run.
            beat = CoordHeartbeat(seq=msg.count)
            self._broadcast(ctx, self.roster.reachable(), beat)
            self._check_silence(ctx, now, self.roster.reachable)
            self._check_rendezvous_timeout(ctx, now)
            self._maybe_reform(ctx)
            armed = self.sync.armed_at
            if armed is not None and now - armed > self.settings.reduce_stall_timeout and self.end.saved is None:
                waiting = sorted(r.rank for r in self.alive() if r.rank not in self.sync.acked)
                self._save_and_shutdown(ctx, SaveReason.REDUCE_STALL,
                                        f"sync {self.sync.cycle} not acknowledged within "
                                        f"{self.settings.reduce_stall_timeout:g} s by rank(s) {waiting} "
                                        f"(phase {self.phase}, epoch {self.epoch})")
        if self.phase in (Phase.RUNNING, Phase.FINISHING) and (watched := self.end.watched_out(now)) is not None:
            self._save_and_shutdown(ctx, self._unrecoverable() or watched.reason, watched.detail)  # not every rank went
        if self.phase is Phase.RESTARTING:
            beat = CoordHeartbeat(seq=msg.count)
            self._broadcast(ctx, self.roster.reachable(), beat)
            self._maybe_resume(ctx, now)
        if self.phase is Phase.STOPPING and self.end.told_at is not None:
            if not self.roster.in_run or now - self.end.told_at > self.settings.exit_grace:
                ctx.stop()

    def _check_silence(self, ctx: Context, now: float, ranks: Callable[[], list[RankState]]) -> None:
        """A silent rank is slow, not dead: the runtime judges its process by libzmq's heartbeats
        and says ``Down`` when it is gone.  Silence is reported, once per doubling of it.  Checked
        every eighth of ``staleness_timeout`` (each tick when that is shorter): the check visits every
        rank, and at 10,000 ranks it was 0.6 us a rank twice a second, most of a tick's time
        (``actorwire simulate --scale 10000 --measure``), for a warning due after 30 s."""
        if now - self._silence_checked < self.settings.staleness_timeout / 8:
            return
        self._silence_checked = now
        for r in ranks():
            silent = now - r.last_seen
            if silent > self.settings.staleness_timeout * r.silence_warned:
                r.silence_warned *= 2
                ctx.log.warning("rank silent; its process is still connected, so it counts as slow, not dead",
                                rank=r.rank, silent_s=round(silent, 1), phase=str(self.phase))

    @handler
    @_phased
    def on_down(self, msg: Down, ctx: Context) -> None:
        if self.relays.is_relay(msg.name):
            self._relay_lost(ctx, msg.name, f"{msg.reason.value}: {msg.detail}")
            return
        r = self.roster.of(msg.name)
        if r is None:
            return
        if r.exited or not r.alive:
            return  # the Exiting latch: a clean exit is never a death
        if msg.reason is DownReason.EXITED and self.phase is Phase.STOPPING:
            r.exited = True
            return
        self._death(ctx, r, f"{msg.reason.value}: {msg.detail}")

    @handler
    @_phased
    def on_exiting(self, msg: Exiting, ctx: Context) -> None:
        r = self._from_rank(ctx, msg.rank)
        if r is not None:
            if r.alive and not r.exited and self.phase is not Phase.STOPPING:
                # Before it was told the run ended (a loop that stopped early, a client's own
                # Exiting): what of its share it did not train, or trained and no sync took, goes to
                # the others, and the group forms without it, as after a death.
                self._death(ctx, r, "left before the run ended (Exiting)")
            r.exited = True
        # The count, not alive(): each exit changes the roster, and rebuilding it per Exiting made the
        # end of a 10,000-rank run take minutes (py-spy: alive() under on_exiting).
        if self.phase is Phase.STOPPING and not self.roster.in_run:
            ctx.stop()

    @handler
    @_phased
    def on_heartbeat(self, msg: Heartbeat, ctx: Context) -> None:
        r = self.ranks.get(msg.rank)
        # A rank's heartbeat thread sends as "<rank name>/heartbeat".
        if r is not None and (ctx.sender or "").startswith(r.name + "/"):
            if r.alive:
                r.last_seen = ctx.now()
                r.silence_warned = 1
            else:  # its process outlived its death: often all it says while it waits for a plan
                self._evict_if_dead(ctx, r)
        else:
            self._from_rank(ctx, msg.rank)

    # -- deaths ---------------------------------------------------------------

    def _death(self, ctx: Context, r: RankState, why: str) -> None:
        if r.waiting:  # it had no share yet: nothing to hand over, no group to re-form
            r.alive = False
            ctx.log.warning("a rank waiting to rejoin was lost", rank=r.rank, reason=why)
            return
        if self.phase is Phase.STOPPING:  # the run is over: a death now is a teardown, not a loss
            r.alive = False
            ctx.log.warning("a rank died while the run was stopping", rank=r.rank, reason=why)
            return
        if self.phase is Phase.JOINING:  # nothing to hand over yet: the run starts without it
            r.alive = False
            self.failures += 1
            self.losses.lost_before_start(r.rank, f"died while the others were joining ({why})")
            ctx.log.error("rank lost", rank=r.rank, phase=self.phase, reason=why)
            self._sink(ctx, RankLost(rank=r.rank, epoch=-1, reason=f"died while the others were joining ({why})",
                                     world_size=self.roster.in_run))
            self._maybe_begin(ctx)
            return
        # Computed before the ledger changes: once the rank is out of it, its progress is gone.
        left = unsynced(r, acked=r.rank in self.sync.acked, batch_size=self.settings.batch_size)
        remainder = sum(n for _, n in left)
        r.lost_why = f"{why}, in epoch {self.epoch}"
        self.losses.lost_running(r.rank, self.epoch, why)
        r.alive = False
        self.failures += 1
        self.sync.acked.discard(r.rank)
        ctx.log.error("rank lost", rank=r.rank, phase=self.phase, epoch=self.epoch, reason=why, remainder=remainder)
        self._sink(ctx, RankLost(rank=r.rank, epoch=self.epoch, reason=why, world_size=len(self.alive())))
        self.groups.lost(ctx.now())
        asked_final = self.roles.awaits_eval(FINAL_EVAL, r.rank)
        if self.roles.holds_a_role(r.rank):
            self._elect_roles(ctx, force=True)
        if asked_final and not (self.alive() and self._send_eval(ctx, self.settings.num_epochs, final=True)):
            # Its final eval died with it: the new eval rank runs it; with none left, the run ends
            # without it rather than wait for an answer no rank can give.
            self.roles.final_eval_pending = False
            ctx.log.warning("the final eval died with its rank and no live rank can evaluate; the run ends "
                            "without it", rank=r.rank)
        if self.settings.backend == "nccl":
            self._tell_all(ctx, DeclareDead(rank=r.rank))
        self.losses.died(ctx.now())
        verdict = after_loss(self.settings, rank=r.rank, epoch=self.epoch, why=why, alive=len(self.alive()),
                             failures=self.failures, world=len(self.ranks),
                             recent=self.losses.recent(ctx.now(), CASCADE_S), now=ctx.now())
        if isinstance(verdict, AwaitRestart):
            self.end.cascade = None
            self._await_restart(ctx, verdict.detail)
            return
        if isinstance(verdict, WatchCascade):
            if self.end.watch(verdict, ctx.now()):
                ctx.log.warning("too few ranks left; waiting to see whether the launcher restarts them all",
                                reason=verdict.reason.value, wait_s=CASCADE_S)
            return
        if isinstance(verdict, End):
            self._save_and_shutdown(ctx, verdict.reason, verdict.detail)
            return
        survivors = self.alive()
        if remainder and self.phase is Phase.RUNNING and self.epoch >= 0:
            for s, extension in hand_over(left, survivors, self.epoch):
                self._tell(ctx, s, extension)
                self._sink(ctx, extension)  # the user's view shows where a lost rank's samples went
            self.sync.recheck()  # a survivor with a slice to train holds the gate again
        if len(survivors) >= 2 or self.settings.backend == "gloo":
            self._start_rendezvous(ctx)
        self._maybe_sync(ctx)
        self._maybe_aggregate(ctx)
        self._maybe_finish(ctx)

    # -- whole-group restarts: every rank lost, started again by the launcher -----------------

    def _await_restart(self, ctx: Context, detail: str) -> None:
        self._move(Event.ALL_LOST)
        self.end.restart_since = ctx.now()
        self.sync.abandon()
        self.groups.search = None
        resume = self.roles.written
        ctx.log.error("every rank lost; waiting for the launcher to start them again", detail=detail,
                      wait_s=self.settings.restart_wait, resume_epoch=resume.version if resume else 0,
                      checkpoint=resume.path if resume else None)

    def _maybe_resume(self, ctx: Context, now: float) -> None:
        """Resume once every rank is back; at ``restart_wait``, with those back if they are enough."""
        back = [r for r in self.roster.reachable() if r.waiting]
        since = self.end.restart_since if self.end.restart_since is not None else now
        verdict = after_restart_wait(self.settings, back=back, ranks=[r.rank for r in back], epoch=self.epoch,
                                     waited=now - since)
        if isinstance(verdict, Resume):
            self._resume(ctx, verdict.back)
        elif isinstance(verdict, End):
            self._save_and_shutdown(ctx, verdict.reason, verdict.detail)

    def _resume(self, ctx: Context, back: list[RankState]) -> None:
        """The model died with the ranks: the run goes back to the last checkpoint (or its start)
        and trains every epoch after it again; the new incarnations loaded that checkpoint."""
        resume = self.roles.written
        epoch = resume.version if resume is not None else 0
        lost_in = self.epoch
        self.global_step = resume.global_step if resume is not None else 0
        self.reports.rewind(epoch)
        self.sync.reseed()  # the first sync seeds the model from one rank (all loaded the same)
        self.groups.restarted()
        self.roles.restarted()
        self.end.restart_since = None
        self._move(Event.RESUMED)
        line = (f"every rank was lost in epoch {lost_in} and started again; resumed at epoch {epoch} "
                + (f"from checkpoint {resume.path}" if resume is not None else "from the start (no checkpoint)"))
        self.losses.restarts.append(line)
        ctx.log.warning("the restarted ranks are back; the run resumes", ranks=[r.rank for r in back],
                        epoch=epoch, checkpoint=resume.path if resume is not None else None)
        for r in back:
            r.waiting = False
        self._elect_roles(ctx, force=True)
        self._start_rendezvous(ctx, fresh=True)
        self._dispatch_epoch(ctx, epoch)

    def _unrecoverable(self) -> SaveReason | None:
        return unrecoverable(self.settings, alive=len(self.alive()), failures=self.failures)

    # -- re-rendezvous: survivors re-form the process group -------------------

    def _start_rendezvous(self, ctx: Context, fresh: bool = False, move_on: bool = False) -> None:
        """Ask the fastest untried survivor for a new group id (``GroupFormation.ask``)."""
        generator = self.groups.ask(self.alive(), self.ranks, ctx.now(), fresh=fresh, move_on=move_on)
        if generator is NO_GENERATOR:
            self._save_and_shutdown(ctx, self._unrecoverable() or SaveReason.SINGLE_SURVIVOR,
                                    f"no rank could form a new process group ({ROUNDS} rounds, each "
                                    f"rank asked; phase {self.phase}, epoch {self.epoch})")
        elif isinstance(generator, RankState) and self.groups.search is not None:
            self._tell(ctx, generator, RequestNewNcclId(attempt=self.groups.search.attempt))

    def _check_rendezvous_timeout(self, ctx: Context, now: float) -> None:
        if self.groups.timed_out(self.ranks, now):
            rank = self.groups.search.generator if self.groups.search else None
            ctx.log.warning("re-rendezvous generator gone or silent; trying the next", rank=rank)
            self._start_rendezvous(ctx, move_on=True)

    @handler
    @_phased
    def on_session_failed(self, msg: SessionFailed, ctx: Context) -> None:
        if self._from_rank(ctx, msg.rank) is None:
            return
        # A stale report, or one of an attempt a new formation answers already (every rank that
        # timed out in one attempt says so: one new attempt answers them all).
        if self.groups.session_failed(msg.rank, msg.attempt, ctx.now()):
            self._maybe_reform(ctx, reason=msg.reason, rank=msg.rank)

    def _maybe_reform(self, ctx: Context, *, reason: str = "", rank: int | None = None) -> None:
        """Form the group again once every live member of the failed attempt has given up
        (``GroupFormation.reform``)."""
        waiting = self.groups.reform(self.ranks, self.roster.alive_ids(), ctx.now())
        if waiting is None:
            return
        ctx.log.warning("ranks could not join the new process group; re-forming it", rank=rank,
                        attempt=self.groups.attempt, reason=reason, failed=sorted(self.groups.failed),
                        not_heard=sorted(waiting))
        self._start_rendezvous(ctx, fresh=True)

    @handler
    @_phased
    def on_new_id(self, msg: NewNcclIdGenerated, ctx: Context) -> None:
        r = self._from_rank(ctx, msg.rank)
        rv = self.groups.search
        if r is None or rv is None or msg.rank != rv.generator:
            ctx.log.warning("unexpected unique id dropped", rank=msg.rank)
            return
        survivors = self.alive()  # recomputed: deaths during the wait are folded in
        attempt = self.groups.session(survivors)
        for new_rank, s in enumerate(survivors):
            self._tell(ctx, s, NewNcclSession(uid=msg.uid, new_rank=new_rank, new_world_size=len(survivors),
                                            attempt=attempt))
        if self.sync.in_progress:
            # The reduce that the death broke is abandoned by the workers; every
            # survivor, acked or not, joins a new cycle on the new group.
            self._settle_acks()
            self._arm_sync(ctx)
        else:
            self._maybe_sync(ctx)  # ranks that do not hold the model yet take it on the new group
        self._maybe_finish(ctx)

    # -- roles ------------------------------------------------------------------

    def _elect_roles(self, ctx: Context, force: bool = False) -> None:
        self.roles.elect(self.alive(), force)

    # -- epochs -------------------------------------------------------------------

    def _dispatch_epoch(self, ctx: Context, epoch: int) -> None:
        joining = [r for r in self.ranks.values() if r.waiting and r.alive and not r.exited]
        for r in joining:
            r.waiting = False
        alive = self.alive()
        if not alive:
            return
        self.epoch = epoch
        callback = self.roles.epoch_callback_news()
        if callback is not None:
            self._tell_all(ctx, SetEpochCallbackRole(rank=callback))
        c = self.settings
        checkpoint, evaluate = self.roles.due_at(epoch)
        if checkpoint:
            self._send_checkpoint(ctx, epoch)
        if evaluate:
            self._send_eval(ctx, epoch)
        self._sink(ctx, StartEpoch(epoch=epoch, partition_offset=0, partition_size=c.dataset_size))
        offset = 0
        plans: list[tuple[RankState, Message]] = []
        add = plans.append
        for r, size in zip(alive, shares(self.settings.dataset_size, alive)):
            plan = (offset, size)
            r.plan = plan
            r.slices = [plan]
            r.given += size
            r.extended = r.ext_sent = r.ext_done = r.epoch_steps = 0
            r.epoch_start_steps = r.total_steps
            add((r, StartEpoch(epoch=epoch, partition_offset=offset, partition_size=size)))
            offset += size
        self._tell_each(ctx, plans)
        self._set_quotas()
        self.sync.window_started = ctx.now()
        if joining:  # the group must take the rejoined ranks in
            ctx.log.warning("rejoined ranks take part from this epoch", epoch=epoch, ranks=[r.rank for r in joining])
            self.groups.lost(ctx.now())
            self._start_rendezvous(ctx, fresh=True)  # a fresh search replaces the one in progress
        self._maybe_sync(ctx)  # the ranks that do not hold the model take it before they train

    def _send_eval(self, ctx: Context, epoch: int, final: bool = False) -> bool:
        """Ask the eval rank for an eval; False when no live rank holds the role."""
        target = self.ranks.get(self.roles.eval) if self.roles.eval is not None else None
        if target is None or not target.alive:
            return False
        message = ExecuteEval(schedule_id=self.roles.eval_id(final), epoch=epoch, target_rank=target.rank,
                              final=final)
        self.roles.eval_asked(message)
        self._tell(ctx, target, message)
        return True

    def _send_checkpoint(self, ctx: Context, version: int) -> None:
        target = self.ranks.get(self.roles.checkpoint) if self.roles.checkpoint is not None else None
        if target is None or not target.alive:
            return
        # Sent before the epoch's plans: the model it saves is the one every rank holds after the
        # epoch before ``version``, which holds ``global_step`` steps.
        self.roles.checkpoint_asked(target.rank, version, self.global_step)
        self._tell(ctx, target, Checkpoint(version=version, target_rank=target.rank))

    # -- reports ----------------------------------------------------------------

    @handler
    @_phased
    def on_batch(self, msg: Batch, ctx: Context) -> None:
        r = self._from_rank(ctx, msg.rank)
        if r is None or not r.alive:
            return
        _count_batch(r, msg.batch_ms + msg.data_ms, self._claimed(ctx, r, msg.step_count))
        self._maybe_sync(ctx)
        self._throttle(ctx, r)

    @handler
    @_phased
    def on_relay_report(self, msg: RelayReport, ctx: Context) -> None:
        """The batches, heartbeats, sync acks and epoch reports of the ranks behind a relay, taken only
        for the ranks that named this relay in their join (the runtime proved those joins came from
        the ranks), in that order."""
        relay = ctx.sender or ""
        report = sort_report(msg, relay, self.ranks)
        if report is None:
            self._refuse_relayed(ctx, relay, "its columns have different lengths", len(msg.ranks) + len(msg.beats))
            return
        now = ctx.now()
        batches = Batch in self._taken
        counted: list[RankState] = []
        for r, i in report.rows:
            r.last_seen = now
            r.silence_warned = 1
            if not r.alive:  # counted dead and speaking again, as straight to the coordinator
                self._evict_if_dead(ctx, r)
            elif batches:
                said = msg.step_counts[i]
                _count_batch(r, msg.batch_ms[i] + msg.data_ms[i],
                             said if said <= r.given else self._claimed(ctx, r, said))
                counted.append(r)
        for r in report.beats:
            if r.alive:
                r.last_seen = now
                r.silence_warned = 1
            else:
                self._evict_if_dead(ctx, r)
        if report.forged:
            self._refuse_relayed(ctx, relay, "reports for ranks that did not name it as their relay", report.forged)
        if msg.ranks and batches:
            self._maybe_sync(ctx)
            throttled = [r for r in counted if self.sync.ahead(r)]
            for r in throttled:
                r.throttled = True
            throttle = Throttle()
            self._tell_each(ctx, [(r, throttle) for r in throttled])
            if throttled:
                self._maybe_sync(ctx)  # a throttled rank holds the gate no longer
        reported = False
        for r, told in report.told:  # as if the rank told them: the phase decides
            if isinstance(told, MetricsMsg) and self.reports.told_again(r, told):
                continue
            if type(told) not in self._taken:
                self._refuse(told, ctx)
            else:
                r.last_seen = now
                r.silence_warned = 1
                if isinstance(told, SyncAck):
                    self._sync_ack(ctx, r, told)
                else:
                    reported = self._metrics(ctx, r, told, settle=False) or reported
        if reported:  # the report's epoch reports taken as one: the gate and the epoch's end looked at once
            self._maybe_sync(ctx)
            self._maybe_aggregate(ctx)

    def _refuse_relayed(self, ctx: Context, relay: str, why: str, count: int) -> None:
        key = ("relay_report", why)
        first = key not in self.refused
        self.refused[key] += count
        if first:
            ctx.log.warning("refused what a relay reported; further refusals are counted", relay=relay, why=why,
                            count=count)

    @handler
    @_phased
    def on_lr(self, msg: LrUpdate, ctx: Context) -> None:
        r = self._from_rank(ctx, msg.rank)
        if r is not None:
            r.lr = msg.lr

    @handler
    @_phased
    def on_intent(self, msg: Intent, ctx: Context) -> None:
        if self._from_rank(ctx, msg.rank) is None:
            return
        if msg.kind is IntentKind.EVAL_NOW:
            self.roles.pending_eval = True
        else:
            self.roles.pending_checkpoint = True

    @handler
    @_phased
    def on_epoch_fn(self, msg: EpochFnElapsed, ctx: Context) -> None:
        self._from_rank(ctx, msg.rank)

    @handler
    @_phased
    def on_eval(self, msg: EvalResult, ctx: Context) -> None:
        r = self._from_rank(ctx, msg.rank)
        if r is None:
            return
        if not self.roles.awaits_eval(msg.schedule_id, msg.rank):
            # Every rank hears an answer, and the run's end waits for the final one: only the rank it
            # was asked of gives it, once.  (A periodic eval's rank counted dead since answers for the
            # model it was asked about; the final eval of a rank counted dead went to another rank.)
            ctx.log.warning("an eval answer nobody asked this rank for; ignored", rank=msg.rank,
                            schedule_id=msg.schedule_id)
            return
        self.roles.eval_answered(msg.schedule_id)
        if msg.error is not None:
            ctx.log.warning("eval failed; not retried", rank=msg.rank, error=msg.error)
        else:
            broadcast = EvalBroadcast(epoch=msg.epoch, metric=msg.metric)
            self._tell_all(ctx, broadcast)
            self._sink(ctx, broadcast)
        if msg.schedule_id == FINAL_EVAL:
            self._maybe_finish(ctx)

    @handler
    @_phased
    def on_checkpoint(self, msg: CheckpointResult, ctx: Context) -> None:
        r = self._from_rank(ctx, msg.rank)
        if r is None:
            return
        if not self.roles.checkpoint_answered(msg.rank, msg.version):
            # A written checkpoint's path is what a restarted group loads, and a failed one is tried
            # on the next rank: only a rank asked for that version says either, once.
            ctx.log.warning("a checkpoint answer nobody asked this rank for; ignored", rank=msg.rank,
                            version=msg.version)
            return
        if msg.error is None:
            self.roles.checkpoint_done(msg.rank, msg.version, msg.path)
            return
        retry = self.roles.checkpoint_failed(self.alive())
        ctx.log.warning("checkpoint failed", rank=msg.rank, error=msg.error, retry=retry is not None)
        if retry is not None:
            self._send_checkpoint(ctx, msg.version)

    # -- sync cadence -------------------------------------------------------------

    def _set_quotas(self) -> None:
        self.sync.set_quotas(self.alive(), self.settings.dataset_size, self.settings.batch_size)

    def _throttle(self, ctx: Context, r: RankState) -> None:
        """``Throttle`` to a rank that ran ``SyncCadence.lead_bound`` batches ahead of its last sync (its
        peers are slower, or descheduled): it trains no more until the next sync."""
        if self.sync.ahead(r):
            r.throttled = True
            self._tell(ctx, r, Throttle())
            self._maybe_sync(ctx)  # it holds the gate no longer

    def _maybe_sync(self, ctx: Context) -> None:
        if self.sync.in_progress or self.phase not in (Phase.RUNNING, Phase.FINISHING) or self.end.saved:
            return
        if self.sync.fresh and self.groups.search is None and self.epoch >= 0 and any(
                (r := self.ranks.get(k)) is not None and r.in_run for k in self.sync.fresh):
            self._arm_sync(ctx)  # a rank in the run without the model cannot train: it takes it now
            return
        if self.sync.gate_open(self.ranks.values(), self.epoch, self.settings.batch_size):
            self._arm_sync(ctx)

    def _arm_sync(self, ctx: Context) -> None:
        alive = self.alive()
        sync = self.sync
        source = None
        if not sync.seeded and alive:
            # Before the first completed sync one rank's initialisation becomes the run's model; it is
            # named in every SyncNow until a sync completes (a rank that was blocked may have dropped
            # the one that named it first).
            if sync.source is None or sync.source not in self.roster.alive_ids():
                sync.source = alive[0].rank
                alive[0].has_model = True
                sync.fresh.discard(alive[0].rank)
            source = self.ranks[sync.source]
        elif alive and not any(r.has_model for r in alive):
            # Only ranks that joined since the last sync are left: the trained model died with
            # the others (a fresh initialisation must not take its place).
            self._save_and_shutdown(ctx, SaveReason.ALL_RANKS_LOST,
                                    f"every rank that held the run's model was lost; ranks "
                                    f"{[r.rank for r in alive]} joined since and hold none (epoch {self.epoch})")
            return
        cycle = sync.arm(ctx.now(), self.ranks.values())
        self.sync_said = SyncNow(cycle=cycle, source=None if source is None else source.rank)
        self._tell_all(ctx, self.sync_said)

    @handler
    @_phased
    def on_sync_ack(self, msg: SyncAck, ctx: Context) -> None:
        self._sync_ack(ctx, self._from_rank(ctx, msg.rank), msg)

    def _sync_ack(self, ctx: Context, r: RankState | None, msg: SyncAck) -> None:
        """``r``'s ack, told by the rank or through its relay; one told again (after its relay died)
        changes nothing: an ack is counted by cycle and by step count."""
        if r is None or not r.alive:
            return  # a dead rank's late ack finished a sync with nobody left (simulator)
        steps = self._claimed(ctx, r, msg.step_count)
        if steps and Batch in self._taken:
            _count_batch(r, None, steps)  # what it trained before its ack, a relay may still hold
        if msg.cycle and msg.cycle != self.sync.cycle:
            # A reduce that completed after a new group made its cycle start again: not an answer to
            # the cycle in progress, but what it says still holds (the rank's work up to it is in).
            self.global_step += self.sync.late_ack(r, msg.cycle, steps, msg.covered, self.ranks)
            return
        if not self.sync.in_progress:
            return
        if self.sync.ack(r, steps, msg.covered, self.roster.alive_ids()):  # a rank waiting was not asked
            self._finish_sync(ctx)

    def _settle_acks(self) -> None:
        """Count what the acks of the cycle in progress say was averaged (``SyncCadence.settle``)."""
        self.global_step += self.sync.settle(self.ranks)

    def _finish_sync(self, ctx: Context) -> None:
        now = ctx.now()
        self._settle_acks()
        self.sync.close(now)
        self._set_quotas()
        formed = self.groups.formed_again(now)
        if formed is not None:
            # The first sync on a group formed after the loss: the run is whole again.
            ranks = sorted(self.roster.alive_ids())
            seconds = round(formed, 3)
            ctx.log.warning("the group formed again", ranks=ranks, world_size=len(ranks), seconds=seconds)
            self._sink(ctx, GroupFormed(ranks=ranks, world_size=len(ranks), seconds=seconds))
        self._tell_all(ctx, SetGlobalStep(global_step=self.global_step))
        self._maybe_aggregate(ctx)
        self._maybe_finish(ctx)
        # A rank throttled while this cycle ran trains nothing until the next: with its peers idle
        # (their slices done), no report would open the gate for it (simulator, --relays seed 313).
        self._maybe_sync(ctx)

    # -- metrics and epoch advance ------------------------------------------------

    @handler
    def on_metrics(self, msg: MetricsMsg, ctx: Context) -> None:
        if self.reports.told_again(self.ranks.get(msg.rank), msg):
            return  # told again after its relay died, in whatever phase: it was counted
        if MetricsMsg not in self._taken:
            self._refuse(msg, ctx)
            return
        self._metrics(ctx, self._from_rank(ctx, msg.rank), msg)

    def _metrics(self, ctx: Context, r: RankState | None, msg: MetricsMsg, *, settle: bool = True) -> bool:
        """``r``'s report, told by the rank or through its relay; one told again (its ``seq`` taken
        already: sent again after its relay died) is not added twice.  Then whether a sync or the
        epoch's end is due, unless ``settle`` is False: a relay's report looks once, after all its
        ranks' reports (per entry, the two looks were 1.6 of 2.4 us at 10,000 ranks).  Returns
        whether the report was taken."""
        if r is None or not self.reports.take(r, msg, self.epoch):
            return False
        if msg.step_count and r.alive:
            _count_batch(r, None, self._claimed(ctx, r, msg.step_count))  # its last batches, a relay may still hold
        if settle:
            self._maybe_sync(ctx)
            self._maybe_aggregate(ctx)
        return True

    def _maybe_aggregate(self, ctx: Context) -> None:
        if self.phase is not Phase.RUNNING or self.epoch < 0 or self.end.saved or self.end.cascade is not None:
            return  # (while too few are left, nothing moves: the run ends or restarts)
        alive = self.alive()
        step = epoch_end(complete=self.reports.complete(self.epoch, alive), syncing=self.sync.in_progress,
                         unsynced=lambda: any(r.steps_since_sync for r in alive))
        if step is EpochEnd.SYNC:
            self._arm_sync(ctx)
        if step is not EpochEnd.CLOSE:
            return
        metrics = self.reports.close(self.epoch, max(self.ranks) + 1)
        # The ranks get the summary; the per-rank lists go to the metrics sink only.  Broadcast whole,
        # the aggregate is O(N) bytes to each of N ranks: at 10,000 ranks (bench scale) encoding it
        # took the coordinator 19 s of every 20 and the records held gigabytes until acknowledged.
        self._tell_all(ctx, EpochAggregated(metrics=self.reports.history[-1]))  # its summary, kept by close
        self._sink(ctx, metrics)
        if self.epoch + 1 < self.settings.num_epochs:
            self._dispatch_epoch(ctx, self.epoch + 1)
        else:
            self._move(Event.LAST_EPOCH)
            self._maybe_finish(ctx)

    # -- endings --------------------------------------------------------------------

    def _maybe_finish(self, ctx: Context) -> None:
        if self.phase is not Phase.FINISHING or self.end.saved or self.end.cascade is not None:
            return
        alive = self.alive()
        joining = [r for r in self.roster.reachable() if r.waiting]
        roles = self.roles
        evaluator = self.ranks.get(roles.eval) if roles.eval is not None else None
        step = at_the_end(syncing=self.sync.in_progress, rejoined=bool(joining),
                          without_model=lambda: any(not r.has_model for r in alive),
                          unsynced=lambda: any(r.steps_since_sync for r in alive), final_eval=self.settings.final_eval,
                          final_eval_sent=roles.final_eval_sent, final_eval_pending=roles.final_eval_pending,
                          evaluator=evaluator is not None and evaluator.alive)
        if step is Finish.TAKE_REJOINED:
            ctx.log.warning("ranks that rejoined during the last epoch take the final model", ranks=[r.rank for r in joining])
            for r in joining:
                r.waiting = False
            self._start_rendezvous(ctx, fresh=True)  # replaces a search in progress; its first sync: back here
        elif step is Finish.GIVE_MODEL:
            self._maybe_sync(ctx)  # the group's session (when one forms) or the sync's end: back here
        elif step is Finish.FINAL_SYNC:
            self._arm_sync(ctx)
        elif step is Finish.FINAL_EVAL:
            roles.final_eval_sent = True
            roles.final_eval_pending = True
            self._send_eval(ctx, self.settings.num_epochs, final=True)
        if step is not Finish.DONE:
            return
        self._move(Event.DONE)
        self.end.told_at = ctx.now()
        self.end.message = done = Shutdown()
        # a rank that rejoined during the last epoch leaves too
        self._broadcast(ctx, self.roster.reachable(), done)

    def _save_and_shutdown(self, ctx: Context, reason: SaveReason, detail: str = "") -> None:
        if self.end.saved is not None or self.phase is Phase.STOPPING:
            return  # never twice, and never after the run ended (a death during the teardown)
        self.end.saved = reason
        self.end.detail = detail
        ctx.log.error("the run cannot go on; saving and shutting down", reason=reason.value, detail=detail)
        if self.settings.save_stem:  # a file: the effects adapter writes it (nothing is written in replay)
            meta = {**self._meta(reason, ctx), "save_detail": detail}
            ctx.tell(effects_name(ctx.name), WriteMeta(path=f"{self.settings.save_stem}.meta.json",
                                                        text=json.dumps(meta, indent=2, sort_keys=True) + "\n"))
        message = ShutdownWithSave(reason=reason, detail=detail)
        self.end.message = message
        self._broadcast(ctx, self.roster.reachable(), message)
        self._sink(ctx, message)  # the user's view of the run says why it ended
        self._move(Event.CANNOT_GO_ON)
        self.end.told_at = ctx.now()

    def outcome(self) -> RunOutcome:
        """How the run ended, for a launcher's last line and exit status (read once the actor stopped)."""
        finished = sorted(r.rank for r in self.ranks.values() if r.alive and r.exited)
        return outcome_of(self.settings, len(self.reports.history), self.end.saved, self.end.detail, self.losses, finished)

    def _meta(self, reason: SaveReason, ctx: Context) -> dict[str, Any]:
        return {
            "schema": META_SCHEMA,
            "run_id": self.settings.run_id,
            "epoch": max(self.epoch, 0),
            "global_step": self.global_step,
            "sync_round": self.sync.cycle,
            "world_size_at_save": len(self.alive()),
            "save_reason": reason.value,
            "anchor": self.sync.anchor,
            "ms_per_batch": {str(r.rank): r.ms_per_batch for r in self.ranks.values()},
            "wall_time": ctx.wall(),
        }

    def effects(self, name: str) -> Actor | None:
        return CoordinatorEffects(name) if self.settings.save_stem else None
