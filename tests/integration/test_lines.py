"""Lines: a user thread's own socket for the asks it waits on (transport/_lines.py), on real processes.

The asking side keeps its stream in order and learns every failure through
the node; the receiving side admits a line only as it would admit the node
itself, and takes nothing but asks on it.  The peers that lie are raw pyzmq
sockets (tests/_wire_client.py).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable

import msgpack
import pytest
from _wire_client import NODE, WireClient, batch, envelope
from conftest import TESTS, child_env, wait_until

from actorwire import messages as m
from actorwire.actors import ActorSystem, RuntimeConfig
from actorwire.transport import ActorDead, AskTimeout, SystemClosed
from actorwire.transport._errors import InvalidArgument
from actorwire.transport._node import Node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
CONFIG = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=5.0)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_asks_on_lines_keep_each_threads_stream_in_order(
        transport: str, setenv: Callable[[str, str | None], None], tmp_path: pathlib.Path) -> None:
    """Tells go through the node's link, asks on the thread's line: an ask may take the line only once
    everything before it in its stream is handled, so no ask overtakes a tell (the receiver would see
    a gap and wait for a re-send).  Over tcp the lines are CURVE clients like the node's own link."""
    from _actors import Counter

    if transport == "tcp":
        from actorwire.transport._security import keygen

        keygen(tmp_path)
        setenv("ACTORWIRE_KEYS", str(tmp_path))
        setenv("ACTORWIRE_PREFER_TCP", "1")
    bind = "tcp://127.0.0.1:0" if transport == "tcp" else None
    with ActorSystem(config=CONFIG, bind=bind) as system:
        assert system.endpoint.startswith(transport)
        system.spawn(Counter(), "counter")
        proc = subprocess.run([sys.executable, str(TESTS / "_asker.py"), system.endpoint, system.run_id,
                               "200", "3"], env=child_env(), capture_output=True, text=True, timeout=90)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip() == "ok"
        node = system._node
        assert len(node._line_gate.peers) >= 3  # the threads' asks came on lines
        assert node._streams.gaps == 0  # and none came ahead of a tell before it


def _waiting_on_its_line(system: ActorSystem) -> tuple[threading.Thread, list[BaseException]]:
    """A thread asking "sleeper" a Throttle (never answered), returned once its ask is pending."""
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            system.ask("sleeper", m.Throttle(), timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    wait_until(lambda: len(system._node._asks) > 0)
    return asker, outcome


def test_an_ask_on_a_line_fails_when_its_target_dies() -> None:
    with ActorSystem(config=CONFIG) as system:
        child = system.spawn_process({"sleeper": "_actors:Sleeper"}, env={**child_env(), "SLEEPER_SECONDS": "60"})
        system.ask("sleeper", m.SyncNow(), timeout=30)  # the line is open
        asker, outcome = _waiting_on_its_line(system)
        child.kill()
        asker.join(30)
        assert not asker.is_alive() and isinstance(outcome[0], ActorDead)


def test_an_ask_on_a_line_times_out_with_the_targets_name() -> None:
    with ActorSystem(config=CONFIG) as system:
        system.spawn_process({"sleeper": "_actors:Sleeper"}, env={**child_env(), "SLEEPER_SECONDS": "5"})
        system.ask("sleeper", m.SyncNow(), timeout=30)
        with pytest.raises(AskTimeout, match="sleeper"):
            system.ask("sleeper", m.Throttle(), timeout=0.5)  # Throttle is never answered


def test_shutdown_ends_an_ask_waiting_on_a_line() -> None:
    system = ActorSystem(config=CONFIG)
    try:
        system.spawn_process({"sleeper": "_actors:Sleeper"}, env={**child_env(), "SLEEPER_SECONDS": "60"})
        system.ask("sleeper", m.SyncNow(), timeout=30)
        asker, outcome = _waiting_on_its_line(system)
    finally:
        system.shutdown(timeout=2.0, clean=False)
    asker.join(30)
    assert not asker.is_alive() and isinstance(outcome[0], SystemClosed)


def test_a_node_id_holding_the_line_mark_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="may not contain"):
        Node(run_id="r", node_id="host\x1f1")


# -- lines that lie ------------------------------------------------------------


def _member(system: ActorSystem, name: str = "liar/1") -> WireClient:
    client = WireClient(system.endpoint, system.run_id)
    assert client.hello()["type"] == "welcome"
    assert client.register([name])["type"] == "registry_update"
    return client


def _refused(system: ActorSystem, peer: str, reason: str) -> bool:
    return any(p == peer and reason in why for (p, why) in system._node.refusals())


