"""The coordinator's roles (``_roles.Roles``) on their own: who runs evals, checkpoints and the
epoch callback, and when they are due."""

from __future__ import annotations

from actorwire.actors.control._ledger import FINAL_EVAL, RankState
from actorwire.actors.control._roles import Roles


def _ranks(*speeds: float, evaluates: tuple[bool, ...] | None = None) -> list[RankState]:
    ranks = []
    for r, ms in enumerate(speeds):
        state = RankState(r, f"worker/{r}", 0.0)
        state.ms_per_batch = ms
        state.evaluates = True if evaluates is None else evaluates[r]
        ranks.append(state)
    return ranks


def test_roles_go_to_the_fastest_and_evals_only_to_a_rank_that_can_run_one() -> None:
    alive = _ranks(30.0, 10.0, 20.0, evaluates=(True, False, True))
    roles = Roles(eval_every=1, checkpoint_every=1)
    roles.elect(alive)
    assert (roles.checkpoint, roles.epoch, roles.eval) == (1, 1, 2)
    assert roles.epoch_callback_news() == 1 and roles.epoch_callback_news() is None  # told once


def test_a_lost_holder_is_replaced_and_the_others_keep_theirs() -> None:
    alive = _ranks(30.0, 10.0, 20.0)
    roles = Roles(eval_every=1, checkpoint_every=1)
    roles.elect(alive)
    roles.epoch_callback_news()
    alive[1].alive = False
    assert roles.holds_a_role(1) and not roles.holds_a_role(0)
    roles.elect([r for r in alive if r.alive])
    assert (roles.checkpoint, roles.epoch, roles.eval) == (2, 2, 2)
    assert roles.epoch_callback_news() == 2  # the ranks are told the new one


def test_nobody_evaluates_when_no_rank_has_an_eval_function() -> None:
    roles = Roles(eval_every=1, checkpoint_every=0)
    roles.elect(_ranks(10.0, 20.0, evaluates=(False, False)))
    assert roles.eval is None


def test_what_is_due_at_an_epoch_start_cadence_or_asked_for_once() -> None:
    roles = Roles(eval_every=2, checkpoint_every=0)
    assert roles.due_at(0) == (False, False)  # nothing before the first epoch
    assert roles.due_at(1) == (False, False)
    assert roles.due_at(2) == (False, True)
    roles.pending_checkpoint = roles.pending_eval = True  # Intent from a rank
    roles.checkpoint_tried = {0}
    assert roles.due_at(3) == (True, True) and roles.checkpoint_tried == set()
    assert roles.due_at(3) == (False, False)  # asking is consumed


def test_a_failed_checkpoint_is_tried_once_on_each_rank() -> None:
    alive = _ranks(10.0, 20.0)
    roles = Roles(eval_every=0, checkpoint_every=1)
    roles.elect(alive)
    roles.checkpoint_tried.add(0)
    assert roles.checkpoint_failed(alive) == 1 and roles.checkpoint == 1
    roles.checkpoint_tried.add(1)
    assert roles.checkpoint_failed(alive) is None


def test_eval_ids_count_up_and_the_final_eval_has_its_own() -> None:
    roles = Roles(eval_every=1, checkpoint_every=0)
    assert [roles.eval_id(False), roles.eval_id(False), roles.eval_id(True)] == [1, 2, FINAL_EVAL]
    roles.final_eval_pending = roles.final_eval_sent = roles.pending_eval = True
    roles.restarted()
    assert not (roles.final_eval_pending or roles.final_eval_sent or roles.pending_eval)


def test_the_checkpoint_to_resume_from_is_the_one_asked_last_written_with_a_path() -> None:
    roles = Roles(eval_every=0, checkpoint_every=1)
    roles.checkpoint_asked(0, version=2, global_step=40)
    assert roles.checkpoint_tried == {0} and roles.written is None
    roles.checkpoint_done(0, version=2, path=None)  # the rank's function wrote no file
    assert roles.written is None
    roles.checkpoint_done(0, version=1, path="/ckpt/1")  # an older one answered late: not what was asked
    assert roles.written is None
    roles.checkpoint_done(1, version=2, path="/ckpt/2")
    assert roles.checkpoint == 1  # sticky: the rank that wrote one writes the next
    assert roles.written is not None
    assert (roles.written.version, roles.written.path, roles.written.global_step) == (2, "/ckpt/2", 40)


def test_an_eval_answer_is_awaited_only_from_the_rank_asked_and_only_once() -> None:
    from actorwire.messages.kinds import ExecuteEval

    roles = Roles(eval_every=1, checkpoint_every=1)
    roles.eval_asked(ExecuteEval(schedule_id=roles.eval_id(False), epoch=1, target_rank=2))
    assert roles.awaits_eval(1, 2) and not roles.awaits_eval(1, 0) and not roles.awaits_eval(2, 2)
    roles.eval_answered(1)
    assert not roles.awaits_eval(1, 2)
    final = ExecuteEval(schedule_id=roles.eval_id(True), epoch=3, target_rank=0, final=True)
    roles.eval_asked(final)
    assert not roles.awaits_eval(FINAL_EVAL, 0)  # asked, but the run does not wait for it until pending
    roles.final_eval_pending = True
    assert roles.awaits_eval(FINAL_EVAL, 0) and not roles.awaits_eval(FINAL_EVAL, 1)
    roles.eval_answered(FINAL_EVAL)
    assert not roles.final_eval_pending and not roles.awaits_eval(FINAL_EVAL, 0)


def test_a_checkpoint_answer_is_taken_from_each_rank_asked_for_that_version_once() -> None:
    roles = Roles(eval_every=1, checkpoint_every=1)
    roles.checkpoint_asked(0, 1, 90)
    roles.checkpoint_asked(1, 1, 90)  # the retry after rank 0 failed
    assert not roles.checkpoint_answered(2, 1) and not roles.checkpoint_answered(0, 2)
    assert roles.checkpoint_answered(0, 1) and not roles.checkpoint_answered(0, 1)
    assert roles.checkpoint_answered(1, 1)
    roles.checkpoint_asked(2, 2, 180)
    roles.restarted()  # nothing asked before a whole-group restart is answered after it
    assert not roles.checkpoint_answered(2, 2)
