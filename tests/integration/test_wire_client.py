"""docs/wire-protocol.md is enough to write a client: tests/_wire_client.py (pyzmq and msgpack-python
only) joins a live system, registers, tells, asks, receives tells and acks them, over ipc and tcp+CURVE."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Callable

import pytest
import zmq.auth
from _wire_client import WireClient

from actorwire import messages as m
from actorwire.actors import ActorSystem, RuntimeConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_client_written_from_the_page_alone(transport: str, tmp_path: pathlib.Path,
                                              setenv: Callable[[str, str | None], None]) -> None:
    from _actors import Echo

    curve = None
    if transport == "tcp":
        from actorwire.transport._security import keygen

        keygen(tmp_path, "node")
        keygen(tmp_path, "client")  # every key file of the directory is on the allow-list
        setenv("ACTORWIRE_KEYS", str(tmp_path))
        server, _ = zmq.auth.load_certificate(str(tmp_path / "node.key_secret"))
        public, secret = zmq.auth.load_certificate(str(tmp_path / "client.key_secret"))
        curve = (server, public, secret)
    config = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=5.0, window=4)
    bind = "tcp://127.0.0.1:0" if transport == "tcp" else None
    with ActorSystem(config=config, bind=bind) as system:
        system.spawn(Echo(), "echo")
        endpoint = system.endpoint if transport == "ipc" else next(
            e for e in system._node.info.endpoints if e.startswith("tcp://"))
        with WireClient(endpoint, system.run_id, curve=curve, allow=str(tmp_path) if curve else None) as client:
            welcome = client.hello()
            assert welcome["type"] == "welcome" and welcome["root_node_id"] in welcome["nodes"]
            # Every node runs an introspector; names starting with "." are the runtime's (wire-protocol.md).
            names = {name: node for name, node in welcome["names"].items() if not name.startswith(".")}
            assert names == {"echo": welcome["root_node_id"]}
            assert welcome["names"][f".introspect/{welcome['root_node_id']}"] == welcome["root_node_id"]
            update = client.register(["client/1"])
            assert update == {"type": "registry_update", "added": {"client/1": client.node_id}}
            assert "client/1" in system.names()

            client.tell("client/1", "echo", {"type": "heartbeat", "rank": 0, "step_count": 7})
            assert client.ask("client/1", "echo", {"type": "sync_now"}) == {"type": "sync_now"}
            missing = client.ask("client/1", "nobody", {"type": "sync_now"})
            assert (missing["type"], missing["code"]) == ("error_reply", "unknown_target")

            # Tells to the client: more than the window of 4, so only acks let them all through.
            failures: list[BaseException] = []

            def send() -> None:
                try:
                    for step in range(12):
                        system.tell("client/1", m.Heartbeat(rank=0, step_count=step), timeout=10)
                except BaseException as exc:  # reported by the assertion below
                    failures.append(exc)

            sender = threading.Thread(target=send)
            sender.start()
            got = [client.receive(timeout=20)[1].get("step_count", 0) for _ in range(12)]  # defaults are left out
            sender.join(20)
            assert not failures and got == list(range(12))

            # Asks to the client, answered as the page says: a reply is outside the streams (its own
            # counter, never acked), so the tells after it still arrive in their stream's order.
            answers: list[m.Message] = []

            def ask() -> None:
                try:
                    for cycle in (5, 6):
                        answers.append(system.ask("client/1", m.SyncNow(cycle=cycle), timeout=10))
                    system.tell("client/1", m.Heartbeat(rank=0, step_count=99), timeout=10)
                except BaseException as exc:
                    failures.append(exc)

            asker = threading.Thread(target=ask)
            asker.start()
            for cycle in (5, 6):
                env, body = client.receive(timeout=20)
                assert body == {"type": "sync_now", "cycle": cycle} and env[4] != 0 and not env[5]
                client.reply(env, {"type": "sync_ack", "rank": 1, "step_count": cycle})
            env, body = client.receive(timeout=20)
            asker.join(20)
            assert not failures and body == {"type": "heartbeat", "rank": 0, "step_count": 99}
            assert answers == [m.SyncAck(rank=1, step_count=5), m.SyncAck(rank=1, step_count=6)]
