"""What losing ranks means for a run, as decisions on the coordinator's counts and settings.

After a death the run goes on with the survivors, or it cannot: too many failures, too few ranks
(``min_world_size`` holds for the whole run), a lone NCCL survivor, or none.  Launchers differ in what
comes next.  torchrun's agent stops every worker when one dies and, with ``--max-restarts``, starts
them all again: with ``restart_wait`` the coordinator waits for the new incarnations instead of
ending the run, and a death that leaves too few is first watched for ``CASCADE_S`` (if the others go
too it is such a restart, not the end).  Once every rank was lost, the restarted ranks resume the
run when all are back, or at ``restart_wait`` with those back if they are enough.

Before the start, a rank lost while the others join is left out, and the run starts with those that
joined once no more may come, unless fewer than ``min_world_size`` ever can: then, with
``restart_wait``, the launcher may be starting them all again (they simply join again), else the run
ends.

An epoch ends (:func:`epoch_end`) and the run finishes (:func:`at_the_end`) only once every step
trained is in every live rank's model: the final consensus sync is never skipped, and a rank that
rejoined in the last epoch takes the final model before it is told to stop.

These are pure functions (no messages, no clock reads: ``now`` comes in), so each rule is a unit
test (tests/actors/test_endings.py); the coordinator carries the verdicts out.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from actorwire.actors.control._ledger import CoordinatorConfig
from actorwire.messages.kinds import SaveReason, Shutdown, ShutdownWithSave

CASCADE_S = 5.0  # every rank lost within this long: a launcher stopped them, not deaths of their own

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class AwaitRestart:
    """Every rank is lost and the launcher may start them again: wait ``restart_wait`` for them."""

    detail: str


@dataclasses.dataclass(frozen=True)
class WatchCascade:
    """Too few ranks left, but the rest may be about to go (a launcher restarting the whole group):
    decide ``CASCADE_S`` after the first such death."""

    reason: SaveReason
    detail: str


@dataclasses.dataclass(frozen=True)
class End:
    """The run cannot go on: save and shut down with ``reason``."""

    reason: SaveReason
    detail: str


@dataclasses.dataclass(frozen=True)
class Resume(Generic[T]):
    """The restarted ranks ``back`` take the run up again."""

    back: list[T]


class Start(enum.Enum):
    """What the joins so far mean for the start (:func:`before_start`)."""

    BEGIN = "begin"  # every rank joined or was lost, and enough joined
    WAIT_FOR_JOINS = "wait for joins"  # enough may still come
    WAIT_FOR_LAUNCHER = "wait for the launcher"  # too few can come now: wait restart_wait for a restart
    HOLD = "hold"  # a restart is under way: the run starts once all are back (or at the wait's end)


def before_start(settings: CoordinatorConfig, *, alive: int, waiting: int, lost: Mapping[int, str],
                 restart_since: float | None, now: float) -> Start | End:
    """``alive`` ranks joined and ``waiting`` may still; ``lost`` the ranks lost before the start
    and why; ``restart_since`` when the wait for a launcher's restart began (None: not waiting)."""
    restarting = settings.restart_wait > 0 and restart_since is not None and now - restart_since < settings.restart_wait
    if restarting and alive < settings.world_size:
        return Start.HOLD
    if alive + waiting < settings.min_world_size:
        if settings.restart_wait > 0 and (restart_since is None or now - restart_since < settings.restart_wait):
            # A launcher that stops every worker when one dies (torchrun) starts them all again:
            # before the run started, they simply join again.  Waited for up to restart_wait.
            return Start.WAIT_FOR_LAUNCHER
        why = "; ".join(f"rank {k} {reason}" for k, reason in sorted(lost.items()))
        return End(SaveReason.TOO_FEW_RANKS,
                   f"{why}; {alive} of {settings.world_size} ranks joined and {waiting} may still, "
                   f"fewer than min_world_size {settings.min_world_size} (phase joining)")
    if waiting == 0 and alive:
        return Start.BEGIN
    return Start.WAIT_FOR_JOINS


