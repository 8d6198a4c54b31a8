"""The coordinator's roster (actors/control/_roster.py): ranks by number and name, who is in the run."""

from __future__ import annotations

from actorwire.actors.control._ledger import RankState
from actorwire.actors.control._roster import Roster


def _roster(n: int) -> tuple[Roster, list[str]]:
    calls: list[str] = []
    roster = Roster(lambda: calls.append("recheck"))
    for rank in reversed(range(n)):  # joins in any order: the lists are by number
        roster.add(RankState(rank, f"worker/{rank}", 0.0))
    return roster, calls


def test_ranks_are_found_by_name_and_listed_by_number() -> None:
    roster, calls = _roster(3)
    assert [r.rank for r in roster.alive()] == [0, 1, 2] and roster.alive_ids() == {0, 1, 2}
    assert roster.in_run == 3 and len(calls) == 3  # each join rechecks what depends on the run
    assert roster.of("worker/1") is roster.ranks[1] and roster.of("nobody") is None


def test_a_rank_that_dies_leaves_or_waits_is_out_of_the_run_and_counted_so() -> None:
    roster, _ = _roster(4)
    before = roster.alive()
    roster.ranks[1].alive = False
    roster.ranks[2].exited = True
    roster.ranks[3].waiting = True
    assert [r.rank for r in roster.alive()] == [0] and roster.in_run == 1
    assert before is not roster.alive()  # built again after a change
    assert [r.rank for r in roster.reachable()] == [0, 3]  # a waiting rank still gets heartbeats
    roster.ranks[3].waiting = False
    assert roster.alive_ids() == {0, 3} and roster.in_run == 2


def test_the_lists_are_kept_until_a_rank_changes() -> None:
    roster, _ = _roster(3)
    alive, reachable = roster.alive(), roster.reachable()
    assert roster.alive() is alive and roster.reachable() is reachable
    roster.ranks[0].alive = True  # set, not changed in substance: still rebuilt, still right
    assert roster.alive() == alive


def test_a_new_incarnation_replaces_the_old_one_which_was_let_go_first() -> None:
    roster, _ = _roster(2)
    roster.ranks[1].alive = False  # as the coordinator does before it adds the new one
    roster.add(RankState(1, "worker/1b", 5.0))
    assert roster.in_run == 2 and roster.ranks[1].name == "worker/1b"
    assert roster.of("worker/1b") is roster.ranks[1]
    roster.ranks[1].exited = True
    assert roster.in_run == 1 and roster.alive_ids() == {0}