def test_an_honest_line_is_answered_on_the_line() -> None:
    with ActorSystem(config=CONFIG) as system:
        from _actors import Echo

        system.spawn(Echo(), "echo")
        with _member(system) as client:
            line = client.line(system.endpoint)
            assert client.line_ask(line, "liar/1", "echo", {"type": "sync_now"}) == {"type": "sync_now"}


def test_a_line_that_does_not_say_hello_first_is_refused() -> None:
    with ActorSystem(config=CONFIG) as system:
        victim = system.inbox("victim")
        with _member(system) as client:
            import zmq

            line = client.ctx.socket(zmq.DEALER)
            line.setsockopt(zmq.LINGER, 0)
            line.setsockopt(zmq.IDENTITY, f"{client.node_id}\x1f1".encode())
            line.connect(system.endpoint)
            line.send(batch((envelope("liar/1", "victim", 1), {"type": "sync_now"})))
            wait_until(lambda: _refused(system, client.node_id, "did not say hello"))
        assert victim.poll() is None


def test_a_line_whose_hello_names_another_node_is_refused() -> None:
    with ActorSystem(config=CONFIG) as system:
        victim = system.inbox("victim")
        with _member(system) as client, _member(system, "liar/2") as other:
            line = client.line(system.endpoint, hello_as=other.node_id)
            line.send(batch((envelope("liar/1", "victim", 1, 7), {"type": "sync_now"})))
            wait_until(lambda: _refused(system, client.node_id, "not a member")
                        or _refused(system, client.node_id, "did not say hello"))
        assert victim.poll() is None


def test_a_line_from_a_node_that_never_joined_is_refused() -> None:
    with ActorSystem(config=CONFIG) as system:
        stranger = WireClient(system.endpoint, system.run_id)  # never says hello to the root
        with stranger:
            line = stranger.line(system.endpoint)  # kept: the socket closes with the client
            wait_until(lambda: _refused(system, stranger.node_id, "not a member"))
            assert not line.closed


def test_a_line_carries_asks_only() -> None:
    with ActorSystem(config=CONFIG) as system:
        victim = system.inbox("victim")
        with _member(system) as client:
            line = client.line(system.endpoint)
            update = {"type": "registry_update", "removed": ["victim"], "added": {}}
            line.send(batch((envelope(client.node_id, NODE, 0), update),
                            (envelope("liar/1", "victim", 1, 9, is_reply=True), {"type": "sync_now"})))
            wait_until(lambda: _refused(system, client.node_id, "lines carry asks"))
        assert "victim" in system.names() and victim.poll() is None


def test_a_line_that_comes_before_the_roots_word_of_its_node_is_held_not_refused() -> None:
    """A member learns of a new node from the root's update, which travels another way than the new
    node's line to it and may come second (``actorwire status`` joins and asks every node at once).
    The member holds such a line until the update names its node, then answers on it: refused, the
    ask waited for the asker's re-send through the node (``retransmit_after``, 2 s) and status came
    late.  Here the line comes strictly first: the client says hello to the member before the root."""
    from _actors import Echo

    with ActorSystem(config=CONFIG) as root, \
            ActorSystem(run_id=root.run_id, join=root.endpoint, config=CONFIG) as member:
        member.spawn(Echo(), "echo")
        wait_until(lambda: "echo" in root.names())
        with WireClient(root.endpoint, root.run_id) as client:
            line = client.line(member._node.info.endpoints[0])
            client.corr += 1
            corr = client.corr
            line.send(batch((envelope("early/1", "echo", client.next_seq("early/1", "echo"), corr),
                             {"type": "sync_now"})))
            wait_until(lambda: client.node_id in member._node._view.peers)  # the member read the hello
            assert client.hello()["type"] == "welcome"
            assert client.register(["early/1"])["type"] == "registry_update"
            assert line.poll(10_000), "the member refused the line (no answer on it)"
            (env, body), = msgpack.unpackb(line.recv())
            assert env[5] and env[4] == corr and body == {"type": "sync_now"}
            assert not _refused(member, client.node_id, "not a member")


def test_a_held_line_whose_node_never_joins_is_refused_after_the_staleness_timeout() -> None:
    with ActorSystem(config=CONFIG) as root, \
            ActorSystem(run_id=root.run_id, join=root.endpoint, config=CONFIG) as member:
        with WireClient(root.endpoint, root.run_id) as stranger:
            line = stranger.line(member._node.info.endpoints[0])
            wait_until(lambda: _refused(member, stranger.node_id, "not a member"), timeout=30)
            assert line.poll(5_000), "the refusal was not sent on the line"
            (_, body), = msgpack.unpackb(line.recv())
            assert body["type"] == "refused"
