"""The receiving side (transport/node/_receive.py): what a node does with a message a peer sent.

:class:`Incoming` on a real codec, view, streams, parking and outbox, with no sockets and a virtual
clock; the driver's decisions (node messages, replies, refusals, expulsions, an actor's reply) are
recorded instead of carried out.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import RecordingLog, node_info

from actorwire.messages import PROTOCOL_VERSION, Codec, Envelope, Message
from actorwire.messages.kinds import ErrorCode, ErrorReply, Throttle
from actorwire.messages.runtime import RegistryUpdate, Welcome
from actorwire.transport._delivery import InStreams
from actorwire.transport._membership import Parking, View
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._receive import Incoming

CODEC = Codec()


class _Node:
    """An Incoming of member "a" (the root hosts "coordinator", node "b" hosts "worker/1"; "sink"
    runs here) and what it asked of the driver."""

    def __init__(self, window: int = 4, bulk: bool = False) -> None:
        self.now = 100.0
        self.view = View(node_info("a"), run_id="r", is_root=False)
        self.view.welcomed(Welcome(protocol_version=PROTOCOL_VERSION, run_id="r", root_node_id="root",
                                   nodes={"root": node_info("root"), "b": node_info("b")},
                                   names={"coordinator": "root", "worker/1": "b", "sink": "a"}))
        self.view.peers.add("b")
        self.delivered: list[tuple[str, int]] = []
        self.runs: list[list[int]] = []
        self.node_messages: list[tuple[str, str]] = []
        self.resolved: list[int] = []
        self.refused: list[tuple[str, str]] = []
        self.expelled: list[tuple[str, str]] = []
        self.replies: list[tuple[str, Envelope, str | None, Message]] = []
        self.outbox = Outbox(lambda: None)
        self.log = RecordingLog()
        local = {"sink": lambda envelope, message, source, line: self.delivered.append((source, envelope.seq))}
        many = {"sink": lambda run: self.runs.append([envelope.seq for envelope, _, _ in run])} if bulk else {}
        self.incoming = Incoming(
            codec=CODEC, view=self.view, streams=InStreams(window), parking=Parking(window), outbox=self.outbox,
            local=local, bulk=many, log=self.log, clock=lambda: self.now,
            node_message=lambda source, envelope, message, from_router: self.node_messages.append(
                (source, type(message).wire_tag())),
            resolve=lambda envelope, message, source: self.resolved.append(envelope.correlation_id),
            refuse=lambda peer, what: self.refused.append((peer, what)),
            expel=lambda peer, why: self.expelled.append((peer, why)),
            reply=lambda name, envelope, source, message: self.replies.append((name, envelope, source, message)))


def _batch(*envelopes: Envelope) -> list[bytes]:
    return [CODEC.join_records([CODEC.encode_record(envelope, Throttle()) for envelope in envelopes])]


def _tell(sender: str, seq: int, target: str = "sink", *, corr: int = 0, reply: bool = False) -> Envelope:
    return Envelope(sender=sender, target=target, seq=seq, correlation_id=corr, is_reply=reply)


def test_a_batch_is_delivered_in_order_to_the_actor_it_is_for() -> None:
    node = _Node()
    node.incoming.frames("b", _batch(_tell("worker/1", 1), _tell("worker/1", 2)), from_router=True)
    assert node.delivered == [("b", 1), ("b", 2)]
    assert node.refused == []


def test_an_actor_that_takes_runs_gets_a_batch_in_one_call() -> None:
    node = _Node(bulk=True)
    node.incoming.frames("b", _batch(_tell("worker/1", 1), _tell("worker/1", 2), _tell("worker/1", 3)),
                         from_router=True)
    assert node.runs == [[1, 2, 3]] and node.delivered == []


def test_a_batch_from_a_connection_that_did_not_say_hello_is_refused_undecoded() -> None:
    node = _Node()
    node.incoming.frames("c", [b"\xff not even msgpack"], from_router=True)
    assert node.refused == [("c", "a batch from a peer that did not say hello")]
    assert node.log.lines == []  # not decoded, so no decode error either


def test_bad_bytes_are_logged_with_their_source_and_dropped() -> None:
    node = _Node()
    node.incoming.frames("b", [b"\xc1\xc1\xc1"], from_router=True)
    node.incoming.frames("b", [b"a", b"b", b"c"], from_router=True)
    assert [(level, fields["source"]) for level, _, fields in node.log.lines] == [("warning", "b")] * 2
    assert "expected 1 or 2 frames, got 3" in node.log.lines[1][2]["reason"]
    assert node.delivered == []


def test_a_record_that_never_decodes_is_warned_of_once_per_source_and_reason() -> None:
    """A peer re-sends what was not acked: a record that never decodes came back at each re-send
    interval, and each time the node wrote the same warning."""
    node = _Node()
    for _ in range(5):
        node.incoming.frames("b", [b"\xc1\xc1\xc1"], from_router=True)
    node.view.peers.add("c")
    node.incoming.frames("c", [b"\xc1\xc1\xc1"], from_router=True)  # another source: warned of
    assert [(level, fields["source"]) for level, _, fields in node.log.lines if level == "warning"] == [
        ("warning", "b"), ("warning", "c")]
    assert [fields["times"] for level, _, fields in node.log.lines if level == "debug"] == [2, 3, 4, 5]
    assert list(node.incoming.undecodable.values()) == [5, 1]


def test_the_undecodable_counts_are_bounded() -> None:
    """A peer sending ever-new garbage must not grow the node's memory: the counts start again."""
    from actorwire.transport.node import _receive

    node = _Node()
    for i in range(_receive.UNDECODABLE_KEYS + 3):
        node.incoming._undecodable("b", f"reason {i}", 3)
    assert len(node.incoming.undecodable) == 3
    assert sum(level == "warning" for level, _, _ in node.log.lines) == _receive.UNDECODABLE_KEYS + 3


