"""The inbound rules (transport/node/_inbound.py): what a node does with each record a peer sent.

Each step of :class:`Inbound.rule` and the fast path's conditions, on a real view,
streams and parking, with no sockets and no clock: these are the objects the node
calls on its receive path.
"""

from __future__ import annotations

from conftest import node_info

from actorwire.messages import PROTOCOL_VERSION, Envelope
from actorwire.messages.runtime import RegistryUpdate, Welcome
from actorwire.transport._delivery import InStreams
from actorwire.transport._membership import Parking, View
from actorwire.transport.node._inbound import Inbound, Step


def _member(window: int = 4, max_streams: int = 8) -> Inbound:
    """A member's rules: the root hosts "coordinator", node "b" hosts "worker/1"."""
    view = View(node_info("a"), run_id="r", is_root=False)
    view.welcomed(Welcome(protocol_version=PROTOCOL_VERSION, run_id="r", root_node_id="root", nodes={"root": node_info("root"), "b": node_info("b")},
                          names={"coordinator": "root", "worker/1": "b"}))
    return Inbound(view, InStreams(window, max_streams), Parking(window))


def _tell(sender: str, seq: int, target: str = "sink", *, reply: bool = False, corr: int = 0) -> Envelope:
    return Envelope(sender=sender, target=target, seq=seq, correlation_id=corr, is_reply=reply)


def test_a_tell_from_the_node_that_holds_its_sender_is_delivered_in_order() -> None:
    inbound, proven = _member(), set()
    assert inbound.rule("b", _tell("worker/1", 1), True, proven) == (Step.DELIVER, "")
    assert proven == {"worker/1"}  # checked once per batch
    assert inbound.rule("b", _tell("worker/1", 2), True, proven)[0] is Step.DELIVER


def test_a_record_from_a_peer_that_did_not_say_hello_is_refused() -> None:
    step, why = _member().rule("b", _tell("worker/1", 1), False, set())
    assert step is Step.REFUSE and "did not say hello" in why


def test_a_sender_another_node_holds_is_refused_as_forged() -> None:
    step, why = _member().rule("b", _tell("coordinator", 1), True, set())
    assert step is Step.REFUSE and "'coordinator', a name that node does not hold" in why


def test_a_sender_the_member_never_heard_of_waits_for_the_roots_update() -> None:
    inbound = _member()
    assert inbound.rule("b", _tell("worker/2", 1), True, set()) == (Step.PARK, "")
    inbound.view.apply(RegistryUpdate(added={"worker/2": "b"}))
    assert inbound.rule("b", _tell("worker/2", 1), True, set())[0] is Step.DELIVER


def test_while_a_senders_messages_wait_its_later_ones_wait_behind_them() -> None:
    """Parked first, a name proven meanwhile would let its second message overtake its first."""
    inbound = _member()
    inbound.parking.park("b", "worker/1", (0.0, _tell("worker/1", 1), None))
    assert inbound.rule("b", _tell("worker/1", 2), True, set()) == (Step.PARK, "")


def test_a_reply_from_a_proven_sender_resolves_its_ask_and_opens_no_stream() -> None:
    inbound = _member()
    assert inbound.rule("b", _tell("worker/1", 9, reply=True, corr=3), True, set()) == (Step.RESOLVE, "")
    assert inbound.streams.table == {}


def test_a_duplicate_is_acked_again_and_a_gap_skipped() -> None:
    inbound = _member()
    assert inbound.rule("b", _tell("worker/1", 1), True, set())[0] is Step.DELIVER
    assert inbound.rule("b", _tell("worker/1", 1), True, set()) == (Step.ACK_AGAIN, "")
    assert inbound.rule("b", _tell("worker/1", 3), True, set()) == (Step.SKIP, "")  # 2 was lost


def test_a_peer_that_overruns_the_credit_window_is_expelled() -> None:
    inbound = _member(window=2)
    for seq in (1, 2):
        assert inbound.rule("b", _tell("worker/1", seq), True, set())[0] is Step.DELIVER
    step, why = inbound.rule("b", _tell("worker/1", 3), True, set())  # nothing handled: 3 unhandled
    assert step is Step.EXPEL and "overran the credit window (2 unhandled messages from 'worker/1' to 'sink')" in why


def test_a_peer_that_opens_too_many_streams_is_expelled() -> None:
    inbound = _member(max_streams=2)
    for target in ("t1", "t2"):
        assert inbound.rule("b", _tell("worker/1", 1, target), True, set())[0] is Step.DELIVER
    step, why = inbound.rule("b", _tell("worker/1", 1, "t3"), True, set())
    assert step is Step.EXPEL and "more than 2 streams" in why


def test_a_whole_run_of_an_open_stream_is_taken_in_one_step() -> None:
    inbound = _member(window=8)
    assert inbound.rule("b", _tell("worker/1", 1), True, set())[0] is Step.DELIVER  # opens the stream
    run = [(_tell("worker/1", seq), None) for seq in (2, 3, 4)]
    assert inbound.whole_run("b", run, True)
    assert inbound.rule("b", _tell("worker/1", 5), True, set())[0] is Step.DELIVER  # 2-4 taken


def test_anything_but_a_whole_run_goes_record_by_record_and_changes_nothing() -> None:
    inbound = _member(window=8)
    inbound.rule("b", _tell("worker/1", 1), True, set())
    cases = {
        "not the next numbers": [(_tell("worker/1", 3), None), (_tell("worker/1", 4), None)],
        "two targets": [(_tell("worker/1", 2), None), (_tell("worker/1", 3, "other"), None)],
        "a reply in it": [(_tell("worker/1", 2, reply=True), None), (_tell("worker/1", 3, reply=True), None)],
        "a node message": [(_tell("b", 0, ""), None), (_tell("b", 0, ""), None)],
        "a forged sender": [(_tell("coordinator", 2), None), (_tell("coordinator", 3), None)],
        "past the window": [(_tell("worker/1", seq), None) for seq in range(2, 11)],
    }
    for why, run in cases.items():
        assert not inbound.whole_run("b", run, True), why
    assert not inbound.whole_run("b", [(_tell("worker/1", 2), None), (_tell("worker/1", 3), None)], False)
    assert inbound.rule("b", _tell("worker/1", 2), True, set())[0] is Step.DELIVER  # nothing was taken
