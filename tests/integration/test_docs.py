"""Every ```python block in docs/ and README.md runs (examples that rot are worse than none)."""

from __future__ import annotations

import pathlib
import re
import sys
import types

import pytest
from conftest import ROOT

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        for i, match in enumerate(BLOCK.finditer(path.read_text())):
            found.append((f"{path.relative_to(ROOT)}#{i}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[w for w, _ in _blocks()])
def test_doc_example_runs(where: str, code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real module, so that classes defined by the example can be found again by
    # name (replay rebuilds a recorded actor from its "module:Class").
    module = types.ModuleType("__doc_example__")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, where, "exec"), module.__dict__)


CONSOLE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def _console_pages() -> list[pathlib.Path]:
    return sorted(p for p in (ROOT / "docs").rglob("*.md") if CONSOLE.search(p.read_text()))


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("page", _console_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_console_examples_run(page: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The ``$ `` lines of a page's ```console blocks run as one bash script, in a scratch directory."""
    import os
    import subprocess

    commands = [line[2:] for block in CONSOLE.findall(page.read_text()) for line in block.splitlines()
                if line.startswith("$ ")]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORWIRE_")}
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=220)
    assert proc.returncode == 0, f"{page.name}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