class EpochEnd(enum.Enum):
    """What the epoch's end waits for once every rank reported it (:func:`epoch_end`)."""

    WAIT = "wait"  # a rank has not reported, or a sync is closing: its end comes back here
    SYNC = "sync"  # a rank trained steps that are not in every rank's model yet: a sync first
    CLOSE = "close"  # the epoch is in every rank's model: its aggregate goes out


def epoch_end(*, complete: bool, syncing: bool, unsynced: Callable[[], bool]) -> EpochEnd:
    """``complete``: every live rank reported the epoch, with no dead rank's remainder left to
    train; ``syncing``: a sync cycle is open; ``unsynced()``: a live rank holds steps no sync took
    (a pass over the ranks, asked only when the answer matters: this runs at every report)."""
    if not complete or syncing:
        return EpochEnd.WAIT
    if unsynced():
        return EpochEnd.SYNC  # an epoch is over when it is in every rank's model, not before
    return EpochEnd.CLOSE


class Finish(enum.Enum):
    """What stands between the last epoch's aggregate and the run's end (:func:`at_the_end`)."""

    WAIT = "wait"  # a sync's acks, or the final eval's answer
    TAKE_REJOINED = "take the rejoined"  # ranks that rejoined in the last epoch join the group first
    GIVE_MODEL = "give the model"  # a rank that does not hold the run's model takes it in a sync
    FINAL_SYNC = "final sync"  # a rank holds steps no sync took: one final consensus reduce
    FINAL_EVAL = "final eval"  # asked of the eval rank; its answer comes back here
    DONE = "done"  # every rank holds the same model, every step in it: the ranks are told to stop


def at_the_end(*, syncing: bool, rejoined: bool, without_model: Callable[[], bool],
               unsynced: Callable[[], bool], final_eval: bool, final_eval_sent: bool, final_eval_pending: bool,
               evaluator: bool) -> Finish:
    """The next step to the run's end after its last epoch.  ``rejoined``: ranks rejoined during the
    last epoch wait for a share; ``without_model()``: a live rank does not hold the run's model;
    ``unsynced()``: a live rank holds steps no sync took (each a pass over the ranks, asked in this
    order only when the answer matters); ``final_eval``: the run asks for a final eval;
    ``evaluator``: the eval rank lives."""
    if syncing:
        return Finish.WAIT  # the last sync must be acknowledged by every live rank first
    if rejoined:
        # They must not end the run with their own initialisation: they join the group, and its
        # first sync gives them the final model.  Also while a group forms (a fresh search replaces
        # it, as at an epoch's start): the run ended with them waiting, holding no model.
        return Finish.TAKE_REJOINED
    if without_model():
        return Finish.GIVE_MODEL
    if unsynced():
        return Finish.FINAL_SYNC
    if final_eval and not final_eval_pending and not final_eval_sent and evaluator:
        return Finish.FINAL_EVAL
    if final_eval_pending:
        return Finish.WAIT
    return Finish.DONE


def unrecoverable(settings: CoordinatorConfig, *, alive: int, failures: int) -> SaveReason | None:
    """Why the run cannot go on with ``alive`` ranks after ``failures`` losses, or None."""
    if failures >= settings.max_failures:
        return SaveReason.MAX_FAILURE_EXCEEDED
    if alive == 0:
        return SaveReason.ALL_RANKS_LOST
    if alive < settings.min_world_size:
        return SaveReason.TOO_FEW_RANKS  # min_world_size holds for the whole run, not only its start
    if settings.backend == "nccl" and alive < 2:
        return SaveReason.SINGLE_SURVIVOR
    return None


