"""The run directory is the gate of the ipc sockets: private to the user, or refused."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import pytest

from actorwire.transport import ConfigError
from actorwire.transport._endpoints import ipc_endpoint, run_dir, user_dir


def test_the_run_directory_and_its_parent_are_made_0700_whatever_the_umask(
        tmp_path: pathlib.Path, setenv: Callable[[str, str | None], None]) -> None:
    setenv("ACTORWIRE_RUNTIME_DIR", str(tmp_path))
    old = os.umask(0)
    try:
        path = run_dir("run-1")
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o700, 0o700)
    assert ipc_endpoint("run-1", "node-a").startswith(f"ipc://{path}/")


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701])
def test_an_existing_directory_open_to_others_is_refused_with_one_line(
        mode: int, tmp_path: pathlib.Path, setenv: Callable[[str, str | None], None]) -> None:
    setenv("ACTORWIRE_RUNTIME_DIR", str(tmp_path))
    wide = tmp_path / f"actorwire-{os.getuid()}"
    wide.mkdir()
    os.chmod(wide, mode)
    with pytest.raises(ConfigError, match=rf"must be private to this user \(mode 0700\), but it has mode 0{mode:o}") \
            as refused:
        run_dir("run-1")
    assert "\n" not in str(refused.value)
    assert oct(wide.stat().st_mode & 0o777) == oct(mode)  # refused, not silently changed


def test_a_symlink_in_place_of_the_directory_is_refused(tmp_path: pathlib.Path,
                                                        setenv: Callable[[str, str | None], None]) -> None:
    setenv("ACTORWIRE_RUNTIME_DIR", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"actorwire-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="is not a directory"):
        user_dir()


@pytest.mark.parametrize("case", ["missing", "a file", "read-only"])
def test_a_runtime_dir_that_cannot_hold_the_directory_is_one_line(
        case: str, tmp_path: pathlib.Path, setenv: Callable[[str, str | None], None]) -> None:
    """ACTORWIRE_RUNTIME_DIR naming nothing, a file, or a directory this user cannot write: a
    ConfigError naming the variable (the CLI prints it as one line), not an OSError traceback."""
    runtime = tmp_path / "runtime"
    if case == "a file":
        runtime.write_text("")
    elif case == "read-only":
        runtime.mkdir(mode=0o500)
    setenv("ACTORWIRE_RUNTIME_DIR", str(runtime))
    if case == "read-only" and os.access(runtime, os.W_OK):
        pytest.skip("this user writes anywhere (root): a read-only directory cannot be made")
    with pytest.raises(ConfigError, match="ACTORWIRE_RUNTIME_DIR") as refused:
        run_dir("run-1")
    assert "\n" not in str(refused.value) and str(runtime) in str(refused.value)
