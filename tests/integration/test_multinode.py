"""Multi-host launch on one machine: launcher environments, the coordinator CLI, workers over CURVE tcp."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest
from conftest import ROOT, trained_one_model

from actorwire.actors.runtime._launch import LaunchEnv, first_host, launch_env

TRAIN = ROOT / "examples" / "multinode" / "train.py"


@pytest.mark.parametrize("nodelist, host", [
    ("gpu07", "gpu07"), ("gpu[03-05,9],cpu1", "gpu03"), ("a1,b2", "a1"), ("n[12,4]", "n12"),
    ("rack1-n[001-128]", "rack1-n001"),
    # What the hand parser read wrong: a suffix after the range, and two ranges in one name.
    ("node[01-04]-ib", "node01-ib"), ("rack[1-2]-node[01-04]", "rack1-node01"), ("gpu[9,03-05]", "gpu9"),
])
def test_first_host_of_a_slurm_node_list(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.parametrize("nodelist", ["", "gpu[03-", "n[5-1]"])
def test_a_bad_slurm_node_list_is_one_clear_error(nodelist: str) -> None:
    from actorwire.transport._errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="SLURM node list"):
        first_host(nodelist)


def test_torchrun_environment() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "job42"}
    assert launch_env(env) == LaunchEnv(join="tcp://10.0.0.7:29555", run_id="job42", rank=5, world_size=8,
                                        local_rank=1, source="torchrun")
    assert launch_env({**env, "ACTORWIRE_PORT": "4000"}).join == "tcp://10.0.0.7:4000"


def test_slurm_environment() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "16", "SLURM_LOCALID": "3", "SLURM_NODELIST": "gpu[03-06]",
           "SLURM_JOB_ID": "991"}
    assert launch_env(env) == LaunchEnv(join="tcp://gpu03:29555", run_id="991", rank=3, world_size=16,
                                        local_rank=3, source="slurm")


def test_our_variables_win_and_bad_numbers_are_named() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "16", "SLURM_NODELIST": "gpu1", "SLURM_JOB_ID": "991",
           "ACTORWIRE_JOIN": "tcp://h:1", "ACTORWIRE_RUN_ID": "mine", "ACTORWIRE_RANK": "0"}
    found = launch_env(env)
    assert (found.join, found.run_id, found.rank, found.source) == ("tcp://h:1", "mine", 0, "actorwire")
    with pytest.raises(ValueError, match="^RANK must be an integer, got 'x'$"):
        launch_env({"RANK": "x", "MASTER_ADDR": "h"})
    assert launch_env({}) == LaunchEnv(None, None, None, None, None, "none")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(150)
def test_coordinator_cli_and_torchrun_style_workers_over_curve(tmp_path: pathlib.Path) -> None:
    keys = tmp_path / "keys"
    assert subprocess.run([sys.executable, "-m", "actorwire", "keygen", str(keys)], capture_output=True).returncode == 0
    port = _port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORWIRE_", "SLURM_")) or k == "ACTORWIRE_DEATH_DIR"}
    base.update(ACTORWIRE_KEYS=str(keys), ACTORWIRE_PORT=str(port), TORCHELASTIC_RUN_ID="t-run", TRAIN_SAMPLES="512")
    coord = subprocess.Popen([sys.executable, "-m", "actorwire", "coordinator", "--bind", f"tcp://127.0.0.1:{port}",
                              "--world-size", "2", "--dataset-size", "512", "--epochs", "2", "--join-timeout", "60"],
                             env=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = []
    try:
        assert "listening on tcp://127.0.0.1" in coord.stdout.readline()  # type: ignore[union-attr]
        for rank in range(2):  # what torchrun sets, and nothing else
            env = {**base, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
            workers.append(subprocess.Popen([sys.executable, str(TRAIN)], env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True))
        outs = [w.communicate(timeout=120) for w in workers]
        out, err = coord.communicate(timeout=60)
        assert [w.returncode for w in workers] == [0, 0], [o[1][-2000:] for o in outs]
        assert all("done" in o[0] for o in outs)
        assert coord.returncode == 0, out + err[-2000:]
        assert "epoch 1:" in out and "run ended cleanly" in out
    finally:
        for p in [coord, *workers]:
            if p.poll() is None:
                p.kill()
                p.communicate()


# -- the example scripts themselves, their launchers simulated on loopback -------------------------

SCRIPTS = ROOT / "examples" / "multinode"
FAKE_SSH = """#!/usr/bin/env bash
# ssh to a host of this machine: the remote command runs here.
shift
exec bash -c "$*"
"""


def _script_env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    keys = tmp_path / "keys"
    assert subprocess.run([sys.executable, "-m", "actorwire", "keygen", str(keys)], capture_output=True).returncode == 0
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in {"ssh": FAKE_SSH}.items():
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    venv_bin = str(pathlib.Path(sys.executable).parent)  # actorwire, python and torchrun of this venv
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORWIRE_", "SLURM_", "TORCHELASTIC_")) or k == "ACTORWIRE_DEATH_DIR"}
    env.update(PATH=os.pathsep.join([str(fake), venv_bin, env.get("PATH", "")]), ACTORWIRE_KEYS=str(keys),
               ACTORWIRE_PORT=str(_port()), TRAIN_SAMPLES="512")
    env.update(extra)
    return env


def _run_script(argv: list[str], env: dict[str, str], cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=150,
                              start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{argv[0]} did not finish in 150 s: {exc.stdout!r} {exc.stderr!r}") from None


def _ran(result: subprocess.CompletedProcess[str], workers: int, epochs: int) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert out.count(f" of {workers} joined") == workers and out.count("done") >= workers, out
    assert f"epoch {epochs - 1}:" in out and "run ended cleanly" in out, out
    assert "nan" not in out  # every rank trained a slice of the data it has


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_torchrun_example_trains_one_model_under_torchrun(tmp_path: pathlib.Path) -> None:
    # torchrun keeps its workers' logs in a torchelastic_* directory of TMPDIR and leaves it there: a short
    # TMPDIR of this test's own (ipc paths are limited to about 100 bytes), removed after.
    scratch = tempfile.mkdtemp(prefix="aw-", dir="/tmp")
    try:
        env = _script_env(tmp_path, NODE_RANK="0", NNODES="1", PER_NODE="3", MASTER="127.0.0.1",
                          MASTER_PORT=str(_port()), RUN_ID="torchrun-test", TMPDIR=scratch, TRAIN_SAMPLES="1400",
                          EPOCHS="20")
        result = _run_script(["bash", str(SCRIPTS / "torchrun.sh")], env, tmp_path)
        _ran(result, workers=3, epochs=20)
        trained_one_model(result.stdout, {0, 1, 2})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _descendant(root: int, text: str) -> int | None:
    """The first process below ``root`` whose command line holds ``text`` (torchrun's workers are in
    sessions of their own: no process group or session finds them)."""
    table = [line.split(None, 2) for line in subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True,
                                                             text=True).stdout.splitlines()]
    children: dict[int, list[tuple[int, str]]] = {}
    for pid, ppid, *args in table:
        children.setdefault(int(ppid), []).append((int(pid), args[0] if args else ""))
    todo = [root]
    while todo:
        for pid, args in children.get(todo.pop(), []):
            if text in args:
                return pid
            todo.append(pid)
    return None


def _torchrun_with_a_kill(tmp_path: pathlib.Path, run_id: str, at: str, **extra: str) -> tuple[int, str]:
    """torchrun.sh with 3 workers; worker 1 SIGKILLed once the coordinator printed the line ``at``."""
    scratch = tempfile.mkdtemp(prefix="aw-", dir="/tmp")
    try:
        env = _script_env(tmp_path, NODE_RANK="0", NNODES="1", PER_NODE="3", MASTER="127.0.0.1",
                          MASTER_PORT=str(_port()), RUN_ID=run_id, TMPDIR=scratch, TRAIN_SAMPLES="1400",
                          CHECKPOINT_DIR=str(tmp_path / "checkpoints"), **extra)
        with subprocess.Popen(["bash", str(SCRIPTS / "torchrun.sh")], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True) as script:
            lines = []
            try:
                assert script.stdout is not None
                killed = False
                for line in script.stdout:
                    lines.append(line)
                    if line.startswith(at) and not killed:
                        victim = _descendant(script.pid, "worker/1")
                        assert victim, "".join(lines)
                        os.kill(victim, signal.SIGKILL)
                        killed = True
                code = script.wait(60)
            finally:
                if script.poll() is None:
                    os.killpg(script.pid, signal.SIGKILL)
        return code, "".join(lines)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_death_under_torchrun_without_restarts_ends_the_run_with_one_line_saying_why(tmp_path: pathlib.Path) -> None:
    """torchrun's agent stops every worker when one dies: the run ended with all_ranks_lost and nothing
    said why, or how to get a run that recovers."""
    code, out = _torchrun_with_a_kill(tmp_path, "torchrun-kill", "epoch 2:", EPOCHS="40", MAX_RESTARTS="0")
    assert code == 1, out[-3000:]
    assert "the launcher stopped the survivors (torchrun's agent stops every worker when one dies); to recover, " \
           "run torchrun with --max-restarts N" in out, out[-3000:]
    assert "run did not finish" in out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_rank_killed_under_torchrun_with_max_restarts_is_a_recovery(tmp_path: pathlib.Path) -> None:
    """With --max-restarts torchrun started every worker again, and each waited 120 s for a coordinator
    that had already ended the run, then the job failed."""
    code, out = _torchrun_with_a_kill(tmp_path, "torchrun-restart", "epoch 4:", EPOCHS="20")
    assert code == 0, out[-3000:]
    assert out.count(", resumed at epoch ") == 3, out[-3000:]  # every new worker loaded the checkpoint
    assert "run ended: every epoch trained (20/20)" in out and "started again; resumed at epoch " in out, out[-3000:]
    trained_one_model(out, {0, 1, 2})


LOCAL_SLURM = ROOT / "tests" / "slurm" / "local-slurm.sh"


@pytest.fixture(scope="module")
def slurm() -> Iterator[str]:
    """A single-node SLURM of our own (tests/slurm/local-slurm.sh): its slurm.conf."""
    missing = [tool for tool in ("sbatch", "slurmctld", "slurmd", "munged") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"no SLURM here ({', '.join(missing)} missing): apt-get install -y slurm-wlm munge")
    where = tempfile.mkdtemp(prefix="aw-slurm-", dir="/tmp")
    try:
        up = subprocess.run([str(LOCAL_SLURM), "start", where], capture_output=True, text=True, timeout=90)
        assert up.returncode == 0, up.stdout + up.stderr
        yield f"{where}/slurm.conf"
    finally:
        subprocess.run([str(LOCAL_SLURM), "stop", where], capture_output=True, timeout=60)
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_sbatch_example_runs_unmodified_under_a_real_slurm(slurm: str, tmp_path: pathlib.Path) -> None:
    """Submitted with sbatch, $0 is slurmd's spool copy of the script: every task failed with "can't open
    file .../spool/job00013/train.py", and its #SBATCH --ntasks-per-node=4 could not be brought down
    to fit a smaller node.  Three workers, 20 epochs of the digits: one model, the single process's
    accuracy."""
    submit = tmp_path / "submit"  # where sbatch is run: the script finds examples/ from there
    submit.mkdir()
    (submit / "examples").symlink_to(ROOT / "examples")
    keys = submit / "keys"  # the script's default ACTORWIRE_KEYS: $SLURM_SUBMIT_DIR/keys
    assert subprocess.run([sys.executable, "-m", "actorwire", "keygen", str(keys)], capture_output=True).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORWIRE_", "SLURM_", "TORCHELASTIC_")) or k == "ACTORWIRE_DEATH_DIR"}
    env.update(PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")]),
               SLURM_CONF=slurm, ACTORWIRE_PORT=str(_port()), EPOCHS="20")
    out = tmp_path / "job.out"
    job = subprocess.run(["sbatch", "--wait", "--ntasks=3", f"--output={out}", "examples/multinode/sbatch.sh"],
                         cwd=submit, env=env, capture_output=True, text=True, timeout=280)
    text = out.read_text() if out.exists() else ""
    assert job.returncode == 0, job.stdout + job.stderr + text[-3000:]
    assert "run ended cleanly: every epoch trained (20/20); 3 of 3 ranks finished" in text, text[-3000:]
    trained_one_model(text, {0, 1, 2})


def _slurm_task(title: str, cwd: pathlib.Path) -> int | None:
    """The pid of the job's process titled ``title`` (setproctitle), found by its working directory
    (the job's submit directory).  Not by ACTORWIRE_PORT in /proc/PID/environ: setproctitle may
    write a long title over the memory that file reads, and the lookup failed twice (in one
    full-suite run the victim was found only as the run ended, in one run alone never)."""
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if title in (proc / "cmdline").read_bytes().decode(errors="replace") and \
                    pathlib.Path(os.readlink(proc / "cwd")) == cwd.resolve():
                return int(proc.name)
        except (OSError, ValueError):
            continue
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rank_killed_mid_run_under_a_real_slurm_is_recovered(slurm: str, tmp_path: pathlib.Path) -> None:
    """srun leaves the other tasks of a step running when one dies: the survivors take its rest and
    end with one model; the job's status is the run's."""
    submit = tmp_path / "submit"
    submit.mkdir()
    (submit / "examples").symlink_to(ROOT / "examples")
    assert subprocess.run([sys.executable, "-m", "actorwire", "keygen", str(submit / "keys")],
                          capture_output=True).returncode == 0
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORWIRE_", "SLURM_", "TORCHELASTIC_")) or k == "ACTORWIRE_DEATH_DIR"}
    # 60 epochs, the kill at the 4th: an epoch of this run takes 10-30 ms here since a sync is two
    # collectives, and with 20 the 16 left (about 0.3 s) were once over before the kill landed.
    env.update(PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")]),
               SLURM_CONF=slurm, ACTORWIRE_PORT=str(port), EPOCHS="60")
    out = tmp_path / "job.out"
    with subprocess.Popen(["sbatch", "--wait", "--ntasks=3", f"--output={out}", "examples/multinode/sbatch.sh"],
                          cwd=submit, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as job:
        try:
            deadline = time.monotonic() + 200
            victim = None
            while victim is None and time.monotonic() < deadline and job.poll() is None:
                text = out.read_text() if out.exists() else ""
                if "\nepoch 3:" in text:
                    victim = _slurm_task("worker/1", submit)
                time.sleep(0.02)  # polling a file another program writes: no event to wait on
            assert victim is not None, out.read_text() if out.exists() else "no output"
            os.kill(victim, signal.SIGKILL)
            code = job.wait(240)
        finally:
            if job.poll() is None:
                job.kill()
    text = out.read_text()
    assert code == 0, text[-3000:]
    assert "run ended: every epoch trained (60/60), recovered from 1 lost rank(s) (rank 1 lost in epoch" in text, \
        text[-3000:]
    trained_one_model(text, {0, 2})


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_ssh_example_runs_one_worker_per_host(tmp_path: pathlib.Path) -> None:
    env = _script_env(tmp_path, ACTORWIRE_HOST="127.0.0.1")
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # it runs $PWD/examples/multinode/train.py
    _ran(_run_script(["bash", str(SCRIPTS / "ssh.sh"), "localhost", "localhost"], env, tmp_path), workers=2,
         epochs=2)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_worker_that_fails_fails_the_ssh_example(tmp_path: pathlib.Path) -> None:
    """The scripts ended with a bare `wait`, whose status is 0 whatever the workers did."""
    env = _script_env(tmp_path, ACTORWIRE_HOST="127.0.0.1", JOIN_TIMEOUT="3")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "bin" / "ssh").write_text("#!/usr/bin/env bash\nexit 3\n")  # the host is unreachable
    result = _run_script(["bash", str(SCRIPTS / "ssh.sh"), "localhost"], env, tmp_path)
    assert result.returncode != 0
