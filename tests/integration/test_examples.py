"""Every script in examples/ runs."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, trained_one_model


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_custom_trainer_trains_one_model_on_every_rank() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_trainer.py")], capture_output=True,
                          text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "epoch 19: loss" in proc.stdout and "workers exited with [0, 0, 0]" in proc.stdout
    assert "run ended cleanly: every epoch trained (20/20)" in proc.stdout
    trained_one_model(proc.stdout, {0, 1, 2})
    # The defaults run clean: the group is formed at the start (it failed three times first) and no
    # eval is asked of ranks that have no eval function (a warning after every epoch).
    for noise in ("all-reduce failed", "eval failed", "no eval function"):
        assert noise not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_custom_trainer_with_a_rank_killed_mid_run_ends_with_one_model_and_exit_0(tmp_path: pathlib.Path) -> None:
    """Its launcher exited 1 after a recovered death (it judged the workers' exit codes), while the CLI
    coordinator exited 0; and nothing checked the survivors' models."""
    out: list[str] = []
    with (tmp_path / "stderr").open("w") as err, subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "custom_trainer.py")], stdout=subprocess.PIPE, stderr=err,
            text=True) as launcher:
        try:
            assert launcher.stdout is not None
            for line in launcher.stdout:
                out.append(line)
                if line.startswith("epoch 5:"):
                    victim = subprocess.run(["pgrep", "-P", str(launcher.pid), "-f", "worker/1"],
                                            capture_output=True, text=True).stdout.split()
                    assert len(victim) == 1, victim
                    os.kill(int(victim[0]), signal.SIGKILL)
            code = launcher.wait(60)
        finally:
            if launcher.poll() is None:
                launcher.kill()
    text = "".join(out)
    assert code == 0, text + (tmp_path / "stderr").read_text()[-3000:]
    assert "workers exited with [0, -9, 0]" in text
    assert "run ended: every epoch trained (20/20), recovered from 1 lost rank(s) (rank 1 lost in epoch" in text
    trained_one_model(text, {0, 2})
