"""Who may say what: incarnations, proven senders and replies, the root's registry (real sockets).

Each test here is an attack or a fault the transport used to get wrong; the
peers that lie are raw pyzmq sockets speaking the wire protocol by hand.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from _wire_client import WireClient, batch, envelope
from conftest import TESTS, child_env, wait_until

from actorwire import messages as m
from actorwire.actors import ActorSystem, RuntimeConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
SYSTEM_CONFIG = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=5.0)

FAST = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=1.0)


def _tell_as_worker_1(system: ActorSystem, first: int, count: int) -> tuple[int, int]:
    """Run tests/_teller.py: ``count`` tells from "worker/1", then its ask; (errors, total) it was told."""
    proc = subprocess.run([sys.executable, str(TESTS / "_teller.py"), system.endpoint, system.run_id,
                           str(first), str(count)], env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors, total = proc.stdout.split()
    return int(errors), int(total)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_restarted_sender_under_a_reused_name_loses_nothing(
        transport: str, setenv: Callable[[str, str | None], None], tmp_path: pathlib.Path) -> None:
    if transport == "tcp":
        from actorwire.transport._security import keygen

        keygen(tmp_path)
        setenv("ACTORWIRE_KEYS", str(tmp_path))
        setenv("ACTORWIRE_PREFER_TCP", "1")
    bind = "tcp://127.0.0.1:0" if transport == "tcp" else None
    with ActorSystem(config=FAST, bind=bind) as system:
        from _actors import Counter

        system.spawn(Counter(), "counter")
        assert _tell_as_worker_1(system, 0, 201) == (0, 201)
        wait_until(lambda: "worker/1" not in system.names())
        # The second incarnation's sequence numbers start at 1 again: its stream is a new one.
        assert _tell_as_worker_1(system, 201, 51) == (0, 252)


# -- a peer that lies --------------------------------------------------------

def _liar(system: ActorSystem, **kw: object) -> WireClient:
    client = WireClient(system.endpoint, system.run_id, **kw)  # type: ignore[arg-type]
    welcome = client.hello()
    assert welcome["type"] == "welcome", welcome
    assert client.register(["liar/1"])["type"] == "registry_update"
    return client


def test_a_sender_name_the_source_node_does_not_hold_is_refused(system: ActorSystem) -> None:
    victim = system.inbox("victim")
    system.inbox("coordinator")  # a name held by the root itself
    with _liar(system) as liar:
        liar.tell("coordinator", "victim", {"type": "sync_now"})
        liar.tell("~someone-else/1", "victim", {"type": "sync_now"})  # another node's user thread
        liar.tell("liar/1", "victim", {"type": "sync_now"})
        got = victim.get(timeout=10)
        assert got is not None and got.envelope.sender == "liar/1"
        assert victim.poll() is None


def test_no_peer_can_tell_an_actor_what_only_its_runtime_says(system: ActorSystem,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A proven peer told the coordinator ``Down{name: "worker/1"}`` (a live rank: counted dead, its
    share handed over), and could fire an actor's timers or fail its asks the same way.  A node
    does not decode ``down``, ``timer_fired`` or ``ask_failed`` from the network; the forger's other
    messages, and everyone else's, are served."""
    victim = system.inbox("coordinator")
    forged = [{"type": "down", "name": "worker/1", "reason": "dead", "detail": "forged"},
              {"type": "timer_fired", "key": "tick", "count": 1},
              {"type": "ask_failed", "correlation_id": 1, "target": "worker/1", "request_kind": "sync_now",
               "reason": "forged"}]
    with _liar(system) as liar:
        assert liar.register(["liar/2", "liar/3", "liar/4"])["type"] == "registry_update"
        for sender, body in zip(("liar/1", "liar/2", "liar/3"), forged):
            liar.tell(sender, "coordinator", body)
        liar.tell("liar/4", "coordinator", {"type": "sync_now"})
        got = victim.get(timeout=10)
        assert got is not None and (got.envelope.sender, got.message) == ("liar/4", m.SyncNow())
        assert victim.poll() is None
    dropped = [r.getMessage() for r in caplog.records if "made only by the runtime" in r.getMessage()]
    assert {kind for kind in ("down", "timer_fired", "ask_failed") if any(f"'{kind}'" in d for d in dropped)} == {
        "down", "timer_fired", "ask_failed"}


