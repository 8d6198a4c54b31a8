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
from _wire_client import WireClient, envelope
from conftest import TESTS

from actorwire import messages as m
from actorwire.actors import ActorSystem, RuntimeConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
SYSTEM_CONFIG = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=5.0)

FAST = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=1.0)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _tell_as_worker_1(system: ActorSystem, first: int, count: int) -> tuple[int, int]:
    """Run tests/_teller.py: ``count`` tells from "worker/1", then its ask; (errors, total) it was told."""
    proc = subprocess.run([sys.executable, str(TESTS / "_teller.py"), system.endpoint, system.run_id,
                           str(first), str(count)], env=_env(), capture_output=True, text=True, timeout=60)
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
        _wait_until(lambda: "worker/1" not in system.names())
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


def test_a_reply_from_a_node_the_ask_did_not_go_to_is_refused(system: ActorSystem) -> None:
    system.spawn_process({"sleeper": "_actors:Sleeper"}, env={**_env(), "SLEEPER_SECONDS": "1"})
    real = system.ask("sleeper", m.SyncNow(), timeout=30)
    system.tell("sleeper", m.Throttle())  # the next ask waits a second for its answer
    with _liar(system) as liar:
        outcome: list[object] = []
        asker = threading.Thread(target=lambda: outcome.append(system.ask("sleeper", m.SyncNow(), timeout=30)))
        asker.start()
        time.sleep(0.2)
        forged = {"type": "sync_ack", "rank": 0, "step_count": 999}
        for corr in range(1, 200):  # correlation ids are small integers: guess them all
            for sender in ("sleeper", "liar/1"):
                liar.send((envelope(sender, "anyone", liar.next_seq(sender), corr, is_reply=True), forged))
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
    # The real worker/1 (another process, its own stream) loses nothing.
    assert _tell_as_worker_1(system, 0, 51) == (0, 52)
