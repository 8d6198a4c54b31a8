"""The node's send path against the codec it inlines, on a node with no peers (no sockets are read)."""

from __future__ import annotations

import threading

import msgspec
import pytest

from actorwire import messages as m
from actorwire.messages import Codec
from actorwire.messages.runtime import NodeInfo, Refused
from actorwire.transport._errors import WrongType
from actorwire.transport._node import Node
from actorwire.transport.node import SendRaw

BATCH = m.Batch(rank=3, batch_ms=12.5, step_count=7, batch_loss=0.25)


@pytest.fixture
def node():  # type: ignore[no-untyped-def]
    node = Node(run_id="test-node")
    node.start()
    # A peer that hosts "sink" and is never reached: what is sent to it stays in its stream.
    node._view.nodes["peer-1"] = NodeInfo(node_id="peer-1", endpoints=["ipc:///nonexistent/peer.sock"],
                                          host=node.host, pid=1)
    node._view.routes["sink"] = "peer-1"
    yield node
    node.close(timeout=0.1, announce=False)


def test_a_remote_tell_is_the_record_the_codec_makes(node: Node) -> None:
    seq, record = node.send_record("flooder", "sink", BATCH, 0, None, True, "trace-1")
    assert isinstance(record, bytes)
    envelope, message = msgspec.msgpack.decode(record, type=tuple[m.Envelope, m.Batch])
    assert (envelope.sender, envelope.target, envelope.seq, envelope.trace_id, message) == \
        ("flooder", "sink", seq, "trace-1", BATCH)
    assert record == Codec().encode_record_fields("flooder", "sink", seq, 0, False, envelope.mono_ns,
                                                  envelope.wall_ns, "trace-1", BATCH)


def test_a_tell_of_something_that_is_not_a_message_is_refused_before_it_is_numbered(node: Node) -> None:
    with pytest.raises(WrongType, match="expected an actorwire message, got dict"):
        node.send_record("flooder", "sink", {"type": "batch"})  # type: ignore[arg-type]
    assert node.send_record("flooder", "sink", BATCH)[0] == 1


@pytest.mark.parametrize("module", ["actorwire.transport._node", "actorwire.transport.node._loop",
                                    "actorwire.transport.node._send"])
def test_the_node_waits_on_conditions_not_in_polling_sleeps(module: str) -> None:
    """close, wait_for, a takeover's registration and a re-homed stream polled with sleeps (5 ms, 2 ms,
    staleness/10, 1 ms): each now waits on the node's condition, which the I/O thread notifies (the
    driver and its sending side alike)."""
    import ast
    import importlib
    import pathlib

    path = pathlib.Path(importlib.import_module(module).__file__ or "")
    tree = ast.parse(path.read_text())
    sleeps = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "sleep"]
    assert sleeps == [], f"time.sleep in {path.name} at lines {sleeps}"


def test_a_refusal_made_on_a_user_thread_is_carried_out_by_the_io_thread(node: Node, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A reply on a user thread's line from a node that may not answer is refused on that thread.
    What the root does about a refusal (tell a node it removed that it is out: a send on its router)
    must run on the I/O thread, the only one that may touch a socket: it ran on the user thread."""
    sent_on: list[int] = []
    sent = threading.Event()

    def send_router(node_id: str, frames: list[bytes]) -> bool:
        sent_on.append(threading.get_ident())
        sent.set()
        return True

    monkeypatch.setattr(node._root_role, "heard_from_refused",
                        lambda peer, now: [SendRaw(peer, Refused(reason="you are out"))])
    monkeypatch.setattr(node._loop, "_send_router", send_router)
    what = "a reply to an ask it was not sent (correlation id 7)"
    node._out._refuse("peer-1", what)  # as _await_line does, on this (user) thread
    assert sent.wait(10), "the refusal was never carried out"
    assert sent_on == [node._out.io_ident] != [threading.get_ident()]
    assert node.refusals()[("peer-1", what)] == 1