def test_a_reply_from_a_node_the_ask_did_not_go_to_is_refused(system: ActorSystem) -> None:
    system.spawn_process({"sleeper": "_actors:Sleeper"}, env={**child_env(), "SLEEPER_SECONDS": "1"})
    real = system.ask("sleeper", m.SyncNow(), timeout=30)
    system.tell("sleeper", m.Throttle())  # the next ask waits a second for its answer
    with _liar(system) as liar:
        outcome: list[object] = []
        asker = threading.Thread(target=lambda: outcome.append(system.ask("sleeper", m.SyncNow(), timeout=30)))
        asker.start()
        deadline = time.monotonic() + 10
        while system.statistics().pending_asks < 1:  # the ask is out before the forgeries are
            assert time.monotonic() < deadline, "the ask never left"
            time.sleep(0.01)
        forged = {"type": "sync_ack", "rank": 0, "step_count": 999}
        for corr in range(1, 200):  # correlation ids are small integers: guess them all
            for sender in ("sleeper", "liar/1"):
                liar.send((envelope(sender, "anyone", corr, corr, is_reply=True), forged))
        asker.join(30)
    assert outcome == [real]


def test_a_registry_update_from_a_node_other_than_the_root_is_refused(system: ActorSystem) -> None:
    victim = system.inbox("victim")
    with _liar(system) as liar:
        liar.send((envelope(liar.node_id, "", 0), {"type": "registry_update", "removed": ["victim"],
                                                    "added": {"coordinator": liar.node_id}}))
        liar.ask("liar/1", "victim-does-not-exist", {"type": "sync_now"})  # a round trip: the update was read
    system.tell("victim", m.SyncNow())
    assert victim.get(timeout=10) is not None
    assert "coordinator" not in system.names()


def test_a_live_name_cannot_be_taken_over(system: ActorSystem) -> None:
    victim = system.inbox("victim")
    with _liar(system) as liar:
        answer = liar.register(["victim"], takeover=True)
        assert answer["type"] == "refused"
        assert "victim" in answer["reason"]
    system.tell("victim", m.SyncNow())
    assert victim.get(timeout=10) is not None


def test_a_forged_sequence_number_cannot_silence_another_sender(system: ActorSystem) -> None:
    from _actors import Counter

    system.spawn(Counter(), "counter")
    with _liar(system) as liar:
        liar.tell("worker/1", "counter", {"type": "heartbeat", "rank": 0, "step_count": 0}, seq=2**64 - 1)
        liar.tell("liar/1", "counter", {"type": "heartbeat", "rank": 0, "step_count": 0}, seq=2**64 - 1)
        assert liar.register(["liar/2"])["type"] == "registry_update"  # a round trip: the tells were read
    # The real worker/1 (another process, its own stream) loses nothing; the liar's own stream
    # could not start at 2**64-1 either (a stream starts at 1), so its heartbeat was not counted.
    assert _tell_as_worker_1(system, 0, 51) == (0, 51)


# -- bounds -------------------------------------------------------------------

def test_every_socket_caps_a_frame_at_the_message_size_before_python_sees_it() -> None:
    import zmq

    config = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=5.0, max_message_size=1 << 16)
    with ActorSystem(config=config) as system:
        with WireClient(system.endpoint, system.run_id) as liar:
            liar.send_frames([os.urandom(1 << 20)])  # before hello; libzmq drops the connection
        with _liar(system) as honest:  # the node goes on serving
            system.inbox("victim")
            honest.tell("liar/1", "victim", {"type": "sync_now"})
        node = system._node
        sockets = [node._wires.router, *(link.socket for link in node._wires.links.values())]
        assert all(sock.getsockopt(zmq.MAXMSGSIZE) == (1 << 16) + 64 for sock in sockets)


