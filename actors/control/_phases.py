"""The coordinator's phases as data: which events move it, and which messages each phase takes.

h11's ``_state.py`` is the model.  The :class:`~._coordinator.Coordinator` never
assigns a phase; it calls :func:`next_phase` with an :class:`Event`, and a move
the table does not hold raises :class:`BadTransition` (a bug, never a peer's
doing).  Before any handler runs, :func:`accepts` decides whether the message
belongs in the current phase; one that does not is refused, named with its
phase and rank, and changes nothing.  ``docs/control-plane.md`` shows the
diagram :func:`diagram` draws from this table (a test compares the two).
"""

from __future__ import annotations

import enum

from actorwire.messages import ActorwireError, Message
from actorwire.messages.kinds import (
    Batch,
    CheckpointResult,
    Down,
    EpochFnElapsed,
    EvalResult,
    Exiting,
    Heartbeat,
    Intent,
    JoinRequest,
    LrUpdate,
    MetricsMsg,
    NewNcclIdGenerated,
    RankExited,
    RelayReport,
    SessionFailed,
    SyncAck,
    TimerFired,
)


class Phase(str, enum.Enum):
    """Where the run is.  A ``str`` so that logs and the saved meta read as before."""

    JOINING = "joining"
    RUNNING = "running"
    FINISHING = "finishing"
    #: Every rank was lost and ``restart_wait`` is set: waiting for the launcher to start them again
    #: (torchrun's ``--max-restarts``); they resume from the last checkpoint.
    RESTARTING = "restarting"
    STOPPING = "stopping"

    def __str__(self) -> str:
        return self.value


class Event(enum.Enum):
    """What moves the coordinator to another phase."""

    ALL_IN = "every rank joined or was lost, min_world_size left"
    LAST_EPOCH = "last epoch aggregated"
    DONE = "last sync acked, final eval in"
    ALL_LOST = "every rank lost, restart_wait set"
    RESUMED = "the restarted ranks joined"
    CANNOT_GO_ON = "unrecoverable: ShutdownWithSave"


class BadTransition(ActorwireError, RuntimeError):
    """The coordinator tried a move its table does not hold: a bug in the coordinator."""


TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (Phase.JOINING, Event.ALL_IN): Phase.RUNNING,
    (Phase.JOINING, Event.CANNOT_GO_ON): Phase.STOPPING,
    (Phase.RUNNING, Event.LAST_EPOCH): Phase.FINISHING,
    (Phase.RUNNING, Event.CANNOT_GO_ON): Phase.STOPPING,
    (Phase.FINISHING, Event.DONE): Phase.STOPPING,
    (Phase.FINISHING, Event.CANNOT_GO_ON): Phase.STOPPING,
    (Phase.RUNNING, Event.ALL_LOST): Phase.RESTARTING,
    (Phase.FINISHING, Event.ALL_LOST): Phase.RESTARTING,
    (Phase.RESTARTING, Event.RESUMED): Phase.RUNNING,
    (Phase.RESTARTING, Event.CANNOT_GO_ON): Phase.STOPPING,
}

#: Taken in every phase: liveness, joins (a late one is answered with the reason), clean exits. A
#: relay's report carries heartbeats (always taken) and batches (taken where ``Batch`` is).
_ALWAYS: frozenset[type[Message]] = frozenset({TimerFired, Down, RankExited, Heartbeat, Exiting, JoinRequest,
                                               RelayReport})

#: What each phase takes besides :data:`_ALWAYS`.
ACCEPTED: dict[Phase, frozenset[type[Message]]] = {
    # No plan is out: a batch, a sync or an epoch report cannot be true yet. An intent waits for
    # the first epoch boundary.
    Phase.JOINING: _ALWAYS | {Intent},
    Phase.RUNNING: _ALWAYS | {Batch, LrUpdate, Intent, EpochFnElapsed, EvalResult, CheckpointResult, SyncAck,
                              MetricsMsg, SessionFailed, NewNcclIdGenerated},
    # Every epoch is aggregated: what is left is the final sync (and a group re-formed for it),
    # the final eval, and a checkpoint sent at the last epoch boundary.
    Phase.FINISHING: _ALWAYS | {SyncAck, EvalResult, CheckpointResult, SessionFailed, NewNcclIdGenerated},
    # No rank is left: only joins (the new incarnations) and liveness; a late report of the lost
    # ranks changes nothing.
    Phase.RESTARTING: _ALWAYS,
    # Shutdown is sent: reports still in flight are expected, and change nothing.
    Phase.STOPPING: _ALWAYS,
}


def next_phase(phase: Phase, event: Event) -> Phase:
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise BadTransition(f"no move from phase {phase.value} on {event.name}") from None


def accepts(phase: Phase, kind: type[Message]) -> bool:
    return kind in ACCEPTED[phase]


def diagram() -> str:
    """The transition table as a Mermaid state diagram, then what each phase takes."""
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {Phase.JOINING.value}"]
    for (source, event), target in TRANSITIONS.items():
        lines.append(f"    {source.value} --> {target.value}: {event.value}")
    lines += [f"    {Phase.STOPPING.value} --> [*]: every rank Exiting, or exit_grace", "```", ""]
    always = ", ".join(sorted(k.__name__ for k in _ALWAYS))
    lines.append(f"Every phase takes {always}. Besides those:")
    lines.append("")
    for phase in Phase:
        extra = sorted(k.__name__ for k in ACCEPTED[phase] - _ALWAYS)
        lines.append(f"- `{phase.value}`: {', '.join(extra) if extra else 'nothing else'}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m actorwire.actors.control._phases > the docs' block
    print(diagram(), end="")
