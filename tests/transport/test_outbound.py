"""A node's outbound streams (transport/node/_outbound.py): opening, re-homing, a target's death,
acks and re-sends, on a virtual clock with no sockets."""

from __future__ import annotations

from actorwire.messages.runtime import AckEntry
from actorwire.transport.node._outbound import Outbound


def _sent(out: Outbound, sender: str, target: str, node: str, n: int, now: float = 0.0) -> None:
    stream = out.open(sender, target, node, now, 0)
    for _ in range(n):
        stream.append(stream.seq + 1, f"{sender}->{target} #{stream.seq + 1}".encode())


def test_a_stream_takes_the_smaller_of_its_window_and_the_receivers() -> None:
    out = Outbound(window=64)
    assert out.open("a", "t", "n1", 0.0, 16).window == 16
    assert out.open("b", "t", "n1", 0.0, 0).window == 64  # the receiver said none
    assert out.open("c", "t", "n1", 0.0, 1000).window == 64
    assert out.open("a", "t", "n2", 0.0, 8) is out.streams[("a", "t")]  # open once: no new window, no move
    assert sorted(out.senders_of("t")) == ["a", "b", "c"]


def test_a_moved_target_gets_what_it_had_not_handled_renumbered_from_one() -> None:
    out = Outbound(window=64)
    _sent(out, "a", "t", "n1", 3)
    out.acked([AckEntry(sender="a", target="t", received=3, handled=1)], "n1", 1.0)
    again = out.rehome("a", "t", "n2", lambda record, seq: record + f" as {seq}".encode())
    assert again == [b"a->t #2 as 1", b"a->t #3 as 2"]
    stream = out.streams[("a", "t")]
    assert stream.node_id == "n2" and stream.seq == 2 and stream.received == 0
    assert out.rehome("a", "t", "n2", lambda record, seq: record) is None  # already there
    assert out.rehome("b", "t", "n2", lambda record, seq: record) is None  # no such stream


def test_a_dead_target_closes_and_forgets_its_streams_and_no_other() -> None:
    out = Outbound(window=64)
    _sent(out, "a", "t", "n1", 2)
    _sent(out, "b", "t", "n1", 0)
    _sent(out, "a", "u", "n1", 1)
    down = dict(out.down("t"))
    assert set(down) == {"a", "b"} and all(stream.closed for stream in down.values())
    assert len(down["a"].unacked) == 2  # for the node to report
    assert set(out.streams) == {("a", "u")} and out.senders_of("t") == []
    assert out.down("t") == []


def test_an_ack_from_a_node_that_does_not_host_the_target_is_refused_and_changes_nothing() -> None:
    out = Outbound(window=64)
    _sent(out, "a", "t", "n1", 2)
    refused, freed = out.acked([AckEntry(sender="a", target="t", received=2, handled=2)], "liar", 1.0)
    assert refused == ["t"] and freed == [] and out.unacked() == 2


def test_an_ack_gives_credit_back_and_names_the_stream_whose_sender_waits() -> None:
    out = Outbound(window=2)
    _sent(out, "a", "t", "n1", 2)
    _sent(out, "b", "t", "n1", 2)
    out.streams[("a", "t")].waiting = True
    refused, freed = out.acked([AckEntry(sender="a", target="t", received=2, handled=2),
                                AckEntry(sender="b", target="t", received=2, handled=1),
                                AckEntry(sender="gone", target="t", received=1, handled=1)], "n1", 1.0)
    assert refused == [] and freed == [out.streams[("a", "t")]]  # b's sender does not wait
    assert out.unacked() == 1


def test_records_not_acknowledged_as_received_are_sent_again_after_a_quiet_spell() -> None:
    out = Outbound(window=64)
    _sent(out, "a", "t", "n1", 3, now=0.0)
    out.acked([AckEntry(sender="a", target="t", received=1, handled=0)], "n1", 1.0)
    assert out.due(2.5, after=2.0) == []  # progress at 1.0
    (stream, again), = out.due(3.5, after=2.0)
    assert stream is out.streams[("a", "t")] and again == [b"a->t #2", b"a->t #3"]
    assert out.due(4.0, after=2.0) == []  # sent again at 3.5: the clock starts over