def test_a_failure_in_the_driver_is_logged_and_never_leaves_the_receiving_side() -> None:
    node = _Node()

    def broken(*args: Any) -> None:
        raise RuntimeError("boom")

    node.incoming._node_message = broken
    node.incoming.frames("b", _batch(Envelope(sender="b", target="", seq=0)), from_router=True)
    assert [(level, event) for level, event, _ in node.log.lines] == [
        ("exception", "failed to process a message; dropped it")]


def test_a_node_message_goes_to_the_driver_and_a_reply_resolves_an_ask() -> None:
    node = _Node()
    node.incoming.frames("b", _batch(Envelope(sender="b", target="", seq=0),
                                     _tell("worker/1", 0, target="x", corr=7, reply=True)), from_router=True)
    assert node.node_messages == [("b", "throttle")]
    assert node.resolved == [7]


def test_a_message_for_an_actor_that_does_not_run_here_is_refused_acked_and_its_ask_answered() -> None:
    """The sender's credit must not be held for ever, and its asker must fail at once."""
    node = _Node()
    node.incoming.frames("b", _batch(_tell("worker/1", 1, target="nobody", corr=5)), from_router=True)
    assert node.refused == [("b", "a message for 'nobody', which does not run here")]
    assert node.outbox.owed == {("b", "worker/1", "nobody"): 1}
    (name, envelope, source, message), = node.replies
    assert (name, envelope.correlation_id, source) == ("nobody", 5, "b")
    assert isinstance(message, ErrorReply) and message.code is ErrorCode.UNKNOWN_TARGET


def test_a_duplicate_is_acked_again_not_delivered_twice() -> None:
    node = _Node()
    node.incoming.frames("b", _batch(_tell("worker/1", 1)), from_router=True)
    node.incoming.frames("b", _batch(_tell("worker/1", 1)), from_router=True)
    assert node.delivered == [("b", 1)]
    assert node.outbox.owed == {("b", "worker/1", "sink"): 0}  # what the stream has handled so far


def test_a_forged_sender_is_refused_and_an_overrun_expels_the_peer() -> None:
    node = _Node(window=2)
    node.incoming.frames("b", _batch(_tell("coordinator", 1)), from_router=True)
    assert node.refused and "'coordinator', a name that node does not hold" in node.refused[0][1]
    node.incoming.frames("b", _batch(*(_tell("worker/1", seq) for seq in (1, 2, 3, 4))), from_router=True)
    # What came within the window is delivered; the record past it expels the peer and ends the batch.
    assert node.delivered == [("b", 1), ("b", 2)]
    assert len(node.expelled) == 1 and node.expelled[0][0] == "b"


def test_a_sender_not_yet_named_waits_and_is_delivered_once_the_registry_names_it() -> None:
    node = _Node()
    node.incoming.frames("b", _batch(_tell("worker/2", 1)), from_router=True)
    assert node.delivered == [] and node.incoming.parking
    node.view.apply(RegistryUpdate(added={"worker/2": "b"}))
    node.incoming.unpark()
    assert node.delivered == [("b", 1)]
    assert not node.incoming.parking


@pytest.mark.parametrize("waited, refused", [(4.0, False), (6.0, True)])
def test_a_parked_message_keeps_its_first_time_and_is_refused_after_the_staleness_timeout(
        waited: float, refused: bool) -> None:
    """Tried again while its sender is still unknown, it is parked again with the time it first came:
    else a name never given would hold its messages for ever, one beat at a time."""
    node = _Node()
    node.incoming.frames("b", _batch(_tell("worker/2", 1)), from_router=True)
    node.now += 3.0
    node.incoming.unpark()  # an update that named someone else
    assert node.refused == [] and node.incoming.parking
    node.now = 100.0 + waited
    node.incoming.unpark(node.now, staleness=5.0)
    if refused:
        assert node.refused == [("b", "a message signed 'worker/2', a name never given by the registry to that node")]
        assert not node.incoming.parking
    else:
        assert node.refused == [] and node.incoming.parking
