"""LineGate (transport/node/_line_gate.py): who may open a line to this node, what waits, where a
reply goes.  Each rule on a real view and codec, with no sockets and a virtual clock: the object
the node's I/O thread calls for every message a line brings."""

from __future__ import annotations

import pytest
from conftest import node_info

from actorwire.messages import PROTOCOL_VERSION, Codec, Envelope
from actorwire.messages.kinds import Throttle
from actorwire.messages.runtime import Hello, RegistryUpdate, Welcome
from actorwire.transport._lines import HeldLines
from actorwire.transport._membership import View
from actorwire.transport.node import _line_gate
from actorwire.transport.node._effects import Refuse, RefuseLine, Take, Warn
from actorwire.transport.node._line_gate import NO_HELLO, NOT_A_MEMBER, LineGate

CODEC = Codec()


def _gate(*, root: bool = False, **kwargs: object) -> LineGate:
    """Node "a" of run "r"; its view knows the root and node "b"."""
    if root:
        view = View(node_info("root"), run_id="r", is_root=True)
        view.nodes["b"] = node_info("b")
        return LineGate("root", view, CODEC, is_root=True, **kwargs)  # type: ignore[arg-type]
    view = View(node_info("a"), run_id="r", is_root=False)
    view.welcomed(Welcome(protocol_version=PROTOCOL_VERSION, run_id="r", root_node_id="root",
                          nodes={"root": node_info("root"), "b": node_info("b")}, names={"worker/1": "b"}))
    return LineGate("a", view, CODEC, is_root=False, **kwargs)  # type: ignore[arg-type]


def _hello(node: str, run_id: str = "r") -> list[bytes]:
    hello = Hello(protocol_version=PROTOCOL_VERSION, run_id=run_id, node=node_info(node))
    return CODEC.encode(Envelope(sender=node, target="", seq=0), hello)


def _asks(*corrs: int, sender: str = "~b/7", target: str = "counter", reply: bool = False) -> list[bytes]:
    records = [CODEC.encode_record(Envelope(sender=sender, target=target, seq=i + 1, correlation_id=corr,
                                            is_reply=reply), Throttle()) for i, corr in enumerate(corrs)]
    return [CODEC.join_records(records)]


def test_a_line_that_opens_with_a_hello_from_a_member_is_admitted_and_its_asks_are_read_as_that_nodes() -> None:
    gate = _gate()
    assert gate.receive("b\x1f1", _hello("b"), 0.0) == []
    assert gate.peers == {"b\x1f1": "b"}
    [take] = gate.receive("b\x1f1", _asks(11, 12), 0.1)
    assert isinstance(take, Take) and take.node == "b"
    assert [(e.sender, e.correlation_id) for e, _ in take.pairs] == [("~b/7", 11), ("~b/7", 12)]


def test_the_reply_to_an_ask_goes_back_on_its_line_once_and_any_other_the_nodes_way() -> None:
    gate = _gate()
    gate.receive("b\x1f1", _hello("b"), 0.0)
    gate.receive("b\x1f1", _asks(11), 0.0)
    assert gate.reply_route("b", 11) == "b\x1f1"
    assert gate.reply_route("b", 11) == "b"  # taken: a second reply has no line
    assert gate.reply_route("b", 99) == "b"


def test_the_routes_of_replies_owed_are_bounded_the_oldest_going_first() -> None:
    gate = _gate(reply_routes=2)
    gate.receive("b\x1f1", _hello("b"), 0.0)
    gate.receive("b\x1f1", _asks(1, 2, 3), 0.0)
    assert list(gate.reply_via) == [("b", 2), ("b", 3)]
    assert gate.reply_route("b", 1) == "b"


@pytest.mark.parametrize("first", [_asks(1), [b"one frame"], [b"a", b"b", b"c"]], ids=["asks", "one-frame", "three"])
def test_a_line_that_does_not_open_with_a_hello_is_refused(first: list[bytes]) -> None:
    gate = _gate()
    effects = gate.receive("b\x1f1", first, 0.0)
    assert effects == [Refuse("b", NO_HELLO)] and gate.peers == {}


def test_an_undecodable_hello_is_refused() -> None:
    effects = _gate().receive("b\x1f1", [b"\xc1", b"\xc1"], 0.0)
    assert len(effects) == 1 and isinstance(effects[0], Refuse) and "undecodable hello" in effects[0].what


def test_a_hello_of_another_run_is_refused_on_the_line_without_naming_the_run() -> None:
    [effect] = _gate().receive("b\x1f1", _hello("b", run_id="other"), 0.0)
    assert effect == RefuseLine("b\x1f1", "b", "a hello: wrong run id", told="wrong run id")


def test_a_line_whose_hello_speaks_for_another_node_is_refused() -> None:
    """The identity says "b", the hello "root": a peer may not open lines in another's name."""
    gate = _gate()
    assert gate.receive("b\x1f1", _hello("root"), 0.0) == [Refuse("b", NOT_A_MEMBER)]
    assert gate.peers == {}


def test_a_line_in_this_nodes_own_name_is_refused() -> None:
    assert _gate().receive("a\x1f1", _hello("a"), 0.0) == [Refuse("a", NOT_A_MEMBER)]


