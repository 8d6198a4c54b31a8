"""`actorwire status` and `actorwire top` against a live demo: the view a user gets of a running system."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def demo() -> Iterator[tuple[str, dict[str, str]]]:
    """A demo in the middle of its training: (its run id, the environment to reach it with)."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="aw", dir="/tmp"))  # short: ipc socket paths are bounded
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORWIRE_") or k == "ACTORWIRE_DEATH_DIR"}
    env["TMPDIR"] = str(tmp)
    proc = subprocess.Popen([sys.executable, "-m", "actorwire", "demo", "--epochs", "40"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        run_id = re.match(r"run (\w+):", first).group(1)  # type: ignore[union-attr]
        for line in proc.stdout:  # bounded by the test's timeout
            if line.startswith("    0 "):  # every worker joined and an epoch is done
                break
        yield run_id, env
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            proc.stdout.close()
            shutil.rmtree(tmp, ignore_errors=True)


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actorwire", *argv], capture_output=True, text=True, timeout=60,
                          env={**env, "COLUMNS": "160"})


def test_status_and_top_show_every_node_actor_and_rank_of_a_live_demo(demo: tuple[str, dict[str, str]]) -> None:
    run_id, env = demo
    proc = _cli(env, "status", "--run", run_id[:6], "--json", "--window", "0.5")
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    nodes = view["nodes"]
    assert len(nodes) == 4 and view["silent"] == []  # the demo's process and its three workers
    (root,) = [n for n in nodes if n["is_root"]]
    assert sorted(m["liveness"] for m in root["members"] if m["actors"]) == ["up"] * 4
    (coordinator,) = [a for a in root["actors"] if a["name"] == "coordinator"]
    assert coordinator["detail"]["phase"] == "running"
    assert [r["state"] for r in coordinator["detail"]["ranks"]] == ["training"] * 3
    assert coordinator["by_kind"]["batch"] > 0 and view["rates"][f"{root['node_id']}/coordinator"] > 0
    producers = sorted(a["name"] for n in nodes for a in n["actors"] if "producer" in a["name"])
    assert producers == [f"weights/r{r}/producer/0{io}" for r in range(3) for io in ("", "/io")]

    # Piped (no COLUMNS): nothing wraps mid-word ("coordin/ator/io" at 80 columns), and the ranks and
    # the coordinator's phase come first.
    env_piped = {k: v for k, v in env.items() if k != "COLUMNS"}
    shown = subprocess.run([sys.executable, "-m", "actorwire", "status", "--run", run_id, "--all"],
                           capture_output=True, text=True, timeout=60, env=env_piped)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1].startswith("coordinator: phase running, epoch ") and lines[2].strip() == "ranks", shown.stdout
    for text in ("nodes", "training", "weights/r2/producer/0/io", "weights/r0/consumer/0/io"):
        assert text in shown.stdout, shown.stdout
    brief = _cli(env, "status", "--run", run_id)
    assert "nodes: root and 4 member(s) up" in brief.stdout or "nodes: root and 3 member(s) up" in brief.stdout, \
        brief.stdout

    top = _cli(env, "top", "--run", run_id, "--count", "2", "--interval", "0.3")
    assert top.returncode == 0, top.stderr
    assert "ranks" in top.stdout and "msg/s" in top.stdout


def _pane(server: str, session: str) -> str:
    return subprocess.run(["tmux", "-L", server, "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, timeout=10).stdout


def _wait_pane(server: str, session: str, text: str, seconds: float = 30) -> str:
    import time

    deadline = time.monotonic() + seconds
    while True:
        screen = _pane(server, session)
        if text in screen or time.monotonic() > deadline:
            return screen
        time.sleep(0.2)  # a terminal's screen: nothing announces a redraw


def test_top_in_a_real_80x24_terminal_leads_with_the_ranks_quits_on_q_and_ends_with_the_run(
        demo: tuple[str, dict[str, str]]) -> None:
    """In an 80x24 terminal every cell of `top` wrapped mid-word and the ranks and the coordinator's phase
    never appeared on screen; `q` did nothing; after the run ended `top` kept redrawing empty tables."""
    if shutil.which("tmux") is None:
        pytest.skip("no tmux here: apt-get install -y tmux")
    run_id, env = demo
    server = f"aw-test-{os.getpid()}"
    command = " ".join([sys.executable, "-m", "actorwire", "top", "--run", run_id])
    script = f"{command}; echo TOP-EXITED $?; sleep 60"
    tmux_env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    tmux_env["TERM"] = "xterm-256color"
    try:
        for session in ("first", "second"):
            subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "80",
                            "-y", "24", script], env=tmux_env, check=True, timeout=10)
        screen = _wait_pane(server, "first", "last report")
        lines = screen.splitlines()
        assert any(line.startswith("coordinator: phase running, epoch ") for line in lines[:3]), screen
        assert sum(" training " in line for line in lines[:12]) == 3, screen  # every rank, on the first screen
        assert all(len(line) <= 80 for line in lines)
        assert not any(line.rstrip().endswith(("coordin", "weights/r")) for line in lines), screen  # no mid-word wrap
        subprocess.run(["tmux", "-L", server, "send-keys", "-t", "first", "q"], check=True, timeout=10)
        assert "TOP-EXITED 0" in _wait_pane(server, "first", "TOP-EXITED", 15), _pane(server, "first")
        _wait_pane(server, "second", "last report")
        pids = [int(p) for p in subprocess.run(["pgrep", "-f", "actorwire demo"], capture_output=True,
                                                text=True).stdout.split()]
        for pid in pids:  # the demo of this test: the one whose environment has this TMPDIR
            try:
                if f"TMPDIR={env['TMPDIR']}".encode() in pathlib.Path(f"/proc/{pid}/environ").read_bytes():
                    os.kill(pid, signal.SIGINT)
            except OSError:
                pass
        screen = _wait_pane(server, "second", "TOP-EXITED", 60)
        assert f"run {run_id} ended" in screen and "TOP-EXITED 0" in screen, screen
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, timeout=10)


def test_two_runs_are_told_apart_by_start_time_and_command(tmp_path: pathlib.Path) -> None:
    """With two runs, the refusal named only their ids and pids."""
    from actorwire.actors.cli._status import _describe

    line = _describe({"run_id": "abc", "pid": os.getpid(), "started_ns": 0})
    assert line.startswith("abc (started ") and f"pid {os.getpid()}: " in line
    assert "python" not in line.split(": ", 1)[1].split()[0]  # the command, not the interpreter


def test_status_without_a_run_says_so_in_one_line(tmp_path: pathlib.Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = {**os.environ, "ACTORWIRE_RUNTIME_DIR": str(run_dir)}
    proc = _cli(env, "status")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("actorwire status: no run of this user is running on this host; start one "
                                   "(actorwire demo), or give --join ENDPOINT --run-id ID for a run elsewhere")
