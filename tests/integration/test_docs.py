"""Every ```python block in docs/ and README.md runs (examples that rot are worse than none)."""

from __future__ import annotations

import argparse
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
def test_doc_console_examples_run(page: pathlib.Path, tmp_path: pathlib.Path, short_tmp: pathlib.Path) -> None:
    """The ``$ `` lines of a page's ```console blocks run as one bash script, in a scratch directory.

    Each page gets its own runtime directory: ``status`` and ``top`` pick the one run they find
    there, and another suite's demo on the same machine would make that two.
    """
    import os
    import subprocess

    commands = [line[2:] for block in CONSOLE.findall(page.read_text()) for line in block.splitlines()
                if line.startswith("$ ")]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORWIRE_") or k == "ACTORWIRE_DEATH_DIR"}
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["ACTORWIRE_RUNTIME_DIR"] = str(short_tmp)
    script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=220)
    assert proc.returncode == 0, f"{page.name}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"


FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "cli").glob("*.md")), ids=lambda p: p.name)
def test_every_flag_a_cli_page_names_is_in_the_commands_help(page: pathlib.Path) -> None:
    """docs/cli and --help must agree: a documented flag the command does not have is a lie."""
    from actorwire.actors.cli._main import build_parser

    command = page.stem
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = [sub.choices[command].format_help()]
    for action in sub.choices[command]._actions:  # `log show`, `log stats`, ...
        if isinstance(action, argparse._SubParsersAction):
            helps += [p.format_help() for p in action.choices.values()]
    known = set(FLAG.findall("\n".join(helps))) | {"--help", "--version"}
    text = page.read_text()
    # Flags of other commands that a page mentions in passing, written as `actorwire OTHER --flag`.
    named = {f for line in text.splitlines() if f"actorwire {command}" in line or "actorwire" not in line
             for f in FLAG.findall(line)}
    unknown = sorted(named - known - _ELSEWHERE)
    assert not unknown, f"docs/cli/{page.name} names {unknown}, which `actorwire {command} --help` lacks"


#: Flags a cli page may name that belong to something else (pytest, a launcher, python).
_ELSEWHERE = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--rdzv-endpoint", "--ntasks",
              "--nodes", "--standalone"}


def test_the_getting_started_script_on_the_page_is_the_example_file() -> None:
    """The page teaches the file the console block runs: the two must not drift apart."""
    page = (ROOT / "docs" / "getting-started.md").read_text()
    source = (ROOT / "examples" / "getting_started.py").read_text()
    assert any(block == source for block in BLOCK.findall(page)), "docs/getting-started.md and the example differ"
