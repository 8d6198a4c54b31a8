"""What the rank protocol (``_rank.RankProtocol``) asks its drivers to do, and what they share.

The effects are the protocol's outputs: each a frozen value a driver carries out (``Send``,
``AllReduce``, ``FormGroup``, ...), the result of one that takes time coming back to the protocol as
an input.  ``Plan`` is one epoch's work as the protocol hands it to the training loop.  The helpers
below them are what the three drivers (the Worker, the GpuWorker, the simulator) decide the same
way about what queued while their training thread was away: which group sessions and syncs are
still to serve (:func:`current`), whether a session came too late to join (:func:`late_for_group`,
:func:`session_served`).  ``_rank`` imports the effects and ``Plan`` under the same names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from actorwire.messages import Message
from actorwire.messages.kinds import (
    Checkpoint,
    ExecuteEval,
    NewNcclSession,
    Shutdown,
    ShutdownWithSave,
    SyncNow,
)

# -- effects: what the driver is asked to do ------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """Tell the coordinator ``message`` (or ``to``, the rank's relay, when it is set)."""

    message: Message
    to: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class AllReduce:
    """Average the parameters over the group, each rank's weighed by ``weight``; then call ``sync_done``."""

    cycle: int
    #: The rank's steps since its last completed sync.
    steps: int
    #: What its parameters weigh in the average: :func:`reduce_weight`.
    weight: int = 1


def reduce_weight(steps: int, holds_model: bool) -> int:
    """A rank's weight in the work-weighted average: its steps since the last completed sync, at least
    1 while it holds the run's model (one that synced just before a death still counts when the
    broken cycle is redone), and 0 while it does not (a rank that joined late or rejoined: its own
    initialisation is never averaged in; it takes the others' average)."""
    return max(1, steps) if holds_model else 0


@dataclasses.dataclass(frozen=True, slots=True)
class FormGroup:
    """Join the process group ``session`` names; then call ``group_formed``."""

    session: NewNcclSession


def late_for_group(waited: float, timeout: float | None) -> str | None:
    """Why a session that waited ``waited`` s in the inbox is not joined, or None to join it.

    Its peers began forming the group when it came and give up after ``timeout``; this rank's
    training thread was away (a long step, a frozen thread).  Past half of it, the rank says at once
    that it could not join: one that comes near the end fails the formation for every member (gloo:
    the store's rendezvous passes, then the full-mesh connect is refused as the others give up), and
    the coordinator re-forms only once every member gave up, so each late join cost a timeout more
    (the fault matrix's ``join-hang``: 67 s against 25 s)."""
    if timeout is None or waited <= timeout / 2:
        return None
    return (f"the session waited {waited:.1f} s in the inbox, past half the formation timeout ({timeout:g} s): "
            "its peers are near giving up")


def session_served(came: dict[tuple[bytes, int], float], key: tuple[bytes, int], now: float) -> float:
    """When session ``key`` (its group id and attempt) came, by a driver's table of arrivals (``now``
    if it holds none), forgetting it and every older attempt: attempts only grow, so a session older
    than one served is never served (a rank skips to the newest) and its entry would stay for ever."""
    at = came.pop(key, now)
    for old in [k for k in came if k[1] < key[1]]:
        del came[old]
    return at


@dataclasses.dataclass(frozen=True, slots=True)
class MakeGroupId:
    """Make a new group's id (host its store); then call ``group_id_made``."""

    attempt: int


@dataclasses.dataclass(frozen=True, slots=True)
class AbortGroup:
    """Abort the communicator: a collective waiting on a dead peer returns at once."""


@dataclasses.dataclass(frozen=True, slots=True)
class Evaluate:
    """Run the eval ``request`` asks for; then call ``evaluated`` with its result."""

    request: ExecuteEval


@dataclasses.dataclass(frozen=True, slots=True)
class SaveCheckpoint:
    """Write the checkpoint ``request`` asks for; then call ``checkpointed`` with its result."""

    request: Checkpoint


@dataclasses.dataclass(frozen=True, slots=True)
class RunEpochFn:
    """This rank holds the epoch callback role: run it for ``epoch``; then call ``epoch_fn_done``."""

    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class Ended:
    """The run is over for this rank: ``why`` says how; the driver leaves (``Exiting`` when clean)."""

    message: Shutdown | ShutdownWithSave
    why: str
    #: The coordinator is gone: nobody is left to say ``Exiting`` to.
    coordinator_gone: bool = False
    #: The run did not end for this rank as a finished rank's does (evicted, or the coordinator
    #: gone before the run ended): no ``Exiting``, and the driver exits non-zero.
    failed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Log:
    """Something worth a log line, at ``level`` (``"info"``, ``"warning"``, ``"error"``)."""

    level: str
    event: str
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)


Effect = Send | AllReduce | FormGroup | MakeGroupId | AbortGroup | Evaluate | SaveCheckpoint | RunEpochFn | Ended | Log


# -- plans ---------------------------------------------------------------------------------------


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
    # The cursor of ``RankProtocol.take``: the slice being trained and its next sample.
    _slice: int = dataclasses.field(default=0, repr=False, compare=False)
    _next: int = dataclasses.field(default=-1, repr=False, compare=False)

    @property
    def total(self) -> int:
        return self.size + sum(n for _, n in self.extensions)

    def slices(self) -> list[tuple[int, int]]:
        return [(self.offset, self.size), *self.extensions]


T = TypeVar("T")


def current(items: list[T], message: Callable[[T], Message] = lambda item: item) -> list[T]:  # type: ignore[assignment,return-value]
    """What a rank that was blocked (in a step, a formation, a collective) still has to serve of what
    queued meanwhile: every group session but the newest is dropped, and every ``SyncNow`` before it.

    Joining a group blocks until every member is in or the formation times out.  A rank frozen
    while the others formed group after group found one session per attempt in its inbox and
    joined each in turn, each a group the others had already given up on: it never caught up, and
    the run never finished (a rank frozen with ptrace just after its join; the simulator's hang).
    A ``SyncNow`` before the newest session was for a group that is gone: the coordinator asks
    again on the new one.
    """
    last = max((i for i, item in enumerate(items) if isinstance(message(item), NewNcclSession)), default=-1)
    if last < 0:
        return items
    return [item for i, item in enumerate(items)
            if i >= last or not isinstance(message(item), (NewNcclSession, SyncNow))]
