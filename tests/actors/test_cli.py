"""The command line: subcommands, exit codes, the bench JSON format."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from actorwire import __version__
from actorwire.actors.cli._main import main


def test_messages_lists_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["messages"]) == 0
    out = capsys.readouterr().out
    assert "[control]" in out and "[runtime]" in out
    assert "  Batch  (type: 'batch')" in out
    assert "      rank: int >= 0" in out


def test_messages_one_kind_and_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["messages", "free_group"]) == 0
    assert "FreeGroup" in capsys.readouterr().out
    assert main(["messages", "nope"]) == 2
    assert "no message kind named 'nope'" in capsys.readouterr().err


def test_messages_schema_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["messages", "--schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert "Batch" in schema["$defs"]


def test_bench_codec_json_format(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "codec.json"
    assert main(["bench", "codec", "--kinds", "Batch,shutdown", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["suite"] == "codec"
    assert doc["machine"]["cpus"] >= 1
    names = [r["name"] for r in doc["results"]]
    assert names == ["codec.encode.Shutdown", "codec.decode.Shutdown", "codec.encode.Batch", "codec.decode.Batch"]
    for r in doc["results"]:
        assert set(r) == {"name", "value", "unit", "baseline", "ratio"}
        assert r["value"] > 0 and r["unit"] == "msg/s"
    batch = doc["results"][3]
    assert batch["ratio"] == pytest.approx(batch["value"] / batch["baseline"])


def test_bench_unknown_kind_is_an_error() -> None:
    with pytest.raises(SystemExit, match="no message kind matches Nope"):
        main(["bench", "codec", "--kinds", "Nope"])


def test_python_dash_m_and_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "actorwire", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"actorwire {__version__}"


def test_bad_usage_exits_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "actorwire", "frobnicate"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "invalid choice: 'frobnicate'" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_bus_runs_end_to_end(tmp_path) -> None:
    out = tmp_path / "bus.json"
    # A short TMPDIR of its own (ipc paths are limited to about 100 bytes): the bench leaves nothing in it.
    scratch = tempfile.mkdtemp(prefix="aw-", dir="/tmp")
    try:
        proc = subprocess.run([sys.executable, "-m", "actorwire", "bench", "bus", "--messages", "2000", "--asks",
                               "50", "--json", str(out)], capture_output=True, text=True, timeout=280,
                              env={**os.environ, "TMPDIR": scratch})
        left = [p.name for p in pathlib.Path(scratch).iterdir() if p.name.startswith("actorwire-bench")]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert left == [], f"bench bus left {left} behind"
    doc = json.loads(out.read_text())
    names = [r["name"] for r in doc["results"]]
    for name in ("bus.tell.inproc", "bus.tell.ipc", "bus.tell.tcp", "bus.ask_p50.ipc", "bus.ask_p99.tcp",
                 "bus.fanin.ipc", "bus.broadcast.ipc"):
        assert name in names
    for r in doc["results"]:
        assert r["value"] > 0
        if r["baseline"] is not None:
            assert r["ratio"] == pytest.approx(r["value"] / r["baseline"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_record_runs_end_to_end(tmp_path) -> None:
    out = tmp_path / "record.json"
    proc = subprocess.run([sys.executable, "-m", "actorwire", "bench", "record", "--messages", "2000",
                           "--json", str(out)], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [r["name"] for r in doc["results"]] == ["record.tell.ipc", "record.read"]
    assert doc["results"][0]["baseline"] > 0 and doc["results"][1]["value"] > 0


# Bad invocations: one line naming the mistake, exit 2, never a traceback (issue 18's table, so far).
BAD = [
    (["coordinator", "--bind", "tcp://127.0.0.1:0", "--dataset-size", "-5", "--world-size", "2"],
     "argument --dataset-size: expected a positive integer, got '-5'"),
    (["coordinator", "--bind", "tcp://127.0.0.1:0", "--dataset-size", "8", "--world-size", "0"],
     "argument --world-size: expected a positive integer, got '0'"),
    (["coordinator", "--bind", "tcp://127.0.0.1:0", "--dataset-size", "8", "--epochs", "0"],
     "argument --epochs: expected a positive integer, got '0'"),
    (["coordinator", "--bind", "tcp://127.0.0.1:0", "--dataset-size", "8", "--join-timeout", "nan"],
     "argument --join-timeout: expected a positive number of seconds, got 'nan'"),
    (["coordinator", "--bind", "tcp://127.0.0.1:99999", "--dataset-size", "8", "--world-size", "1"],
     "the bind address tcp://127.0.0.1:99999: the port must be a number from 0 to 65535"),
    (["demo", "--at-epoch", "2"], "--at-epoch says when --kill-rank kills; give --kill-rank too"),
    (["messages", "free_grup"], "no message kind named 'free_grup'; closest: free_group"),
    (["replay", "/nonexistent/run"], "/nonexistent/run: no such file or directory"),
    (["log", "show", "/nonexistent/run", "--corr", "x"], "--corr takes ID or ASKER:ID"),
    (["log", "export", "/nonexistent/run", "--perfetto", "/"], "cannot write /: it is a directory"),
    (["log", "export", "/nonexistent/run", "--perfetto", "/nonexistent/t.json"],
     "cannot write /nonexistent/t.json: its directory does not exist"),
    (["replay", "/nonexistent/run", "--until", "-1"], "argument --until: expected an integer >= 0, got '-1'"),
    (["replay", "/nonexistent/run", "--break", "x"], "argument --break: expected an integer >= 0, got 'x'"),
    (["log", "tail", "/nonexistent/run", "-f", "--for", "-3"],
     "argument --for: expected a positive number of seconds, got '-3'"),
    (["bench", "bus", "--messages", "0"], "argument --messages: expected a positive integer, got '0'"),
    (["status", "--window", "0"], "argument --window: expected a positive number of seconds, got '0'"),
    (["status", "--join", "tcp://127.0.0.1:1"], "--join and --run-id go together"),
    (["top", "--count", "0"], "argument --count: expected a positive integer, got '0'"),
    (["top", "--interval", "inf"], "argument --interval: expected a positive number of seconds, got 'inf'"),
]


@pytest.mark.parametrize(("argv", "says"), BAD, ids=[" ".join(a[:2]) + f" #{i}" for i, (a, _) in enumerate(BAD)])
def test_bad_invocations_are_one_line(argv: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "actorwire", *argv], capture_output=True, text=True, timeout=60)
    out = proc.stderr + proc.stdout
    assert proc.returncode in (1, 2), out
    assert "Traceback" not in out
    assert says in out
    assert len([line for line in out.splitlines() if line.strip()]) == 1, out


def test_a_bad_setting_is_one_line_before_anything_runs() -> None:
    """An ACTORWIRE_* variable the settings refuse: the command's one line, exit 2, even though
    reading the settings is the first thing the command line does (to configure logging)."""
    for variable, value in (("ACTORWIRE_TIMEOUT_SCALE", "0"), ("ACTORWIRE_PLANE", "bogus")):
        proc = subprocess.run([sys.executable, "-m", "actorwire", "messages", "free_group"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, variable: value})
        out = proc.stderr + proc.stdout
        assert proc.returncode == 2 and "Traceback" not in out, out
        assert out.strip().startswith(f"actorwire messages: {variable} must be") and len(out.splitlines()) == 1


def test_demo_record_into_a_file_or_an_impossible_path(tmp_path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    for path, says in ((file, "not a directory"), (file / "sub", "cannot create it")):
        proc = subprocess.run([sys.executable, "-m", "actorwire", "demo", "--record", str(path)],
                              capture_output=True, text=True, timeout=60)
        out = proc.stderr + proc.stdout
        assert proc.returncode == 2 and says in out and "Traceback" not in out, out


def test_a_closed_pipe_ends_quietly() -> None:
    proc = subprocess.run(f"{sys.executable} -m actorwire messages | head -1", shell=True, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "" or proc.stdout.count("\n") == 1
    assert "BrokenPipe" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_demo_of_one_epoch_needs_no_at_epoch() -> None:
    from actorwire.actors.cli._demo import run_demo
    from actorwire.actors.cli._main import build_parser

    args = build_parser().parse_args(["demo", "--epochs", "1", "--kill-rank", "5"])
    assert run_demo(args) == 2  # refused for the rank, not for an --at-epoch nobody gave


def test_a_setting_the_library_refuses_is_one_line(tmp_path) -> None:
    import os

    deep = tmp_path / ("d" * 90)
    deep.mkdir(mode=0o700)
    os.chmod(deep, 0o700)
    proc = subprocess.run([sys.executable, "-m", "actorwire", "demo", "--workers", "1", "--epochs", "1"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ACTORWIRE_RUNTIME_DIR": str(deep)})
    out = proc.stderr + proc.stdout
    assert proc.returncode == 2 and "Traceback" not in out, out
    assert "is too long; set ACTORWIRE_RUNTIME_DIR to a shorter directory" in out


def test_every_command_s_help_ends_with_examples_that_parse() -> None:
    """`--help` had no examples."""
    import shlex

    from actorwire.actors.cli._main import EXAMPLES, build_parser

    parser = build_parser()
    assert "examples:" in parser.format_help()
    for lines in EXAMPLES.values():
        for line in lines:
            text = line.split("#")[0].split("&&")[0].strip()
            argv = shlex.split(text)[1:]
            if not argv or "COMMAND" in argv:
                continue
            parser.parse_args(argv)  # a flag the command lacks exits 2 here


def test_the_coordinator_names_a_reachable_address_not_the_wildcard() -> None:
    """It told workers to join tcp://0.0.0.0:PORT."""
    import socket

    from actorwire.actors.cli._serve import reachable

    assert reachable("tcp://0.0.0.0:29555") == f"tcp://{socket.getfqdn() or socket.gethostname()}:29555"
    assert reachable("tcp://10.1.2.3:29555") == "tcp://10.1.2.3:29555"


def test_the_demo_without_torch_is_one_line() -> None:
    """It was a ModuleNotFoundError traceback."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from actorwire.actors.cli._main import main\nsys.exit(main(['demo']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("actorwire demo: the demo trains a torch model, and torch is not installed here: "
                                   "pip install torch (or `make venv`, which installs a CPU build)")


def test_secret_keys_are_ignored_by_git() -> None:
    """`actorwire keygen keys/` in a checkout wrote secret keys git would have taken."""
    root = pathlib.Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("keys/node.key_secret", "keys/node.key", "elsewhere/node.key_secret"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=root).returncode == 0, path
