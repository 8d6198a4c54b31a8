"""Crafted recordings: replay imports nothing a file names, readers are bounded, output is escaped.

Each test plays the author of a recording someone else will open.
"""

from __future__ import annotations

import os
import pathlib
import resource
import subprocess
import sys

import msgspec
import pytest

from actorwire import messages as m
from actorwire.actors import replay
from actorwire.actors.runtime._replay import UntrustedClass, load_records
from actorwire.transport.recording import (
    MAGIC,
    In,
    LogFormatError,
    LogHeader,
    Segment,
    SegmentWriter,
    actor_logs,
)
from actorwire.transport.recording._schema import FRAME

pytestmark = pytest.mark.timeout(120)

ENV = m.Envelope(sender="coordinator", target="victim", seq=1)
COMMANDS = [["log", "show"], ["log", "stats"], ["log", "export", "--perfetto", "{out}"], ["replay"]]


def cli(*args: str, cwd: pathlib.Path | None = None, timeout: float = 60,
        preexec: object = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actorwire", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, preexec_fn=preexec)  # type: ignore[arg-type]


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode in (1, 2), (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def craft(directory: pathlib.Path, actor: str = "victim", actor_class: str = "evil_actor:Evil",
          config: dict[str, object] | None = None, messages: int = 3) -> pathlib.Path:
    """A one-actor recording written with our own writer; returns its segment."""
    header = LogHeader(run_id="r1", actor=actor, actor_class=actor_class, config=config or {})
    writer = SegmentWriter(directory, header)
    for i in range(1, messages + 1):
        writer.write(In(i, i, 1_000 + i, ENV, m.SyncNow(cycle=i), i + 1), i, 1_000 + i)
    writer.close()
    return writer.path


# -- replay imports nothing a file names -------------------------------------------------


def test_replay_never_imports_the_class_a_header_names(tmp_path: pathlib.Path) -> None:
    """The old replay imported ``actor_class`` before checking it, from a directory it put on sys.path."""
    craft(tmp_path)
    marker = tmp_path / "pwned"
    (tmp_path / "evil_actor.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nclass Evil: pass\n")
    result = cli("replay", ".", cwd=tmp_path)
    line = one_line_error(result)
    assert "not built in" in line and "--actor-class evil_actor:Evil" in line
    assert not marker.exists()
    with pytest.raises(UntrustedClass):
        replay(tmp_path)
    assert not marker.exists()


def test_python_dash_m_does_not_search_the_current_directory(tmp_path: pathlib.Path) -> None:
    """Even a class named on the command line is not found in the directory one stands in."""
    craft(tmp_path)
    marker = tmp_path / "pwned"
    (tmp_path / "evil_actor.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nclass Evil: pass\n")
    result = cli("replay", ".", "--actor-class", "evil_actor:Evil", cwd=tmp_path)
    assert "No module named 'evil_actor'" in one_line_error(result)
    assert not marker.exists()


def test_a_named_class_must_be_an_actor(tmp_path: pathlib.Path) -> None:
    craft(tmp_path)
    assert "is not an Actor subclass" in one_line_error(cli("replay", str(tmp_path), "--actor-class", "os:sep"))


def test_a_recorded_config_that_does_not_fit_is_one_line(tmp_path: pathlib.Path) -> None:
    craft(tmp_path, actor_class="actorwire.actors.bench._bus:Sink", config={"command": "rm -rf /"})
    assert "the recorded config does not build" in one_line_error(cli("replay", str(tmp_path)))


def test_a_model_consumer_factory_in_a_recording_is_never_called(tmp_path: pathlib.Path) -> None:
    """The old ModelConsumer imported and called its factory string in on_start, also in replay."""
    from actorwire.actors.weights._plan import ParamMeta, build_plan

    marker = tmp_path / "pwned"
    plan = build_plan([ParamMeta(name="w", dtype="float32", shape=[4])], [[0]], ["weights/r0/producer/0"])
    config = {"consumer_id": 0, "plan": msgspec.to_builtins(plan), "factory": "os:system",
              "factory_kwargs": {"command": f"touch {marker}"}}
    craft(tmp_path, actor_class="actorwire.actors.weights:ModelConsumer", config=config, messages=0)
    report = replay(tmp_path)
    assert not marker.exists()
    assert report.messages == 0


# -- bounded readers ---------------------------------------------------------------------


def test_a_segment_that_links_to_dev_zero_is_refused(tmp_path: pathlib.Path) -> None:
    actor = tmp_path / "victim"
    actor.mkdir()
    (actor / "seg-000001.awlog").symlink_to("/dev/zero")
    for command in COMMANDS:
        args = [a.replace("{out}", str(tmp_path / "t.json")) for a in command]
        line = one_line_error(cli(*args, str(tmp_path), timeout=30))
        assert "seg-000001.awlog" in line and "link out of the recording" in line


def test_a_fifo_is_refused_without_hanging(tmp_path: pathlib.Path) -> None:
    actor = tmp_path / "victim"
    actor.mkdir()
    os.mkfifo(actor / "seg-000001.awlog")
    for command in COMMANDS:
        args = [a.replace("{out}", str(tmp_path / "t.json")) for a in command]
        assert "not a regular file" in one_line_error(cli(*args, str(tmp_path), timeout=30))


def test_a_link_to_a_recording_elsewhere_is_refused(tmp_path: pathlib.Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    craft(elsewhere)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "victim").symlink_to(elsewhere / "victim")
    with pytest.raises(LogFormatError, match="link out of the recording"):
        actor_logs([mine])
    assert len(actor_logs([elsewhere])) == 1  # the original reads as ever


def _limit_data() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))


