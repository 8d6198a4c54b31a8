"""The asks machine on a virtual clock: one outcome per ask, deadlines, and who may answer."""

from __future__ import annotations

import sys
import threading

import pytest

from actorwire.transport._asks import ROOT, Asks, Match, PendingAsk

HOSTS = {"sink": "node-b", ROOT: "node-root"}


def _answerer(pending: PendingAsk) -> str | None:
    return HOSTS.get(pending.target)


def _ask(corr: int, *, target: str = "sink", deadline: float = 10.0) -> PendingAsk:
    return PendingAsk(corr, target, "ping", timeout=deadline, deadline=deadline,
                      on_reply=lambda *a: None, on_failure=lambda *a: None)


def test_a_reply_from_the_targets_host_answers_the_ask_once() -> None:
    asks = Asks()
    pending = _ask(1)
    asks.open(pending)
    assert asks.match(1, "node-b", _answerer) == (Match.ANSWER, pending)
    assert asks.settle(pending) is True
    assert asks.settle(pending) is False  # a second outcome (late deadline, duplicate reply) is ignored
    assert asks.match(1, "node-b", _answerer) == (Match.UNKNOWN, None)
    assert len(asks) == 0 and 1 not in asks


def test_a_reply_from_another_node_with_a_guessed_id_does_not_answer() -> None:
    asks = Asks()
    pending = _ask(7)
    asks.open(pending)
    assert asks.match(7, "node-mallory", _answerer) == (Match.WRONG_NODE, pending)
    assert asks.match(7, None, _answerer) == (Match.ANSWER, pending)  # this node answers its own
    assert len(asks) == 1  # the forged reply left the ask waiting for the real one


def test_node_requests_are_answered_by_the_root_only() -> None:
    asks = Asks()
    pending = _ask(2, target=ROOT)
    asks.open(pending)
    assert asks.match(2, "node-b", _answerer)[0] is Match.WRONG_NODE
    assert asks.match(2, "node-root", _answerer)[0] is Match.ANSWER


def test_the_answering_node_is_decided_when_the_reply_comes() -> None:
    hosts = {"sink": "node-b"}
    asks = Asks()
    pending = _ask(3)
    asks.open(pending)
    hosts["sink"] = "node-c"  # taken over after the ask went out

    def answerer(p: PendingAsk) -> str | None:
        return hosts.get(p.target)

    assert asks.match(3, "node-b", answerer)[0] is Match.WRONG_NODE
    assert asks.match(3, "node-c", answerer)[0] is Match.ANSWER


def test_deadlines_expire_in_order_and_skip_what_was_settled() -> None:
    asks = Asks()
    late, early, answered = _ask(1, deadline=5.0), _ask(2, deadline=2.0), _ask(3, deadline=3.0)
    for pending in (late, early, answered):
        asks.open(pending)
    assert asks.next_deadline() == 2.0
    assert asks.expired(now=1.9) == []
    asks.settle(answered)
    assert asks.expired(now=3.0) == [early]  # the answered one's deadline passes silently
    assert asks.next_deadline() == 5.0
    assert asks.expired(now=100.0) == [late]
    assert asks.next_deadline() is None


def test_a_cancelled_ask_never_expires_and_cannot_be_answered() -> None:
    asks = Asks()
    asks.open(_ask(4, deadline=1.0))
    asks.cancel(4)
    assert asks.match(4, "node-b", _answerer)[0] is Match.UNKNOWN
    assert asks.expired(now=2.0) == []


def test_a_dead_target_fails_only_its_own_asks() -> None:
    asks = Asks()
    to_sink, to_root = _ask(1), _ask(2, target=ROOT)
    asks.open(to_sink)
    asks.open(to_root)
    assert asks.of_target("sink") == [to_sink]
    assert set(map(id, asks.all())) == {id(to_sink), id(to_root)}


def test_a_reply_and_the_deadline_racing_on_two_threads_settle_an_ask_once() -> None:
    """A local reply settles on the replying actor's thread while the I/O thread expires deadlines."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(50):
            asks = Asks()
            batch = [_ask(corr, deadline=0.0) for corr in range(200)]
            for pending in batch:
                asks.open(pending)
            wins: list[int] = []

            thread = threading.Thread(target=_settle_all, args=(asks, batch, wins))
            thread.start()
            for pending in asks.expired(now=1.0):
                if asks.settle(pending):
                    wins.append(pending.correlation_id)
            thread.join()
            assert sorted(wins) == list(range(200))
    finally:
        sys.setswitchinterval(old)


def _settle_all(asks: Asks, batch: list[PendingAsk], wins: list[int]) -> None:
    for pending in batch:
        if asks.settle(pending):
            wins.append(pending.correlation_id)


@pytest.mark.parametrize("corr", [0, 2**64 - 1])
def test_any_correlation_id_is_just_a_key(corr: int) -> None:
    asks = Asks()
    pending = _ask(corr)
    asks.open(pending)
    assert asks.match(corr, "node-b", _answerer) == (Match.ANSWER, pending)
