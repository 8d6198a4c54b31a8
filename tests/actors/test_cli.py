"""The command line: subcommands, exit codes, the bench JSON format."""

from __future__ import annotations

import json
import subprocess
import sys

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
    proc = subprocess.run([sys.executable, "-m", "actorwire", "bench", "bus", "--messages", "2000", "--asks", "50",
                           "--json", str(out)], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
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
