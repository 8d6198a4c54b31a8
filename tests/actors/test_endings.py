"""What losing ranks means for a run (actors/control/_endings.py): each rule as a unit test, no
coordinator, no clock."""

from __future__ import annotations

from typing import Any

import pytest

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
from actorwire.actors.control._ledger import CoordinatorConfig
from actorwire.messages.kinds import SaveReason


def _settings(**kw: Any) -> CoordinatorConfig:
    return CoordinatorConfig(**{"world_size": 3, "run_id": "r", "num_epochs": 2, "dataset_size": 30, **kw})


@pytest.mark.parametrize("kw, alive, failures, reason", [
    ({}, 2, 1, None),
    ({"max_failures": 1}, 2, 1, SaveReason.MAX_FAILURE_EXCEEDED),  # the first reason wins
    ({}, 0, 3, SaveReason.ALL_RANKS_LOST),
    ({"min_world_size": 3}, 2, 1, SaveReason.TOO_FEW_RANKS),  # for the whole run, not only its start
    ({"backend": "nccl"}, 1, 2, SaveReason.SINGLE_SURVIVOR),
    ({"backend": "gloo"}, 1, 2, None),  # gloo trains on alone
])
def test_why_a_run_cannot_go_on(kw: dict[str, Any], alive: int, failures: int, reason: SaveReason | None) -> None:
    assert unrecoverable(_settings(**kw), alive=alive, failures=failures) is reason


def _loss(settings: CoordinatorConfig, alive: int, recent: list[float], now: float = 10.0) -> Any:
    return after_loss(settings, rank=1, epoch=4, why="dead: status -9", alive=alive, failures=3 - alive,
                      world=3, recent=recent, now=now)


def test_the_run_goes_on_while_enough_are_left() -> None:
    assert _loss(_settings(), alive=2, recent=[10.0]) is None


def test_every_rank_lost_without_restart_wait_ends_the_run_and_says_which_ranks_and_epoch() -> None:
    verdict = _loss(_settings(), alive=0, recent=[1.0])
    assert verdict == End(SaveReason.ALL_RANKS_LOST,
                          "rank 1 lost in epoch 4 (dead: status -9); 0 rank(s) left, 3 lost in all")


def test_every_rank_lost_at_once_is_named_a_launcher_that_stopped_the_survivors() -> None:
    """torchrun's agent stops every worker when one dies: the line says how to get recovery."""
    verdict = _loss(_settings(), alive=0, recent=[9.0, 9.2, 9.6])
    assert isinstance(verdict, End) and verdict.reason is SaveReason.ALL_RANKS_LOST
    assert "all 3 ranks were lost within 1.0 s: the launcher stopped the survivors" in verdict.detail
    assert "--max-restarts N" in verdict.detail and "--restart-wait SECONDS" in verdict.detail
    assert "within" not in _loss(_settings(), alive=0, recent=[9.6]).detail  # one death alone is not that


def test_every_rank_lost_with_restart_wait_waits_for_the_launcher() -> None:
    verdict = _loss(_settings(restart_wait=30.0), alive=0, recent=[9.0, 9.2, 9.6])
    assert verdict == AwaitRestart("rank 1 lost in epoch 4 (dead: status -9); 0 rank(s) left, 3 lost in all")


@pytest.mark.parametrize("kw, alive, reason", [
    ({"backend": "nccl"}, 1, SaveReason.SINGLE_SURVIVOR),
    ({"min_world_size": 3}, 2, SaveReason.TOO_FEW_RANKS),
])
def test_too_few_left_with_restart_wait_is_watched_before_the_run_ends(kw: dict[str, Any], alive: int,
                                                                       reason: SaveReason) -> None:
    """The rest may be about to go (a whole-group restart): the coordinator decides CASCADE_S later."""
    verdict = _loss(_settings(restart_wait=30.0, **kw), alive=alive, recent=[10.0])
    assert isinstance(verdict, WatchCascade) and verdict.reason is reason
    assert isinstance(_loss(_settings(**kw), alive=alive, recent=[10.0]), End)  # no restart_wait: at once


def test_too_many_failures_end_the_run_even_with_restart_wait() -> None:
    verdict = _loss(_settings(restart_wait=30.0, max_failures=1), alive=2, recent=[10.0])
    assert isinstance(verdict, End) and verdict.reason is SaveReason.MAX_FAILURE_EXCEEDED


def test_the_restarted_ranks_resume_once_all_are_back() -> None:
    assert after_restart_wait(_settings(restart_wait=30.0), back=["a", "b", "c"], ranks=[0, 1, 2], epoch=4,
                              waited=1.0) == Resume(["a", "b", "c"])
    assert after_restart_wait(_settings(restart_wait=30.0), back=["a", "b"], ranks=[0, 1], epoch=4,
                              waited=29.9) is None


def test_at_restart_wait_those_back_resume_if_they_are_enough() -> None:
    settings = _settings(restart_wait=30.0, min_world_size=2)
    assert after_restart_wait(settings, back=["a", "b"], ranks=[0, 1], epoch=4, waited=30.0) == Resume(["a", "b"])
    verdict = after_restart_wait(settings, back=["a"], ranks=[0], epoch=4, waited=30.0)
    assert verdict == End(SaveReason.ALL_RANKS_LOST, "every rank was lost in epoch 4 and 1 of 3 came back within "
                                                     "restart_wait 30 s (min_world_size 2)")


