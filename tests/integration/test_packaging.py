"""A built wheel installs into a fresh virtual environment and imports every subpackage."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import venv
import zipfile

import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )
    (path,) = out.glob("actorwire-*.whl")
    return path


@pytest.mark.slow
def test_wheel_holds_only_the_actorwire_package(wheel: pathlib.Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"actorwire"}
    for sub in ("actors", "transport", "messages"):
        assert f"actorwire/{sub}/__init__.py" in names
    assert "actorwire/__main__.py" in names and "actorwire/py.typed" in names
    assert not any("_toplevel" in n for n in names)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_imports_in_a_fresh_venv(wheel: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(wheel)], check=True, timeout=500)
    code = (
        "import actorwire, actorwire.actors, actorwire.transport, actorwire.messages as m;"
        "import actorwire.actors.cli._main;"
        "assert m.decode_message(m.encode_message(m.Shutdown())) == m.Shutdown();"
        "print(actorwire.__version__)"
    )
    # Run from an empty directory so the checkout cannot shadow the installed wheel.
    out = subprocess.run([str(py), "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip()
    cli = subprocess.run([str(env_dir / "bin" / "actorwire"), "--version"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert cli.returncode == 0 and cli.stdout.startswith("actorwire ")
