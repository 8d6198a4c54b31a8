"""The coordinator's record of losses (actors/control/_losses.py): plain data, no clock."""

from __future__ import annotations

from actorwire.actors.control._losses import Losses


def test_a_rank_lost_at_the_start_is_forgotten_when_a_new_incarnation_joins() -> None:
    losses = Losses()
    assert losses.lost_before_start(2, "killed by signal 9 before it joined") == "killed by signal 9 before it joined"
    assert losses.lost() == {2: "killed by signal 9 before it joined"}
    losses.joined(2, rejoin=False)
    assert losses.lost() == {} and losses.rejoined == set()


def test_a_rank_lost_while_running_is_kept_and_said_rejoined_until_it_is_lost_again() -> None:
    losses = Losses()
    losses.lost_running(1, 3, "exited with status 1")
    losses.joined(1, rejoin=True)
    assert losses.text() == "rank 1 lost in epoch 3 (exited with status 1), rejoined"
    losses.lost_running(1, 5, "unreachable")
    assert losses.rejoined == set() and losses.text() == "rank 1 lost in epoch 5 (unreachable)"


def test_the_text_lists_ranks_in_order_then_the_restarts() -> None:
    losses = Losses()
    losses.lost_running(2, 1, "killed")
    losses.lost_before_start(0, "did not join within 60 s")
    losses.restarts.append("every rank was lost in epoch 4 and started again; resumed at epoch 4")
    assert losses.text() == ("rank 0 did not join within 60 s; rank 2 lost in epoch 1 (killed); "
                             "every rank was lost in epoch 4 and started again; resumed at epoch 4")


def test_recent_deaths_are_those_within_the_window() -> None:
    losses = Losses()
    for t in (1.0, 5.0, 5.4, 5.9):
        losses.died(t)
    assert losses.recent(6.0, 1.0) == [5.0, 5.4, 5.9]
    assert losses.recent(10.0, 1.0) == []
