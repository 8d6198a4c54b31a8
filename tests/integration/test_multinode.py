"""Multi-host launch on one machine: launcher environments, the coordinator CLI, workers over CURVE tcp."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest
from conftest import ROOT

from actorwire.actors.runtime._launch import LaunchEnv, first_host, launch_env

TRAIN = ROOT / "examples" / "multinode" / "train.py"


@pytest.mark.parametrize("nodelist, host", [
    ("gpu07", "gpu07"), ("gpu[03-05,9],cpu1", "gpu03"), ("a1,b2", "a1"), ("n[12,4]", "n12"),
    ("rack1-n[001-128]", "rack1-n001"),
])
def test_first_host_of_a_slurm_node_list(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


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
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORWIRE_", "SLURM_"))}
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
