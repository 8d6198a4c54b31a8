"""``actorwire demo``: a coordinator and three CPU workers train data-parallel, with and without a loss."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
from conftest import TESTS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actorwire", "demo", *args], capture_output=True, text=True,
                          timeout=170)


def _epochs(stdout: str) -> list[int]:
    return [int(line.split()[0]) for line in stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\.\d+", line)]


def test_demo_trains_and_ends_cleanly(tmp_path: pathlib.Path) -> None:
    proc = _demo("--record", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    (run,) = tmp_path.iterdir()
    assert f"recorded into {run}:" in proc.stdout
    last = proc.stdout.splitlines()[-1]  # how to run the CLI, also when its venv is not active
    assert last.startswith("more: `") and "actorwire --help" in last
    # Every recorded actor replays exactly, with files, shared memory and CUDA sealed off.
    sealed = subprocess.run([sys.executable, str(TESTS / "_replay_sealed.py"), str(tmp_path)], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr[-3000:]
    lines = sealed.stdout.splitlines()
    actors = {line.split(":")[0] for line in lines}
    assert actors >= {"coordinator", *(f"weights/r{r}/{role}/0" for r in range(3) for role in ("producer", "consumer"))}
    assert all(line.endswith(" 0 divergences") and " 0 messages" not in line for line in lines), sealed.stdout
    assert {f"worker/{r}" for r in range(3)} <= actors  # the embedded Worker's protocol is recorded too
    # The timeline: a track per rank with its batches and syncs, and the ranks' sends as flow arrows.
    from actorwire.actors.cli._log_export import perfetto_trace

    events = perfetto_trace([str(run)])["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    slices = {(tracks[e["tid"]], e["name"]) for e in events if e["ph"] == "X" and e.get("cat") == "rank"}
    assert {(f"worker/{r}", kind) for r in range(3) for kind in ("batch", "sync")} <= slices
    assert ("worker/0", "eval") in slices and ("worker/0", "checkpoint") in slices
    starts = {e["id"]: tracks[e["tid"]] for e in events if e["ph"] == "s"}
    assert {starts[e["id"]] for e in events if e["ph"] == "f"} >= {"worker/0", "worker/1", "worker/2"}
    assert _epochs(proc.stdout) == [0, 1, 2, 3]
    # Evals are numbered as the epoch table is (0-based): they were "after epoch 2/4" against epochs 0-3.
    assert "eval after epoch 1:" in proc.stdout and "eval after epoch 3:" in proc.stdout, proc.stdout
    assert "no rank lost" in proc.stdout
    assert "mse" not in proc.stdout.splitlines()[1]  # one loss column (loss and mse were always the same)
    assert "worker exit codes {0: 0, 1: 0, 2: 0}" in proc.stdout
    losses = [float(line.split()[1]) for line in proc.stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\.\d+", line)]
    assert losses[-1] < losses[0]  # it learns


@pytest.mark.parametrize("epoch", [0, 2])
def test_killed_rank_is_recovered_and_the_coordinator_replays(epoch: int, tmp_path: pathlib.Path) -> None:
    summary = tmp_path / "summary.json"
    proc = _demo("--kill-rank", "1", "--at-epoch", str(epoch), "--record", str(tmp_path / "rec"),
                 "--summary", str(summary))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    # The recovery told as it happens, and as data: the loss, the group formed again, the outcome.
    assert re.search(rf"-- rank 1 lost in epoch {epoch} \(.+\); 2 rank\(s\) go on", proc.stdout), proc.stdout
    assert re.search(r"-- the group formed again: ranks \[0, 2\], world size 2, \d+\.\d\d s after the loss",
                     proc.stdout), proc.stdout
    assert "run ended: every epoch trained (4/4), recovered from 1 lost rank(s) (rank 1 lost in epoch" in proc.stdout
    import json

    data = json.loads(summary.read_text())
    assert (data["complete"], data["recovered"], data["exit_code"], data["reason"]) == (True, True, 0, "completed")
    assert data["epochs_trained"] == data["num_epochs"] == 4 and list(data["lost"]) == ["1"]
    assert data["finished"] == [0, 2]
    assert f"SIGKILLed rank 1 during epoch {epoch}" in proc.stdout
    # The kill lands inside the epoch: the samples rank 1 had not trained were handed over (the
    # kill used to land after the ~50 ms epochs had ended, and nothing failed over).
    assert f"a rank was lost during epoch {epoch}" in proc.stdout, proc.stdout
    assert "lost rank(s): [1]" in proc.stdout
    assert _epochs(proc.stdout) == [0, 1, 2, 3]
    replay = subprocess.run([sys.executable, "-m", "actorwire", "replay", str(tmp_path / "rec"), "--actor", "coordinator"],
                            capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert replay.stdout.strip().endswith("messages replayed, 0 divergences")


def test_demo_rejects_bad_arguments() -> None:
    proc = _demo("--kill-rank", "7")
    assert proc.returncode == 2
    assert "--kill-rank must be between 0 and 2, got 7" in proc.stdout
    proc = _demo("--kill-rank", "0", "--at-epoch", "9")
    assert proc.returncode == 2 and "--at-epoch must be 'start' or between 0 and 3, got 9" in proc.stdout
    proc = _demo("--min-world-size", "4")
    assert proc.returncode == 2 and "--min-world-size must be at most --workers (3), got 4" in proc.stdout
    proc = _demo("--summary", "/nonexistent-dir/s.json")
    assert proc.returncode == 2 and "--summary /nonexistent-dir/s.json: no directory /nonexistent-dir" in proc.stdout


def test_a_rank_killed_before_it_joined_leaves_the_run_to_the_others() -> None:
    """It used to stall the run for a minute (34 of 34 runs) and exit 1 without naming the rank."""
    proc = _demo("--kill-rank", "1", "--at-epoch", "start")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "SIGKILLed rank 1 at start, before it joined" in proc.stdout
    assert _epochs(proc.stdout) == [0, 1, 2, 3] and "lost rank(s): [1]" in proc.stdout
    assert "the run stalled" not in proc.stdout


def test_too_few_ranks_to_start_ends_the_run_with_one_line_naming_the_rank() -> None:
    proc = _demo("--kill-rank", "1", "--at-epoch", "start", "--min-world-size", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "the run cannot go on (too_few_ranks): rank 1 killed by signal 9 before it joined" in proc.stdout
    assert "run did not finish: 0 of 4 epochs trained (too_few_ranks" in proc.stdout
    assert _epochs(proc.stdout) == []


def test_the_demo_leaves_no_temp_or_socket_dir_behind(short_tmp: pathlib.Path) -> None:
    """After an afternoon of demos: 49 actorwire-demo-* temp dirs and 232 empty run dirs."""
    tmp_path = short_tmp  # ipc socket paths must stay short
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "ACTORWIRE_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "tmp").mkdir()
    (tmp_path / "run").mkdir()
    os.chmod(tmp_path / "run", 0o700)
    proc = subprocess.run([sys.executable, "-m", "actorwire", "demo", "--workers", "2", "--epochs", "1"],
                          capture_output=True, text=True, timeout=170, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "removed at exit (--keep keeps them)" in proc.stdout
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("actorwire-demo-")]
    assert [list(d.iterdir()) for d in (tmp_path / "run").iterdir()] == [[]]  # actorwire-<uid>/, empty
    kept = subprocess.run([sys.executable, "-m", "actorwire", "demo", "--workers", "2", "--epochs", "1", "--keep"],
                          capture_output=True, text=True, timeout=170, env=env)
    assert kept.returncode == 0
    (where,) = [line.split("under ", 1)[1] for line in kept.stdout.splitlines() if "checkpoints kept under" in line]
    assert pathlib.Path(where).is_dir()


def _training_demo(short_tmp: pathlib.Path) -> tuple[subprocess.Popen[str], list[int]]:
    """A demo of 8 epochs as a terminal's foreground job, once it trains: (its process, its workers' pids).

    A shell without job control starts background commands with SIGINT ignored, and Python then
    installs no KeyboardInterrupt: the demo gets the disposition a terminal's foreground job has."""
    import signal

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the demo flushes its lines itself
    env["TMPDIR"] = str(short_tmp)
    proc = subprocess.Popen([sys.executable, "-m", "actorwire", "demo", "--epochs", "8"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # bounded by the test's timeout
        lines.append(line)
        if line.startswith("    0 "):  # training: every worker joined and one epoch is done
            break
    pids = [int(p) for p in re.search(r"pids ([\d, ]+)\)", lines[0]).group(1).split(", ")]  # type: ignore[union-attr]
    return proc, pids


def _ended(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    assert proc.stdout is not None
    proc.stdout.close()


def test_ctrl_c_ends_the_demo_and_its_workers_with_one_line(short_tmp: pathlib.Path) -> None:
    """A Ctrl-C printed about 75 lines of worker tracebacks and left shared memory to the tracker."""
    import signal

    proc, pids = _training_demo(short_tmp)
    try:
        assert proc.stdout is not None
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends its foreground group
        rest = proc.stdout.read()
        assert proc.wait(60) == 130
    finally:
        _ended(proc)
    tail = [line for line in rest.splitlines() if line.strip() and not re.match(r"^\s+(\d+ |eval )", line)]
    assert tail == ["interrupted"], rest
    for pid in pids:
        try:
            os.kill(pid, 0)
            raise AssertionError(f"worker {pid} still runs")
        except ProcessLookupError:
            pass
    assert not [n for n in os.listdir("/dev/shm") if any(n.startswith((f"aw{p}_", f"aws{p}_")) for p in pids)]
    assert not [p for p in short_tmp.iterdir() if p.name.startswith("actorwire-demo-")]


@pytest.mark.slow
@pytest.mark.parametrize("gap", [0.01, 0.2])
def test_ctrl_c_again_and_again_during_clean_up_leaves_nothing_behind(short_tmp: pathlib.Path, gap: float) -> None:
    """A second Ctrl-C while the demo cleaned up left three workers SIGSTOPped for good, re-parented
    to init, holding shared memory and the root's sockets."""
    import signal

    proc, pids = _training_demo(short_tmp)
    try:
        # Ctrl-C held down (or pressed again and again) from the first moment of the clean-up on.
        sent = 0
        while proc.poll() is None and sent < int(30 / gap):
            os.killpg(proc.pid, signal.SIGINT)
            sent += 1
            try:
                proc.wait(gap)
            except subprocess.TimeoutExpired:
                pass
        proc.wait(60)
    finally:
        _ended(proc)
    assert proc.returncode == 130 and sent >= 2, (proc.returncode, sent)
    for pid in pids:  # a stopped process answers signal 0 too
        deadline = time.monotonic() + 10
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] if \
                pathlib.Path(f"/proc/{pid}/stat").exists() else "?"
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"worker {pid} outlived the demo (state {state})")
            time.sleep(0.1)  # its exit, which no event announces to a non-parent
    assert not [n for n in os.listdir("/dev/shm") if any(n.startswith((f"aw{p}_", f"aws{p}_")) for p in pids)]
    assert not [p for p in short_tmp.iterdir() if p.name.startswith("actorwire-demo-")]
