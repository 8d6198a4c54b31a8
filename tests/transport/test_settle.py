"""What a node's sends and asks come to (transport/node/_settle.py): each ask's one outcome, the
credit acks give back, re-sends, re-homing, a target gone, and the acks owed; no sockets, a virtual
clock, the driver's side recorded."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import RecordingLog, node_info

from actorwire.messages import PROTOCOL_VERSION, Codec, Envelope, Message
from actorwire.messages.kinds import DownReason, ErrorCode, ErrorReply, Throttle
from actorwire.messages.runtime import Ack, AckEntry, Welcome
from actorwire.transport._asks import ROOT, Asks, PendingAsk
from actorwire.transport._delivery import InStreams
from actorwire.transport._errors import ActorDead, AskTimeout, RemoteError, SystemClosed
from actorwire.transport._membership import View
from actorwire.transport.node._outbound import Outbound
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._settle import Settlement

CODEC = Codec()


class _Node:
    """Member "a" of a run whose root hosts "coordinator" and node "b" "worker/1"."""

    def __init__(self) -> None:
        view = View(node_info("a"), run_id="r", is_root=False)
        view.welcomed(Welcome(protocol_version=PROTOCOL_VERSION, run_id="r", root_node_id="root",
                              nodes={"root": node_info("root"), "b": node_info("b")},
                              names={"coordinator": "root", "worker/1": "b"}))
        self.asks, self.outbound, self.outbox = Asks(), Outbound(window=8), Outbox(lambda: None)
        self.streams = InStreams(8)
        self.refused: list[tuple[str, str]] = []
        self.sent: list[tuple[str, Message]] = []
        self.changed = 0
        self.closing = False
        self.log = RecordingLog()
        self.outcomes: dict[int, Any] = {}

        def changed() -> None:
            self.changed += 1

        self.settle = Settlement(
            node_id="a", codec=CODEC, view=view, asks=self.asks, outbound=self.outbound, outbox=self.outbox,
            streams=self.streams, log=self.log, refuse=lambda peer, what: self.refused.append((peer, what)),
            send_node=lambda node, message: self.sent.append((node, message)), changed=changed,
            closing=lambda: self.closing)

    def ask(self, corr: int, target: str = "worker/1", deadline: float = 10.0) -> PendingAsk:
        pending = PendingAsk(corr, target, "throttle", 5.0, deadline,
                             on_reply=lambda envelope, message: self.outcomes.__setitem__(corr, message),
                             on_failure=lambda c, error: self.outcomes.__setitem__(c, error))
        self.asks.open(pending)
        return pending


def _reply(corr: int) -> Envelope:
    return Envelope(sender="worker/1", target="x", seq=0, correlation_id=corr, is_reply=True)


def test_a_reply_from_the_targets_node_settles_its_ask_once() -> None:
    node = _Node()
    node.ask(1)
    node.settle.resolve(_reply(1), Throttle(), "b")
    node.settle.resolve(_reply(1), Throttle(), "b")  # a duplicate: late, dropped
    assert isinstance(node.outcomes[1], Throttle) and len(node.asks) == 0
    assert [event for _, event, _ in node.log.lines] == ["late or unknown reply dropped"]


def test_a_reply_from_a_node_that_does_not_host_the_target_is_refused_and_the_ask_still_waits() -> None:
    """A correlation id is a counter: guessable.  Only the target's node may answer."""
    node = _Node()
    node.ask(1)
    node.settle.resolve(_reply(1), Throttle(), "root")
    assert node.refused == [("root", "a reply to an ask it was not sent (correlation id 1)")]
    assert 1 in node.asks and node.outcomes == {}


def test_the_root_answers_node_requests() -> None:
    node = _Node()
    node.ask(2, target=ROOT)
    node.settle.resolve(_reply(2), Throttle(), "root")
    assert isinstance(node.outcomes[2], Throttle)


def test_an_error_reply_fails_the_ask_with_the_remote_error() -> None:
    node = _Node()
    node.ask(3)
    node.settle.resolve(_reply(3), ErrorReply(code=ErrorCode.UNKNOWN_TARGET, message="no such actor",
                                              request_kind="throttle"), "b")
    error = node.outcomes[3]
    assert isinstance(error, RemoteError) and "no such actor" in str(error)


def test_an_ask_past_its_deadline_fails_with_a_timeout_and_a_late_reply_is_dropped() -> None:
    node = _Node()
    node.ask(4, deadline=10.0)
    node.settle.expire(9.9)
    assert node.outcomes == {}
    node.settle.expire(10.0)
    assert isinstance(node.outcomes[4], AskTimeout)
    node.settle.resolve(_reply(4), Throttle(), "b")
    assert isinstance(node.outcomes[4], AskTimeout)


