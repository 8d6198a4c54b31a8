"""``actorwire demo`` runs end to end, with and without a killed worker."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actorwire", "demo", *args], capture_output=True, text=True,
                          timeout=100)


def test_demo_ends_cleanly() -> None:
    proc = _demo()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("exited cleanly") == 3
    assert "0 of 3 reporters lost" in proc.stdout


def test_demo_reports_a_killed_rank() -> None:
    proc = _demo("--kill-rank", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SIGKILLed reporter/1" in proc.stdout
    assert "dead: node" in proc.stdout and "status -9" in proc.stdout
    assert "1 of 3 reporters lost" in proc.stdout


def test_demo_rejects_a_bad_rank() -> None:
    proc = _demo("--kill-rank", "7")
    assert proc.returncode == 2
    assert "--kill-rank must be between 0 and 2, got 7" in proc.stdout
