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
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORWIRE_")}
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

    shown = _cli(env, "status", "--run", run_id)
    assert shown.returncode == 0, shown.stderr
    for text in ("nodes", "ranks of coordinator", "training", "weights/r2/producer/0", "phase running"):
        assert text in shown.stdout, shown.stdout

    top = _cli(env, "top", "--run", run_id, "--count", "2", "--interval", "0.3")
    assert top.returncode == 0, top.stderr
    assert "ranks of coordinator" in top.stdout and "msg/s" in top.stdout


def test_status_without_a_run_says_so_in_one_line(tmp_path: pathlib.Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = {**os.environ, "ACTORWIRE_RUNTIME_DIR": str(run_dir)}
    proc = _cli(env, "status")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("actorwire status: no run of this user is running on this host; start one "
                                   "(actorwire demo), or give --join ENDPOINT --run-id ID for a run elsewhere")