def test_a_callback_that_raises_is_logged_and_the_ask_is_settled() -> None:
    node = _Node()
    pending = node.ask(5)
    pending.on_reply = lambda envelope, message: 1 / 0
    node.settle.resolve(_reply(5), Throttle(), "b")
    assert ("exception", "reply callback failed") in [(level, event) for level, event, _ in node.log.lines]
    assert 5 not in node.asks


@pytest.mark.parametrize("reason, level", [(DownReason.DEAD, "error"), (DownReason.EXITED, "debug")])
def test_a_target_gone_fails_its_asks_wakes_its_senders_and_reports_what_it_left(reason: DownReason,
                                                                                 level: str) -> None:
    """After a death only the sender can say what was never confirmed; a clean exit says it itself."""
    node = _Node()
    node.ask(6)
    node.ask(7, target="coordinator")
    stream = node.outbound.open("me", "worker/1", "b", 0.0, 0)
    stream.append(1, CODEC.encode_record(Envelope(sender="me", target="worker/1", seq=1), Throttle()))
    node.settle.target_down("worker/1", reason, "its process ended")
    assert isinstance(node.outcomes[6], ActorDead) and 7 not in node.outcomes
    assert stream.closed
    (got_level, event, fields), = node.log.lines
    assert (got_level, fields["count"], fields["kinds"]) == (level, 1, {"throttle": 1})


def test_an_ack_gives_credit_back_and_one_for_a_target_that_node_does_not_host_is_refused() -> None:
    node = _Node()
    stream = node.outbound.open("me", "worker/1", "b", 0.0, 0)
    stream.append(1, b"one")
    node.settle.acked(Ack(entries=[AckEntry(sender="me", target="worker/1", received=1, handled=1)]), "b", 1.0)
    assert stream.in_flight == 0 and node.refused == [] and node.changed == 0
    node.settle.acked(Ack(entries=[AckEntry(sender="me", target="worker/1", received=1, handled=1)]), "root", 1.0)
    assert node.refused == [("root", "an ack for 'worker/1', which that node does not host")]
    node.closing = True
    node.settle.acked(Ack(entries=[]), "b", 2.0)
    assert node.changed == 1  # close() waits for the last acks


def test_what_was_handled_is_acked_in_one_message_per_peer() -> None:
    node = _Node()
    for key, seq in ((("b", "worker/1", "sink"), 1), (("b", "worker/1", "sink"), 2), (("root", "coordinator", "sink"), 1)):
        node.streams.accept(key, seq)
    node.outbox.owed.update({("b", "worker/1", "sink"): 2, ("root", "coordinator", "sink"): 1})
    node.settle.flush_acks()
    assert sorted((peer, [(e.sender, e.received, e.handled) for e in ack.entries]) for peer, ack in node.sent) == [
        ("b", [("worker/1", 2, 2)]), ("root", [("coordinator", 1, 1)])]
    node.sent.clear()
    node.settle.flush_acks()
    assert node.sent == []  # nothing handled since


def test_a_stream_with_no_progress_is_sent_again_and_a_moved_target_gets_it_renumbered() -> None:
    node = _Node()
    stream = node.outbound.open("me", "worker/1", "b", 0.0, 0)
    records = [CODEC.encode_record(Envelope(sender="me", target="worker/1", seq=seq, wall_ns=seq), Throttle())
               for seq in (1, 2)]
    for seq, record in enumerate(records, 1):
        stream.append(seq, record)
    node.settle.retransmit(0.5, after=1.0)
    assert list(node.outbox.take_records()) == []
    node.settle.retransmit(1.5, after=1.0)
    assert list(node.outbox.take_records()) == [("b", records)]
    node.settle.acked(Ack(entries=[AckEntry(sender="me", target="worker/1", received=2, handled=1)]), "b", 1.6)
    node.settle.rehome("me", "worker/1", "c")  # the first was handled: the second is the new node's first
    (to, again), = list(node.outbox.take_records())
    (envelope, message), = CODEC.decode_batch(CODEC.join_records(again))[0]
    assert to == "c" and (envelope.seq, envelope.wall_ns) == (1, 2) and isinstance(message, Throttle)
    assert node.changed == 1


def test_closing_fails_every_ask() -> None:
    node = _Node()
    node.ask(8)
    node.ask(9, target=ROOT)
    node.settle.fail_all(SystemClosed("closing"))
    assert all(isinstance(node.outcomes[c], SystemClosed) for c in (8, 9)) and len(node.asks) == 0