def test_a_lone_rank_back_is_no_nccl_group() -> None:
    verdict = after_restart_wait(_settings(restart_wait=30.0, backend="nccl"), back=["b"], ranks=[1], epoch=4,
                                 waited=31.0)
    assert verdict == End(SaveReason.SINGLE_SURVIVOR, "every rank was lost in epoch 4 and only rank 1 came back "
                                                      "within restart_wait 30 s: an NCCL group needs two")
    # gloo trains on with one
    assert after_restart_wait(_settings(restart_wait=30.0), back=["b"], ranks=[1], epoch=4,
                              waited=31.0) == Resume(["b"])


def _start(settings: CoordinatorConfig, alive: int, waiting: int, since: float | None = None,
           now: float = 100.0) -> Any:
    return before_start(settings, alive=alive, waiting=waiting, lost={2: "exited before it joined"},
                        restart_since=since, now=now)


def test_the_run_begins_once_every_rank_joined_or_was_lost_and_waits_while_enough_may_come() -> None:
    assert _start(_settings(), alive=3, waiting=0) is Start.BEGIN
    assert _start(_settings(), alive=2, waiting=0) is Start.BEGIN  # rank 2 lost before the start: left out
    assert _start(_settings(), alive=1, waiting=1) is Start.WAIT_FOR_JOINS
    assert isinstance(_start(_settings(), alive=0, waiting=0), End)  # nobody to start with


def test_too_few_ever_to_start_ends_the_run_and_names_the_ranks_lost() -> None:
    verdict = _start(_settings(min_world_size=3), alive=1, waiting=1)
    assert verdict == End(SaveReason.TOO_FEW_RANKS, "rank 2 exited before it joined; 1 of 3 ranks joined and 1 may "
                                                    "still, fewer than min_world_size 3 (phase joining)")


def test_too_few_before_the_start_with_restart_wait_waits_for_the_launcher_until_the_wait_ends() -> None:
    settings = _settings(min_world_size=3, restart_wait=30.0)
    assert _start(settings, alive=1, waiting=1) is Start.WAIT_FOR_LAUNCHER  # the wait starts now
    assert _start(settings, alive=1, waiting=1, since=90.0) is Start.HOLD  # a restart is under way
    assert isinstance(_start(settings, alive=1, waiting=1, since=60.0), End)  # waited 40 s of 30


def test_a_restart_under_way_holds_the_start_until_every_rank_is_back() -> None:
    settings = _settings(restart_wait=30.0)
    assert _start(settings, alive=2, waiting=0, since=90.0) is Start.HOLD
    assert _start(settings, alive=3, waiting=0, since=90.0) is Start.BEGIN
    assert _start(settings, alive=2, waiting=0, since=60.0) is Start.BEGIN  # at the wait's end, with those back


def test_a_watched_end_is_decided_cascade_s_after_the_first_death_that_left_too_few() -> None:
    end = RunEnd()
    first = WatchCascade(SaveReason.TOO_FEW_RANKS, "rank 1 lost")
    assert end.watch(first, now=10.0)
    assert not end.watch(WatchCascade(SaveReason.TOO_FEW_RANKS, "rank 2 lost"), now=12.0)  # its clock runs on
    assert end.watched_out(10.0 + CASCADE_S - 0.1) is None and end.cascade is first
    assert end.watched_out(10.0 + CASCADE_S) is first
    assert end.cascade is None and end.watched_out(100.0) is None  # taken once


def test_nothing_is_watched_out_of_an_end_that_is_not_watched() -> None:
    end = RunEnd()
    assert end.watched_out(1e9) is None and end.saved is None and end.message is None


def test_an_epoch_ends_only_once_every_rank_reported_no_sync_is_open_and_every_step_is_in_the_model() -> None:
    asked: list[str] = []

    def unsynced(answer: bool) -> Any:
        return lambda: asked.append("unsynced") or answer

    assert epoch_end(complete=False, syncing=False, unsynced=unsynced(False)) is EpochEnd.WAIT
    assert epoch_end(complete=True, syncing=True, unsynced=unsynced(True)) is EpochEnd.WAIT  # its end comes back
    assert asked == []  # the pass over the ranks is not made while the answer cannot matter
    assert epoch_end(complete=True, syncing=False, unsynced=unsynced(True)) is EpochEnd.SYNC
    assert epoch_end(complete=True, syncing=False, unsynced=unsynced(False)) is EpochEnd.CLOSE


_END = ("syncing", "rejoined", "without_model", "unsynced", "final_eval", "final_eval_sent",
        "final_eval_pending", "evaluator")


def test_a_run_is_done_only_when_every_rank_holds_one_model_with_every_step_in_it() -> None:
    """Every combination of what the coordinator knows at the end.  DONE (the ranks are told to stop
    and write their models) never while a sync is open, a rank holds steps no sync took, a rank does
    not hold the run's model, ranks that rejoined in the last epoch were not taken in (also while a
    group forms: the run ended with them waiting), or a final eval that can be asked was not answered.  And the end never stalls: it waits
    only for what comes back by itself (a sync's acks, the final eval's answer)."""
    for bits in range(2 ** len(_END)):
        s = {name: bool(bits >> i & 1) for i, name in enumerate(_END)}
        without_model, unsynced = s["without_model"], s["unsynced"]
        step = at_the_end(**{**s, "without_model": without_model.__bool__, "unsynced": unsynced.__bool__})
        if step is Finish.DONE:
            assert not (s["syncing"] or s["unsynced"] or s["without_model"] or s["final_eval_pending"]), s
            assert not s["rejoined"], s
            assert not (s["final_eval"] and s["evaluator"] and not s["final_eval_sent"]), s
        if step is Finish.WAIT:
            assert s["syncing"] or s["final_eval_pending"], s
        if step is Finish.FINAL_EVAL:
            assert s["evaluator"] and not s["final_eval_sent"], s
