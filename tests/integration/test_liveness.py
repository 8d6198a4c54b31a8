"""Load is not death: liveness comes from libzmq's heartbeats, not from Python.

Every process here runs ``RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=1.0)``:
libzmq drops a silent connection after 0.5 s and a drop not healed 0.5 s later is
a death, so a stop is reported about 1 s after it began (docs/wire-protocol.md,
"Liveness").  A saturated process is held for ten times that and must not be.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from conftest import TESTS
from test_multiprocess import ENV, attached, no_leaks  # noqa: F401  (the fixture is used by name)

from actorwire import messages as m
from actorwire.actors import Actor, ActorSystem, Context, RuntimeConfig, handler
from actorwire.transport._endpoints import run_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FAST = RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=1.0)
SYSTEM_CONFIG = FAST
HOLD = 10.0  # seconds a saturated process holds the GIL: ten staleness timeouts


def test_a_member_whose_python_is_saturated_is_not_declared_dead(system: ActorSystem) -> None:
    inbox = system.inbox("watcher")
    proc = attached(system, {"hog": "_actors:Hog"}, env={"HOG_SECONDS": str(HOLD)})
    try:
        pid = system.ask("hog", m.SyncNow(), timeout=10).rank  # type: ignore[attr-defined]
        inbox.watch("hog")
        system.tell("hog", m.Throttle())  # 4 threads spin, one C call holds the GIL for 10 s
        assert inbox.get(timeout=HOLD + 1.0) is None  # no Down: the process is slow, not dead
        assert system.ask("hog", m.SyncNow(), timeout=10).rank == pid  # type: ignore[attr-defined]
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_members_do_not_lose_a_root_whose_python_is_saturated(
        transport: str, setenv: Callable[[str, str | None], None], tmp_path: os.PathLike[str]) -> None:
    if transport == "tcp":  # CURVE on, as tcp always is by default
        from actorwire.transport._security import keygen

        keygen(tmp_path)
        setenv("ACTORWIRE_KEYS", str(tmp_path))
    bind = "tcp://127.0.0.1:0" if transport == "tcp" else ""
    with subprocess.Popen([sys.executable, str(TESTS / "_hog_root.py"), bind], env={**os.environ, **ENV},
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as root:
        run_id = ""
        try:
            assert root.stdout is not None
            endpoint, run_id = root.stdout.readline().split()
            assert endpoint.startswith(transport)
            with ActorSystem(join=endpoint, run_id=run_id, config=FAST) as member:
                inbox = member.inbox("watcher")
                member.wait_for("hog", timeout=10)
                inbox.watch("hog")
                member.tell("hog", m.Throttle())
                assert inbox.get(timeout=HOLD + 1.0) is None
                assert not member._node.root_gone.is_set()  # the member is not headless
                assert member.ask("hog", m.SyncNow(), timeout=10).rank == root.pid  # type: ignore[attr-defined]
        finally:
            root.kill()
            root.wait(10)
            if run_id:  # the killed root's socket and run file (its members removed their own)
                shutil.rmtree(run_dir(run_id), ignore_errors=True)


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL])
def test_a_stopped_or_killed_member_is_still_declared(system: ActorSystem, sig: signal.Signals) -> None:
    inbox = system.inbox("watcher")
    proc = attached(system, {"victim": "_actors:Echo"})
    try:
        assert system.ask("victim", m.SyncNow(), timeout=10) == m.SyncNow()
        inbox.watch("victim")
        struck = time.monotonic()
        os.kill(proc.pid, sig)
        got = inbox.get(timeout=10)
        took = time.monotonic() - struck
        assert got is not None and isinstance(got.message, m.Down)
        if sig is signal.SIGSTOP:  # it still runs: libzmq's heartbeats time out, the grace passes
            assert got.message.reason is m.DownReason.UNREACHABLE
            assert "libzmq's heartbeats timed out" in got.message.detail
            assert took >= 0.9  # never before the connection could have been judged lost
        else:  # its socket closed and its pid is gone
            assert got.message.reason is m.DownReason.DEAD
            assert "no longer exists" in got.message.detail
    finally:
        proc.kill()
        proc.wait(10)


def test_a_member_stopped_past_the_grace_is_told_it_is_out_when_it_resumes(system: ActorSystem) -> None:
    """A stop past the grace removes the member; resumed, it would carry on alone (its connection to
    the root comes back, and a rank only warns about a silent coordinator: load is not death).  The
    root tells it it is out when it is heard from again, so its actors see the root's go down and it
    leaves."""
    anchor = system.inbox("anchor")
    watcher = system.inbox("watcher")
    proc = attached(system, {"prober": "_actors:Prober"})
    try:
        watcher.watch("prober")
        assert anchor.get(timeout=10) is not None  # it reports
        os.kill(proc.pid, signal.SIGSTOP)
        got = watcher.get(timeout=10)
        assert got is not None and got.message.reason is m.DownReason.UNREACHABLE
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=20) == 0  # told it is out: its anchor went down, and it left
    finally:
        proc.kill()
        proc.wait(10)


class _SlowSink(Actor):
    """Takes 0.2 ms of CPU per heartbeat: the root's I/O thread shares the GIL with it."""

    def __init__(self) -> None:
        self.count = 0

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        self.count += 1
        end = time.perf_counter() + 0.0002
        while time.perf_counter() < end:
            pass


def test_a_member_that_leaves_cleanly_behind_a_backlog_is_not_declared_dead(system: ActorSystem) -> None:
    """A member with 6,000 actors exits cleanly: 6,000 ``Unregister`` and a ``NodeExiting`` leave it in
    a burst and its process ends while the root still reads them.  The root judged the closed
    connection of a process that no longer exists at once: the node was declared dead ("process ...
    no longer exists", its last 400-6,000 names down as ``dead``) and the rest of its burst refused
    ("a batch from a peer that did not say hello", 392-5,960 times).  The verdict now waits until the
    root's routers are read."""
    n = 6000
    sink = _SlowSink()
    system.spawn(sink, "sink")
    watcher = system.inbox("watcher")
    last = f"box/{n - 1}"  # the last name unregistered: the one a verdict read too early takes down
    with subprocess.Popen([sys.executable, str(TESTS / "_leaver.py"), system.endpoint, system.run_id, str(n)],
                          env={**os.environ, **ENV}, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            system.wait_for(last, timeout=30)
            watcher.watch(last)
            assert proc.wait(timeout=90) == 0
            got = watcher.get(timeout=30)
            assert got is not None and isinstance(got.message, m.Down)
            assert got.message.reason is m.DownReason.EXITED, got.message
            assert system._node.refusals() == {}
            assert sink.count == n
        finally:
            proc.kill()
