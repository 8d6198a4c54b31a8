"""Who may say what: incarnations, proven senders and replies, the root's registry (real sockets).

Each test here is an attack or a fault the transport used to get wrong; the
peers that lie are raw pyzmq sockets speaking the wire protocol by hand.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from conftest import TESTS

from actorwire import messages as m
from actorwire.actors import ActorSystem, RuntimeConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

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