def test_a_flood_from_a_peer_that_never_said_hello_is_refused_unread_and_logged_once(
        system: ActorSystem, caplog: pytest.LogCaptureFixture) -> None:
    with WireClient(system.endpoint, system.run_id) as liar:
        record = (envelope("~x/1", "victim", 1), {"type": "sync_now"})
        for _ in range(20):
            liar.send(*[record] * 10_000)
        with _liar(system) as honest:  # another peer is served meanwhile
            victim = system.inbox("victim")
            honest.tell("liar/1", "victim", {"type": "sync_now"})
            assert victim.get(timeout=10) is not None
        wait_until(lambda: sum(n for (peer, _), n in system._node.refusals().items()
                                if peer == liar.node_id) == 20)
    lines = [r for r in caplog.records if liar.node_id in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]


def test_a_peer_that_overruns_its_credit_window_is_disconnected(setenv: Callable[[str, str | None], None]) -> None:
    from _actors import Tally

    setenv("TALLY_SECONDS", "1")
    config = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=5.0, window=16)
    with ActorSystem(config=config) as system:
        system.spawn(Tally(), "tally")
        with _liar(system) as liar:
            assert liar.hello  # it read the window it was granted in the welcome's node table
            liar.tell("liar/1", "tally", {"type": "throttle"})
            for step in range(100):  # ignores the credit it was granted
                liar.tell("liar/1", "tally", {"type": "heartbeat", "rank": 0, "step_count": step})
            wait_until(lambda: "liar/1" not in system.names())
        tally = system.ask("tally", m.SyncNow(), timeout=30)
        assert tally.step_count < 16  # type: ignore[attr-defined]


def test_a_peer_that_opens_streams_without_end_is_disconnected(system: ActorSystem) -> None:
    """Each (sender, target) a node sends on costs the receiver a stream record kept until that
    node leaves; user-thread names are the sender's to mint, so the count per node is bounded."""
    system.inbox("victim")
    system._node._streams.max_streams = 8  # the bound, small enough to reach in a test
    with _liar(system) as liar:
        for thread in range(9):
            liar.tell(f"~{liar.node_id}/thread-{thread}", "victim", {"type": "sync_now"})
        wait_until(lambda: "liar/1" not in system.names())
        assert (liar.node_id, "disconnected: it opened more than 8 streams") in system._node.refusals()


def test_refusals_reveal_no_run_id(system: ActorSystem) -> None:
    with WireClient(system.endpoint, system.run_id) as probe:
        answer = probe.hello(run_id="guess")
    assert answer == {"type": "refused", "reason": "wrong run id"}
    assert system.run_id not in repr(answer)


@pytest.mark.parametrize("node_id", ["cmd", "router"])
def test_a_node_id_that_looks_like_a_queue_command_is_just_a_node(system: ActorSystem, node_id: str) -> None:
    with WireClient(system.endpoint, system.run_id, node_id=node_id) as peer:
        assert peer.hello()["type"] == "welcome"
        assert peer.register([f"{node_id}/1"])["type"] == "registry_update"
        system.tell(f"{node_id}/1", m.Heartbeat(rank=0, step_count=5))
        assert peer.receive(timeout=10)[1] == {"type": "heartbeat", "rank": 0, "step_count": 5}
        assert peer.ask(f"{node_id}/1", "nobody", {"type": "sync_now"})["type"] == "error_reply"
    with WireClient(system.endpoint, system.run_id) as later:  # the I/O thread is still serving
        assert later.hello()["type"] == "welcome"


def test_a_member_believes_a_new_name_only_once_the_root_has_registered_it(system: ActorSystem) -> None:
    member = ActorSystem(join=system.endpoint, run_id=system.run_id, config=SYSTEM_CONFIG)
    try:
        victim = member.inbox("victim")
        with _liar(system) as liar:
            to_member = liar.link(member._node.info.endpoints[0])
            # "coordinator" is nobody's: it waits for the root to register it, which never happens.
            to_member.send(batch((envelope("coordinator", "victim", 1), {"type": "sync_now", "cycle": 1})))
            # A name the root registers now may reach the member before the root's update does:
            # it waits for the update, then arrives.
            assert liar.register(["liar/2"])["type"] == "registry_update"
            to_member.send(batch((envelope("liar/2", "victim", 1), {"type": "sync_now", "cycle": 2})))
            got = victim.get(timeout=10)
            assert got is not None and (got.envelope.sender, got.message) == ("liar/2", m.SyncNow(cycle=2))
            wait_until(lambda: any("never given by the registry" in what for (peer, what) in member._node.refusals()
                                    if peer == liar.node_id))
            assert victim.poll() is None
    finally:
        member.shutdown()