def test_a_huge_sparse_segment_is_mapped_not_read(tmp_path: pathlib.Path) -> None:
    """8 GiB of zeros after a valid header: the old reader read it whole (MemoryError)."""
    segment = craft(tmp_path, actor_class="actorwire.actors.bench._bus:Echo")
    with open(segment, "r+b") as f:
        f.truncate(8 << 30)
    for command in COMMANDS[:2]:
        line = one_line_error(cli(*command, str(tmp_path), preexec=_limit_data, timeout=60))
        assert "corrupt record at byte" in line and "length 0 out of range" in line
    result = cli("log", "stats", str(tmp_path), "--skip-corrupt", preexec=_limit_data, timeout=60)
    assert "no whole record in the 64 MiB after it" in one_line_error(result)


def _deep_header(tmp_path: pathlib.Path) -> None:
    actor = tmp_path / "victim"
    actor.mkdir()
    deep = b"\x81\xa1a" * 200_000 + b"\xc0"
    body = msgspec.msgpack.encode({"run_id": "r", "actor": "victim", "actor_class": "x:Y"})
    body = b"\x84" + body[1:] + b"\xa6config" + deep  # a fourth key: config, 200,000 maps deep
    (actor / "seg-000001.awlog").write_bytes(MAGIC + FRAME.pack(len(body), __import__("zlib").crc32(body)) + body)


def test_a_header_nested_200k_deep_is_one_line_in_every_command(tmp_path: pathlib.Path) -> None:
    _deep_header(tmp_path)
    for command in [*COMMANDS, ["log", "tail"]]:
        args = [a.replace("{out}", str(tmp_path / "t.json")) for a in command]
        target = str(tmp_path / "victim") if command == ["log", "tail"] else str(tmp_path)
        line = one_line_error(cli(*args, target))
        assert "seg-000001.awlog" in line and "nested too deep" in line and "at byte 8" in line


def test_a_length_past_the_end_is_reported_as_a_torn_tail(tmp_path: pathlib.Path) -> None:
    segment = craft(tmp_path, actor_class="actorwire.actors.bench._bus:Echo")
    size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(FRAME.pack(1000, 0) + b"\x00" * 10)
    reader = Segment(segment)
    assert len(list(reader.records())) == 3
    assert (reader.torn_tail, reader.torn_at) == (FRAME.size + 10, size)
    result = cli("log", "stats", str(tmp_path))
    assert result.returncode == 0
    assert f"torn tail: the last {FRAME.size + 10} bytes (from byte {size})" in result.stderr
    notes: list[str] = []
    load_records(tmp_path, notes=notes)
    assert len(notes) == 1 and "torn tail" in notes[0]
    assert "torn tail" in cli("replay", str(tmp_path)).stderr


def test_terminal_escapes_in_a_record_are_printed_escaped(tmp_path: pathlib.Path) -> None:
    header = LogHeader(run_id="r1", actor="victim\x1b]0;owned\x07", actor_class="actorwire.actors.bench._bus:Echo")
    writer = SegmentWriter(tmp_path, header)
    env = m.Envelope(sender="\x1b[2Jsender", target="victim", seq=1)
    writer.write(In(1, 1, 1_001, env, m.SyncFailed(sync_id=1, reason="bad\x1b[31mred\r\nforged line"), 2), 1, 1_001)
    writer.close()
    for command in (["log", "show"], ["log", "stats"]):
        result = cli(*command, str(tmp_path))
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\r" not in result.stdout
        assert "\\x1b" in result.stdout
    shown = cli("log", "show", str(tmp_path)).stdout
    assert "forged line" in shown and len(shown.splitlines()) == 2  # the header, then the one record


# -- a recording is one run --------------------------------------------------------------


def test_two_runs_into_one_directory_stay_apart(tmp_path: pathlib.Path) -> None:
    from actorwire.actors import ActorSystem
    from actorwire.actors.bench._bus import Echo

    for _ in range(2):
        with ActorSystem(record=str(tmp_path)) as system:
            system.spawn(Echo(), "echo")
            system.ask("echo", m.Batch(rank=0, batch_ms=1.0, step_count=1, batch_loss=0.5), timeout=10)
    runs = sorted(tmp_path.iterdir())
    assert len(runs) == 2
    line = one_line_error(cli("replay", str(tmp_path), "--actor", "echo"))
    assert f"{tmp_path} holds 2 runs: {runs[0].name} (1 actors" in line and runs[1].name in line
    assert "holds 2 runs" in one_line_error(cli("log", "stats", str(tmp_path)))
    for run in runs:
        result = cli("replay", str(run), "--actor", "echo")
        assert (result.returncode, result.stdout.strip()) == (0, "1 messages replayed, 0 divergences")


