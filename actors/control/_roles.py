"""Which rank runs the evals, the checkpoints and the epoch callback, and when they are due: the
coordinator's roles as a machine of their own (no I/O; the coordinator sends what it decides).

Roles go to the fastest ranks in the run (evals only to a rank with an eval function), are elected
again when a holder is lost, and a checkpoint that failed is retried once on each rank not yet
tried.  The last checkpoint written (with the global step its model holds) is what a whole-group
restart resumes from.  Tests: tests/actors/test_roles.py.
"""

from __future__ import annotations

import dataclasses

from actorwire.actors.control._ledger import FINAL_EVAL, RankState, by_speed
from actorwire.actors.control._outcome import Checkpointed
from actorwire.messages.kinds import ExecuteEval


@dataclasses.dataclass(eq=False)
class Roles:
    eval_every: int
    checkpoint_every: int
    #: The ranks that hold each role (None: nobody can).
    eval: int | None = None
    checkpoint: int | None = None
    epoch: int | None = None
    #: The epoch-callback role changed since the ranks were last told.
    dirty: bool = True
    #: A rank asked for an eval or a checkpoint (``Intent``): done at the next epoch's start.
    pending_eval: bool = False
    pending_checkpoint: bool = False
    #: Ranks the checkpoint in progress was sent to.
    checkpoint_tried: set[int] = dataclasses.field(default_factory=set)
    eval_schedule: int = 0
    #: The run's final eval is out and not answered; it was sent (once per run).
    final_eval_pending: bool = False
    final_eval_sent: bool = False
    #: The final eval as it was asked (told again to its rank when the relay it went through died).
    final_eval_said: ExecuteEval | None = None
    #: The periodic evals out and not answered: the rank each was asked of, by ``schedule_id``.
    evals_out: dict[int, int] = dataclasses.field(default_factory=dict)
    #: The checkpoints out and not answered, as (version, rank): an answer is taken only from a rank
    #: asked for that version (the path of a written one is what a restarted group loads).
    checkpoints_out: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    #: The checkpoint asked last: its version and the global step its model holds (it is asked
    #: before the epoch's plans, so the model it saves is the one every rank holds then).
    asked: tuple[int, int] | None = None
    #: The last checkpoint written (with a path): what a restarted group resumes from.
    written: Checkpointed | None = None

    def elect(self, alive: list[RankState], force: bool = False) -> None:
        """Give each role whose holder is not in ``alive`` (every role, with ``force``) to the fastest."""
        if not alive:
            return
        fastest = by_speed(alive)[0].rank
        live = {r.rank for r in alive}
        if force or self.checkpoint not in live:
            self.checkpoint = fastest
        if force or self.epoch not in live:
            self.epoch = fastest
        # Evals go only to a rank that has an eval function (none asked when no rank has one: every
        # epoch would log "eval failed ... no eval function given" with the defaults).
        evaluators = [r for r in by_speed(alive) if r.evaluates]
        if force or self.eval not in {r.rank for r in evaluators}:
            self.eval = evaluators[0].rank if evaluators else None
        self.dirty = True

    def holds_a_role(self, rank: int) -> bool:
        return rank in (self.eval, self.checkpoint, self.epoch)

    def epoch_callback_news(self) -> int | None:
        """The epoch-callback rank to tell every rank, once after it changed (else None)."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.epoch or 0

    def due_at(self, epoch: int) -> tuple[bool, bool]:
        """At the start of ``epoch``: whether a checkpoint, and whether an eval, is due (asked for,
        or on the configured cadence); asking is consumed."""
        checkpoint = epoch > 0 and (self.pending_checkpoint or bool(self.checkpoint_every and epoch % self.checkpoint_every == 0))
        if checkpoint:
            self.pending_checkpoint = False
            self.checkpoint_tried = set()
        evaluate = epoch > 0 and (self.pending_eval or bool(self.eval_every and epoch % self.eval_every == 0))
        if evaluate:
            self.pending_eval = False
        return checkpoint, evaluate

    def eval_id(self, final: bool) -> int:
        """The next eval's ``schedule_id`` (the final eval has its own)."""
        self.eval_schedule += 1
        return FINAL_EVAL if final else self.eval_schedule

    def eval_asked(self, said: ExecuteEval) -> None:
        if said.final:
            self.final_eval_said = said
        else:
            self.evals_out[said.schedule_id] = said.target_rank

    def awaits_eval(self, schedule_id: int, rank: int) -> bool:
        """``rank`` was asked for eval ``schedule_id`` and its answer is awaited.  The final eval's
        rank is the one named in the awaited ``ExecuteEval``: the eval role may have moved since
        (every role moves when the holder of one dies)."""
        if schedule_id == FINAL_EVAL:
            said = self.final_eval_said
            return self.final_eval_pending and said is not None and said.target_rank == rank
        return self.evals_out.get(schedule_id) == rank

    def eval_answered(self, schedule_id: int) -> None:
        if schedule_id == FINAL_EVAL:
            self.final_eval_pending = False
        else:
            self.evals_out.pop(schedule_id, None)

    def checkpoint_asked(self, rank: int, version: int, global_step: int) -> None:
        self.checkpoint_tried.add(rank)
        self.checkpoints_out.add((version, rank))
        self.asked = (version, global_step)

    def checkpoint_answered(self, rank: int, version: int) -> bool:
        """Whether ``rank`` was asked for checkpoint ``version`` and had not answered (now it has)."""
        if (version, rank) not in self.checkpoints_out:
            return False
        self.checkpoints_out.discard((version, rank))
        return True

    def checkpoint_done(self, rank: int, version: int, path: str | None) -> None:
        """``rank`` wrote checkpoint ``version`` (to ``path``; None: the rank's function wrote no
        file): kept as the one to resume from when it is the one asked last."""
        self.checkpoint = rank  # sticky: the rank that wrote one writes the next
        if path and self.asked is not None and self.asked[0] == version:
            self.written = Checkpointed(version=version, path=path, global_step=self.asked[1])

    def checkpoint_failed(self, alive: list[RankState]) -> int | None:
        """The rank to try the failed checkpoint on next (it takes the role), or None when every
        rank in the run was tried."""
        untried = [r for r in alive if r.rank not in self.checkpoint_tried]
        if not untried:
            return None
        self.checkpoint = untried[0].rank
        return self.checkpoint

    def restarted(self) -> None:
        """A whole-group restart: nothing asked for or out survives it."""
        self.pending_eval = self.pending_checkpoint = self.final_eval_pending = False
        self.final_eval_sent = False
        self.evals_out.clear()
        self.checkpoints_out.clear()