@pytest.mark.parametrize("framing", ["one batch", "two messages"])
def test_the_update_that_follows_the_welcome_at_once_is_the_roots(tmp_path: pathlib.Path, framing: str) -> None:
    """A joining member used to refuse the root's update that came in with (or right behind) its
    welcome as "not from the root": it took the connection for the root's only once it had read
    a batch, so the names in that update were never known there."""
    import msgpack
    import zmq

    from actorwire.transport._node import Node

    ctx = zmq.Context()
    root = ctx.socket(zmq.ROUTER)
    root.setsockopt(zmq.LINGER, 0)
    root.bind(f"ipc://{tmp_path}/fake-root")
    far = {"node_id": "far", "endpoints": [f"ipc://{tmp_path}/far"], "host": "h", "pid": 1}
    welcome = {"type": "welcome", "protocol_version": 1, "run_id": "r", "root_node_id": "fake-root",
               "nodes": {"far": far}, "names": {}, "heartbeat_interval": 0.2, "staleness_timeout": 5.0}
    update = {"type": "registry_update", "added": {"far/actor": "far"}}
    member = Node(run_id="r", root_endpoint=f"ipc://{tmp_path}/fake-root", config=SYSTEM_CONFIG)
    try:
        threading.Thread(target=member.start, daemon=True).start()
        assert root.poll(10_000), "the member said no hello"
        identity, *_ = root.recv_multipart()
        records = [(envelope("fake-root", "", 0), welcome), (envelope("fake-root", "", 0), update)]
        if framing == "one batch":
            root.send_multipart([identity, batch(*records)])
        else:
            for env, body in records:
                root.send_multipart([identity, msgpack.packb(env), msgpack.packb(body)])
        wait_until(lambda: member.names() == ["far/actor"] or bool(member.refusals()), timeout=10)
        assert member.names() == ["far/actor"] and member.refusals() == {}
    finally:
        member.close(announce=False)
        ctx.destroy(linger=0)


# -- who may welcome ------------------------------------------------------------

def _forged_welcome(liar: WireClient, run_id: str) -> tuple[list[object], dict[str, object]]:
    """A Welcome in which ``liar`` names itself the root and the host of "victim"."""
    return (envelope(liar.node_id, "", 0), {
        "type": "welcome", "protocol_version": 1, "run_id": run_id, "root_node_id": liar.node_id,
        "nodes": {liar.node_id: liar.node_info()}, "names": {"victim": liar.node_id},
        "heartbeat_interval": 0.2, "staleness_timeout": 5.0})


def test_a_welcome_sent_to_the_root_by_a_member_is_refused(system: ActorSystem) -> None:
    """Only the root welcomes.  A member that sent the root a Welcome of its own was taken at its
    word: the root's view made the liar its root and routed the root's own "victim" to it."""
    system.inbox("victim")
    node = system._node
    with _liar(system) as liar:
        liar.send(_forged_welcome(liar, system.run_id))
        wait_until(lambda: (liar.node_id, "a welcome from a peer that is not this node's root") in node.refusals())
        assert liar.register(["liar/2"])["type"] == "registry_update"  # still served, after it
    assert node._view.root_id == node.node_id
    assert node._view.routes["victim"] == node.node_id


def test_a_welcome_sent_to_a_member_by_another_member_is_refused(system: ActorSystem) -> None:
    """A member's view changes only by what its root sends over the join connection: another member
    that says hello on the member's own socket and then welcomes it could take its routes."""
    from actorwire.transport._node import Node

    system.inbox("victim")
    member = Node(run_id=system.run_id, root_endpoint=system.endpoint, config=SYSTEM_CONFIG)
    member.start()
    try:
        member.wait_for("victim", timeout=10)
        with _liar(system) as liar:
            link = liar.link(member.info.endpoints[0])
            link.send(batch(_forged_welcome(liar, system.run_id)))
            wait_until(lambda: (liar.node_id, "a welcome from a peer that is not this node's root")
                       in member.refusals())
            link.close(linger=0)
        assert member._view.root_id == system._node.node_id
        assert member._view.routes["victim"] == system._node.node_id
        assert not member.root_gone.is_set()
    finally:
        member.close(timeout=1.0)