def after_loss(settings: CoordinatorConfig, *, rank: int, epoch: int, why: str, alive: int, failures: int,
               world: int, recent: Sequence[float], now: float) -> AwaitRestart | WatchCascade | End | None:
    """What the loss of ``rank`` in ``epoch`` means, ``alive`` ranks left of the ``world`` that ran,
    ``failures`` lost in all, ``recent`` the times of the deaths within ``CASCADE_S``: None to go on."""
    reason = unrecoverable(settings, alive=alive, failures=failures)
    if reason is None:
        return None
    detail = (f"rank {rank} lost in epoch {epoch} ({why}); {alive} rank(s) left, "
              f"{failures} lost in all")
    if reason is SaveReason.ALL_RANKS_LOST and settings.restart_wait > 0:
        return AwaitRestart(detail)
    if settings.restart_wait > 0 and reason in (SaveReason.SINGLE_SURVIVOR, SaveReason.TOO_FEW_RANKS):
        # Too few left to go on, but a launcher that restarts the whole group stops the rest
        # within a second (torchrun's agent): if they all go, it is a restart, not the end.
        # Decided CASCADE_S after the first such death (a lone NCCL survivor saved at once,
        # and the restarted group found the run over: the simulator with --torchrun).
        return WatchCascade(reason, detail)
    if reason is SaveReason.ALL_RANKS_LOST and len(recent) >= 2 and len(recent) == world:
        # Every rank within seconds of the first: not deaths of their own but a launcher that
        # stops every worker when one dies (torchrun's agent does): no survivor to go on with.
        detail += (f"; all {len(recent)} ranks were lost within {now - recent[0]:.1f} s: the launcher "
                   f"stopped the survivors (torchrun's agent stops every worker when one dies); to recover, "
                   f"run torchrun with --max-restarts N and the coordinator with --restart-wait SECONDS "
                   f"and --checkpoint-every 1, or launch with srun, ssh or ActorSystem.launch "
                   f"(docs/multinode.md)")
    return End(reason, detail)


def after_restart_wait(settings: CoordinatorConfig, *, back: list[T], ranks: Sequence[int], epoch: int,
                       waited: float) -> Resume[T] | End | None:
    """Every rank was lost in ``epoch``; ``back`` (their ranks ``ranks``) came back after ``waited``
    seconds: resume once all are back, or at ``restart_wait`` with those back if they are enough;
    None to wait on."""
    if len(back) >= settings.world_size:
        return Resume(back)
    if waited < settings.restart_wait:
        return None
    if back and len(back) < 2 and settings.backend == "nccl" and settings.world_size > 1:
        # NCCL forms no group of one: a lone rank back would train on alone (simulator
        # --torchrun seed 11398: a restarted rank died again, one came back in time).
        return End(SaveReason.SINGLE_SURVIVOR,
                   f"every rank was lost in epoch {epoch} and only rank {ranks[0]} came back within "
                   f"restart_wait {settings.restart_wait:g} s: an NCCL group needs two")
    if back and len(back) >= settings.min_world_size:
        return Resume(back)
    return End(SaveReason.ALL_RANKS_LOST,
               f"every rank was lost in epoch {epoch} and {len(back)} of {settings.world_size} came back "
               f"within restart_wait {settings.restart_wait:g} s (min_world_size {settings.min_world_size})")


@dataclasses.dataclass(eq=False)
class RunEnd:
    """What the coordinator carries between the verdicts above: how far the run is from its end."""

    #: The run cannot go on, and why (None while it can, and after it finished every epoch).
    saved: SaveReason | None = None
    detail: str = ""
    #: What the ranks were told at the end (``Shutdown`` or ``ShutdownWithSave``), and when.
    message: Shutdown | ShutdownWithSave | None = None
    told_at: float | None = None
    #: Too few ranks left while the launcher may be restarting them all (``WatchCascade``): the end
    #: this would be, decided ``CASCADE_S`` after ``cascade_since``.  Nothing moves meanwhile.
    cascade: WatchCascade | None = None
    cascade_since: float = 0.0
    #: Since when the run waits for the launcher to start its ranks again (every rank lost, or too
    #: few joined before the start, with ``restart_wait``).
    restart_since: float | None = None

    def watch(self, verdict: WatchCascade, now: float) -> bool:
        """Watch for a whole-group restart; False when one is watched already (its clock runs on)."""
        if self.cascade is not None:
            return False
        self.cascade, self.cascade_since = verdict, now
        return True

    def watched_out(self, now: float) -> WatchCascade | None:
        """The watched end, once ``CASCADE_S`` passed without every rank going: it is taken."""
        if self.cascade is None or now - self.cascade_since < CASCADE_S:
            return None
        verdict, self.cascade = self.cascade, None
        return verdict