# -- stepping through --------------------------------------------------------------------


def test_until_state_and_break(tmp_path: pathlib.Path) -> None:
    from actorwire.actors import ActorSystem
    from actorwire.actors.bench._bus import Sink

    with ActorSystem(record=str(tmp_path)) as system:
        system.spawn(Sink(), "sink")
        for i in range(5):
            system.tell("sink", m.Heartbeat(rank=0, step_count=i))
        system.ask("sink", m.SyncNow(cycle=9), timeout=10)
    report = replay(tmp_path, until=3)
    assert report.ok and report.messages == 3 and report.state == {"count": 3, "expect": 0, "notify": ""}
    shown = cli("replay", str(tmp_path), "--until", "6", "--state", "--json")
    assert shown.returncode == 0, shown.stderr
    assert msgspec.json.decode(shown.stdout)["state"] == {"count": 0, "expect": 9, "notify": ""}
    assert "there are messages 0 to 6" not in cli("replay", str(tmp_path), "--until", "6").stderr
    assert "has messages 0 to 6" in one_line_error(cli("replay", str(tmp_path), "--until", "7"))
    debug = subprocess.run([sys.executable, "-m", "actorwire", "replay", str(tmp_path), "--break", "4"],
                           input="p (type(actor).__name__, actor.count, message.step_count, ctx.name)\nc\n",
                           capture_output=True, text=True, timeout=60)
    assert debug.returncode == 0, debug.stderr
    assert "stopped before message 4 (`heartbeat` from" in debug.stdout
    assert "('Sink', 3, 3, 'sink')" in debug.stdout
    assert debug.stdout.rstrip().endswith("6 messages replayed, 0 divergences")


def _blocks(segment: pathlib.Path) -> list[int]:
    reader = Segment(segment)
    try:
        return [offset for offset, _ in reader.frames()]
    finally:
        reader.close()


def test_a_length_corrupted_mid_segment_to_point_past_the_end_is_corruption_not_a_torn_tail(
        tmp_path: pathlib.Path) -> None:
    """It was taken for a torn tail: `log show` and `log stats` dropped the rest of the segment and
    exited 0, though a bad length anywhere but the tail is corruption (docs/recording.md)."""
    segment = craft(tmp_path, messages=400)
    offsets = _blocks(segment)
    assert len(offsets) >= 2, offsets
    data = bytearray(segment.read_bytes())
    FRAME.pack_into(data, offsets[0], len(data), 0)  # the first block's length: past the end of the file
    segment.write_bytes(bytes(data))
    for command in COMMANDS[:2]:
        line = one_line_error(cli(*command, str(tmp_path)))
        assert f"corrupt record at byte {offsets[0]}" in line and "runs past the end of the file" in line, line
    skipped = cli("log", "show", str(tmp_path), "--skip-corrupt", "--json")
    assert skipped.returncode == 0, skipped.stderr
    assert len(skipped.stdout.splitlines()) > 0  # the whole blocks after it are read
    # A real torn tail (the last block cut short) is still a torn tail.
    torn = tmp_path / "torn"
    segment = craft(torn, messages=400)
    last = _blocks(segment)[-1]
    segment.write_bytes(segment.read_bytes()[:last + 20])
    result = cli("log", "stats", str(torn))
    assert result.returncode == 0 and "torn tail" in result.stderr, result.stderr


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_a_segment_too_big_to_map_under_an_address_space_limit_is_one_line(tmp_path: pathlib.Path) -> None:
    """mmap's OSError [Errno 12] came out as a traceback."""
    segment = craft(tmp_path, actor_class="actorwire.actors.bench._bus:Echo")
    with open(segment, "r+b") as f:
        f.truncate(8 << 30)
    line = one_line_error(cli("log", "stats", str(tmp_path), preexec=_limit_address_space))
    assert "cannot map its 8589934592 bytes" in line, line


def test_a_where_expression_that_builds_a_huge_string_is_one_line(tmp_path: pathlib.Path) -> None:
    """`'a' * 3000000000 == ''` was a MemoryError traceback."""
    craft(tmp_path)
    for expression in ["'a' * 3000000000 == ''", "kind * 100000000 == ''", "[0] * 5000000 == []"]:
        line = one_line_error(cli("log", "show", str(tmp_path), "--where", expression))
        assert "--where: the expression builds a value of" in line, line
    fine = cli("log", "show", str(tmp_path), "--where", "'ab' * 3 == 'ababab'")
    assert fine.returncode == 0 and fine.stdout, fine.stderr
