"""Every script in examples/ runs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_custom_trainer_runs() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_trainer.py")], capture_output=True,
                          text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "epoch 2: loss" in proc.stdout and "workers exited with [0, 0]" in proc.stdout


def test_custom_trainer_adds_under_30_lines() -> None:
    text = (ROOT / "examples" / "custom_trainer.py").read_text()
    added = [line for line in text.splitlines() if line.rstrip().endswith("# actorwire")]
    assert 0 < len(added) < 30


@pytest.mark.timeout(120)
def test_weight_sync_example_is_bit_exact() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "weight_sync.py")], capture_output=True,
                          text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("bit-exact: True") == 3
