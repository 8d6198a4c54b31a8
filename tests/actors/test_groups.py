"""The coordinator's group formation (``_groups.GroupFormation``) on its own: no actor, no clock
but the numbers passed in."""

from __future__ import annotations

from actorwire.actors.control._groups import NO_GENERATOR, ROUNDS, GroupFormation
from actorwire.actors.control._ledger import RankState


def _ranks(*speeds: float) -> dict[int, RankState]:
    ranks = {r: RankState(r, f"worker/{r}", 0.0) for r in range(len(speeds))}
    for r, ms in zip(ranks.values(), speeds, strict=True):
        r.ms_per_batch = ms
    return ranks


def test_the_fastest_survivor_is_asked_and_one_attempt_runs_at_a_time() -> None:
    ranks = _ranks(30.0, 10.0, 20.0)
    g = GroupFormation(rendezvous_timeout=5.0)
    first = g.ask(list(ranks.values()), ranks, 1.0)
    assert first is ranks[1] and g.search is not None and g.search.tried == {1} and g.search.attempt == 0
    assert g.ask(list(ranks.values()), ranks, 1.5) is None  # its generator lives: the attempt stands
    assert not g.timed_out(ranks, 5.9)
    assert g.timed_out(ranks, 6.1)  # silent past the wait
    nxt = g.ask(list(ranks.values()), ranks, 6.1, move_on=True)
    assert nxt is ranks[2] and g.search is not None and g.search.tried == {1, 2} and g.search.attempt == 1


def test_a_dead_generator_is_moved_on_from_at_once() -> None:
    ranks = _ranks(10.0, 20.0)
    g = GroupFormation(rendezvous_timeout=5.0)
    g.ask(list(ranks.values()), ranks, 0.0)
    ranks[0].alive = False
    assert g.timed_out(ranks, 0.1)


def test_every_survivor_is_asked_in_each_round_each_twice_as_long_then_the_run_gives_up() -> None:
    ranks = _ranks(10.0)
    g = GroupFormation(rendezvous_timeout=5.0)
    survivors = list(ranks.values())
    assert g.ask(survivors, ranks, 0.0) is ranks[0]
    for round_ in range(1, ROUNDS):
        assert g.ask(survivors, ranks, 0.0, move_on=True) is ranks[0]
        assert g.search is not None and g.search.round == round_
    assert not g.timed_out(ranks, 5.0 * 2 ** (ROUNDS - 1) - 0.1)
    assert g.ask(survivors, ranks, 0.0, move_on=True) is NO_GENERATOR


def test_a_failed_session_is_formed_again_once_every_member_gave_up_not_at_the_first_report() -> None:
    """Re-formed at the first SessionFailed, members still blocked in the attempt's formation joined
    the next a timeout late, the early ones timed out waiting for them, for good (join-hang)."""
    ranks = _ranks(10.0, 20.0, 30.0)
    alive = frozenset(ranks)
    g = GroupFormation(rendezvous_timeout=5.0)
    assert g.session(list(ranks.values())) == 1
    assert g.session_failed(0, 1, now=10.0)
    assert g.reform(ranks, alive, now=10.0) is None  # 1 and 2 may still be inside the formation
    assert g.session_failed(1, 1, now=11.0)
    assert g.reform(ranks, alive, now=11.0) is None
    assert g.session_failed(2, 1, now=12.0)
    assert g.reform(ranks, alive, now=12.0) == set()  # all gave up: form it again now
    assert not g.session_failed(0, 1, now=12.5)  # the new formation answers every report of it
    assert not g.session_failed(0, 0, now=12.5)  # a superseded attempt


def test_a_member_never_heard_from_is_waited_for_rendezvous_timeout_only() -> None:
    ranks = _ranks(10.0, 20.0)
    g = GroupFormation(rendezvous_timeout=5.0)
    g.session(list(ranks.values()))
    g.session_failed(0, 1, now=10.0)
    assert g.reform(ranks, frozenset(ranks), now=14.9) is None
    assert g.reform(ranks, frozenset(ranks), now=15.0) == {1}


def test_the_group_is_formed_again_on_the_first_sync_of_a_later_session() -> None:
    ranks = _ranks(10.0, 20.0)
    g = GroupFormation(rendezvous_timeout=5.0)
    g.session(list(ranks.values()))
    g.lost(now=3.0)
    g.lost(now=4.0)  # a second loss does not move the start
    assert g.formed_again(now=5.0) is None  # a sync on the old session
    g.session([ranks[0]])
    assert g.formed_again(now=7.5) == 4.5
    assert g.formed_again(now=8.0) is None
