"""How a run ended, as data: what every launch path prints and exits with, and the checkpoint a run
can resume from.  ``outcome_of`` reads the coordinator's final state; nothing here sends or writes
but :class:`CoordinatorEffects`, the adapter that writes the save metadata the coordinator asks for.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from actorwire.actors.control._ledger import CoordinatorConfig
from actorwire.actors.control._losses import Losses
from actorwire.actors.runtime._actor import EffectsAdapter, handler
from actorwire.actors.runtime._context import Context
from actorwire.messages.kinds import SaveReason, WriteMeta


@dataclasses.dataclass(frozen=True)
class Checkpointed:
    """A checkpoint the run can resume from: ``version`` is the epoch it resumes at (the model after
    every epoch before it), ``global_step`` the steps that model holds."""

    version: int
    path: str
    global_step: int


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """How a run ended (``Coordinator.outcome()``): every launch path prints ``line`` and exits
    ``exit_code``: 0 when every epoch was trained, with or without recovered deaths; 1 otherwise."""

    complete: bool
    epochs: int
    lost: dict[int, str]
    finished: list[int]
    line: str
    num_epochs: int = 0
    world_size: int = 0
    #: ``completed``, the save reason (``too_few_ranks``, ``all_ranks_lost``, ...), or ``stopped``.
    reason: str = ""
    detail: str = ""
    rejoined: list[int] = dataclasses.field(default_factory=list)
    restarts: list[str] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.complete else 1

    def summary(self) -> dict[str, Any]:
        """The outcome as JSON-able data (``--summary PATH``; docs/control-plane.md, "How a run ends")."""
        return {"schema": "actorwire.run_summary/1", "complete": self.complete, "exit_code": self.exit_code,
                "reason": self.reason, "detail": self.detail, "epochs_trained": self.epochs,
                "num_epochs": self.num_epochs, "world_size": self.world_size,
                "lost": {str(rank): why for rank, why in sorted(self.lost.items())},
                "recovered": self.complete and bool(self.lost), "rejoined": self.rejoined,
                "restarts": self.restarts, "finished": self.finished, "line": self.line}


def outcome_of(c: CoordinatorConfig, trained: int, saved: SaveReason | None, saved_detail: str, losses: Losses,
               finished: list[int]) -> RunOutcome:
    """The outcome of a run that trained ``trained`` epochs, ended by ``saved`` (None: it was not
    ended by a save, so it completed or was stopped), with ``losses`` on record and ``finished`` the
    ranks that finished with the final model."""
    complete = saved is None and trained == c.num_epochs
    lost = losses.lost()
    text = losses.text()
    if complete and not lost:
        line = (f"run ended cleanly: every epoch trained ({trained}/{c.num_epochs}); "
                f"{len(finished)} of {c.world_size} ranks finished with the final model")
    elif complete:
        line = (f"run ended: every epoch trained ({trained}/{c.num_epochs}), recovered from {len(lost)} lost "
                f"rank(s) ({text}); {len(finished)} of {c.world_size} ranks finished with the final model")
    else:
        why = f"{saved.value}: {saved_detail}" if saved is not None else "it was stopped"
        line = (f"run did not finish: {trained} of {c.num_epochs} epochs trained ({why})"
                + (f"; lost: {text}" if text else ""))
    reason = "completed" if complete else (saved.value if saved is not None else "stopped")
    return RunOutcome(complete=complete, epochs=trained, lost=lost, finished=finished, line=line,
                      num_epochs=c.num_epochs, world_size=c.world_size, reason=reason,
                      detail=saved_detail if saved is not None else "",
                      rejoined=sorted(losses.rejoined), restarts=list(losses.restarts))


class CoordinatorEffects(EffectsAdapter):
    """The coordinator's file effects: the save metadata it asks for, written from its owner only."""

    @handler
    def on_write(self, msg: WriteMeta, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        try:
            path = pathlib.Path(msg.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(msg.text)
        except OSError as exc:
            ctx.log.error("could not write the run's save metadata", path=msg.path, error=str(exc))