def test_a_member_holds_a_line_from_a_node_it_does_not_know_yet_and_reads_it_in_order_once_named() -> None:
    gate = _gate()
    assert gate.receive("c\x1f1", _hello("c"), 0.0) == []
    assert gate.receive("c\x1f1", _asks(1, sender="~c/1"), 0.1) == []
    assert gate.receive("c\x1f1", _asks(2, sender="~c/1"), 0.2) == []
    assert gate.held and gate.peers == {}
    assert gate.release(0.3) == []  # no update named it yet
    gate.view.apply(RegistryUpdate(nodes={"c": node_info("c")}))
    takes = gate.release(0.4)
    assert [[e.correlation_id for e, _ in t.pairs] for t in takes if isinstance(t, Take)] == [[1], [2]]
    assert gate.peers == {"c\x1f1": "c"} and not gate.held


def test_a_held_line_whose_node_is_never_named_is_refused_after_the_patience() -> None:
    gate = _gate()
    gate.receive("c\x1f1", _hello("c"), 0.0)
    assert gate.expired(5.0, patience=5.0) == []
    assert gate.expired(5.1, patience=5.0) == [RefuseLine("c\x1f1", "c", NOT_A_MEMBER)]
    assert not gate.held


def test_what_a_peer_can_make_a_member_hold_is_bounded() -> None:
    gate = _gate(held=HeldLines(limit=1, depth=2))
    gate.receive("c\x1f1", _hello("c"), 0.0)
    [full] = gate.receive("d\x1f1", _hello("d"), 0.0)
    assert isinstance(full, RefuseLine) and full.identity == "d\x1f1" and "1 lines wait already" in full.what
    assert gate.receive("c\x1f1", _asks(1, sender="~c/1"), 0.0) == []
    [deep] = gate.receive("c\x1f1", _asks(2, sender="~c/1"), 0.0)
    assert isinstance(deep, RefuseLine) and "more than 2 messages on a line" in deep.what
    assert not gate.held


def test_the_root_refuses_a_line_from_an_unknown_node_at_once() -> None:
    gate = _gate(root=True)
    assert gate.receive("c\x1f1", _hello("c"), 0.0) == [Refuse("c", NOT_A_MEMBER)]
    assert not gate.held
    assert gate.receive("b\x1f1", _hello("b"), 0.0) == []  # a registered node's line is taken


def test_a_node_may_open_only_so_many_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_line_gate, "MAX_LINES_PER_NODE", 2)
    gate = _gate()
    assert gate.receive("b\x1f1", _hello("b"), 0.0) == []
    assert gate.receive("b\x1f2", _hello("b"), 0.0) == []
    assert gate.receive("b\x1f3", _hello("b"), 0.0) == [Refuse("b", "more than 2 lines")]
    assert set(gate.peers) == {"b\x1f1", "b\x1f2"}


def test_a_node_message_or_a_reply_on_a_line_is_refused_and_the_asks_beside_it_are_read() -> None:
    gate = _gate()
    gate.receive("b\x1f1", _hello("b"), 0.0)
    node_msg = CODEC.encode_record(Envelope(sender="b", target="", seq=0), Throttle())
    reply = CODEC.encode_record(Envelope(sender="~b/7", target="x", seq=1, correlation_id=4, is_reply=True),
                                Throttle())
    ask = CODEC.encode_record(Envelope(sender="~b/7", target="counter", seq=2, correlation_id=5), Throttle())
    effects = gate.receive("b\x1f1", [CODEC.join_records([node_msg, reply, ask])], 0.0)
    refusal = Refuse("b", "a node message or a reply on a line (lines carry asks)")
    assert effects[:2] == [refusal, refusal]
    assert isinstance(effects[2], Take) and [e.correlation_id for e, _ in effects[2].pairs] == [5]
    assert ("b", 4) not in gate.reply_via


def test_a_line_message_of_two_frames_after_the_hello_is_refused() -> None:
    gate = _gate()
    gate.receive("b\x1f1", _hello("b"), 0.0)
    assert gate.receive("b\x1f1", _hello("b"), 0.0) == [Refuse("b", "a line message that is not one batch frame")]


def test_an_undecodable_batch_on_a_line_is_warned_of_and_nothing_is_read() -> None:
    gate = _gate()
    gate.receive("b\x1f1", _hello("b"), 0.0)
    good = CODEC.encode_record(Envelope(sender="~b/7", target="counter", seq=1, correlation_id=3), Throttle())
    effects = gate.receive("b\x1f1", [CODEC.join_records([b"\xc1\xc1", good])], 0.0)
    assert len(effects) == 1 and isinstance(effects[0], Warn) and effects[0].fields["source"] == "b\x1f1"
    assert effects[0].event == "dropped an undecodable message" and gate.reply_via == {}


def test_a_node_that_left_is_forgotten_with_its_lines_held_or_admitted_and_its_reply_routes() -> None:
    gate = _gate()
    gate.receive("b\x1f1", _hello("b"), 0.0)
    gate.receive("b\x1f1", _asks(8), 0.0)
    gate.receive("c\x1f1", _hello("c"), 0.0)  # held
    assert gate.forget("b") == ["b\x1f1"]
    assert gate.peers == {} and gate.reply_via == {}
    assert gate.forget("c") == [] and not gate.held
