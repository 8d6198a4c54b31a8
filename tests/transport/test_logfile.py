"""The recording log format: framing, CRCs, torn tails, corruption, rotation, index."""

from __future__ import annotations

import pathlib

import msgspec
import pytest

from actorwire import messages as m
from actorwire.transport.recording import (
    MAGIC,
    Clock,
    CorruptRecord,
    In,
    LogFormatError,
    LogHeader,
    Segment,
    SegmentWriter,
    actor_logs,
)

HEADER = LogHeader(run_id="r1", actor="worker/0", actor_class="pkg.mod:Worker", config={"rank": 0}, seed=7)
ENV = m.Envelope(sender="coordinator", target="worker/0", seq=1)


def write(tmp_path: pathlib.Path, n: int, flush_every: int = 0, **kwargs: int) -> SegmentWriter:
    """``n`` messages (an In and a Clock each); a block ends at every ``flush_every`` messages."""
    writer = SegmentWriter(tmp_path, HEADER, **kwargs)
    for i in range(1, n + 1):
        writer.write(In(i, i * 10, 1_000 + i, ENV, m.SyncNow(cycle=i), i * 10 + 5), i, 1_000 + i)
        writer.write(Clock(i, float(i)))
        if flush_every and i % flush_every == 0:
            writer.flush()
    writer.close()
    return writer


def test_round_trip_with_header(tmp_path: pathlib.Path) -> None:
    writer = write(tmp_path, 10)
    assert writer.directory == tmp_path / "worker_0"  # names are made safe for file systems
    segment = Segment(writer.path)
    assert segment.header.actor == "worker/0" and segment.header.config == {"rank": 0}
    records = [r for _, r in segment.records()]
    assert len(records) == 20
    assert records[0] == In(1, 10, 1001, ENV, m.SyncNow(cycle=1), 15)
    assert segment.data[:len(MAGIC)] == MAGIC


def test_torn_tail_reads_up_to_the_last_whole_block(tmp_path: pathlib.Path) -> None:
    writer = write(tmp_path, 10, flush_every=5)
    data = writer.path.read_bytes()
    writer.path.write_bytes(data[:-7])  # the writer died mid-block
    segment = Segment(writer.path)
    assert len(list(segment.records())) == 10  # the first block, whole
    assert segment.torn_tail > 0


def test_records_travel_in_blocks(tmp_path: pathlib.Path) -> None:
    from actorwire.transport.recording._schema import BLOCK_RECORDS

    writer = write(tmp_path, BLOCK_RECORDS)  # 2 * BLOCK_RECORDS records, no flush
    blocks = list(Segment(writer.path).blocks())
    assert [len(b) for _, b in blocks] == [BLOCK_RECORDS, BLOCK_RECORDS]
    assert blocks[0][1][0] == In(1, 10, 1001, ENV, m.SyncNow(cycle=1), 15)


def test_corruption_in_the_middle_names_file_and_offset(tmp_path: pathlib.Path) -> None:
    writer = write(tmp_path, 10, flush_every=1)  # a block per message
    segment = Segment(writer.path)
    offsets = sorted({o for o, _ in segment.records()})
    data = bytearray(writer.path.read_bytes())
    data[offsets[5] + 12] ^= 0xFF
    writer.path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecord) as info:
        list(Segment(writer.path).records())
    assert str(info.value) == f"{writer.path}: corrupt record at byte {offsets[5]} (crc mismatch)"
    kept = [r for _, r in Segment(writer.path).records(skip_corrupt=True)]
    assert len(kept) == 18  # only the damaged block (one message: its In and its Clock) is lost


def test_not_a_log_and_newer_format(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "seg-000001.awlog"
    bad.write_bytes(b"hello world")
    with pytest.raises(LogFormatError, match="not an actorwire recording"):
        Segment(bad)
    writer = SegmentWriter(tmp_path / "new", LogHeader(format_version=99, run_id="r", actor="a", actor_class="m:C"))
    writer.close()
    with pytest.raises(LogFormatError, match="written by log format 99; this build reads up to 2"):
        Segment(writer.path)


def test_rotation_by_size_and_index(tmp_path: pathlib.Path) -> None:
    write(tmp_path, 2000, max_segment_bytes=32 * 1024)
    (segments,) = actor_logs([tmp_path]).values()
    assert len(segments) > 2
    total = sum(len(list(Segment(p).records())) for p in segments)
    assert total == 4000
    first = Segment(segments[0])
    entries = first.index()
    assert entries and len(entries) == len(list(first.blocks()))  # one entry per block
    offset, index, wall = entries[1]
    record = next(r for o, r in first.records() if o == offset)  # every entry points at a whole block
    assert isinstance(record, In) and record.index == index and record.wall_ns == wall


def test_actor_logs_finds_recordings(tmp_path: pathlib.Path) -> None:
    write(tmp_path, 1)
    assert list(actor_logs([tmp_path])) == [tmp_path / "worker_0"]
    assert list(actor_logs([tmp_path / "worker_0"])) == [tmp_path / "worker_0"]
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        actor_logs([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no recordings under"):
        actor_logs([tmp_path / "empty"])


def test_a_row_reads_back_as_its_record() -> None:
    from actorwire.transport.recording import Out, Record, row

    message = m.SyncNow(cycle=3)
    records = [In(4, 10, 20, ENV, message, 30), In(4, 10, 20, ENV, message, 30, "ValueError: x"),
               Out(4, "tell", 20, (ENV, message))]
    rows = [row(In, 4, 10, 20, ENV, message, 30), row(In, 4, 10, 20, ENV, message, 30, "ValueError: x"),
            row(Out, 4, "tell", 20, (ENV, message))]
    decode = msgspec.msgpack.Decoder(Record).decode
    assert [decode(msgspec.msgpack.encode(r)) for r in rows] == records


def test_a_view_decodes_the_named_fields_of_a_record_and_skips_the_rest() -> None:
    from actorwire.transport.recording import view

    EnvView = view(m.Envelope, "EnvView", sender=str)
    InView = view(In, "InView", index=int, envelope=EnvView, end_ns=int)
    raw = msgspec.msgpack.encode(In(4, 10, 20, ENV, m.SyncNow(cycle=3), 30, "ValueError: x"))
    seen = msgspec.msgpack.decode(raw, type=InView)
    assert (seen.index, seen.envelope.sender, seen.end_ns) == (4, "coordinator", 30)
    assert not hasattr(seen, "error")


def test_format_1_segments_still_read(tmp_path: pathlib.Path) -> None:
    """Format 1 framed every record on its own; recordings made before blocks still open."""
    import zlib

    from actorwire.transport.recording._schema import FRAME

    header = msgspec.msgpack.encode(msgspec.structs.replace(HEADER, format_version=1))
    body = b""
    for i in range(1, 4):
        payload = msgspec.msgpack.encode(In(i, i, 1_000 + i, ENV, m.SyncNow(cycle=i), i + 1))
        body += FRAME.pack(len(payload), zlib.crc32(payload)) + payload
    path = tmp_path / "worker_0" / "seg-000001.awlog"
    path.parent.mkdir()
    path.write_bytes(MAGIC + FRAME.pack(len(header), zlib.crc32(header)) + header + body)
    records = [r for _, r in Segment(path).records()]
    assert [r.message.cycle for r in records] == [1, 2, 3]
    from actorwire.actors.cli._log_stats import collect_stats

    assert collect_stats([str(tmp_path)])["kinds"]["sync_now"]["count"] == 3


def test_stats_agree_with_a_record_by_record_count(tmp_path: pathlib.Path) -> None:
    """``log stats`` counts a block at a time; its figures are those of a plain loop over records.

    The log mixes senders and kinds within blocks, spreads gaps and handler times over several
    blocks, and repeats values (ties go to the earlier message), so no shortcut is left untested.
    """
    from collections import Counter

    from actorwire.actors.cli._log_stats import collect_stats

    writer = SegmentWriter(tmp_path, HEADER)
    walls, durations, senders, kinds = [], [], [], []
    wall = 1_000_000_000
    for i in range(1, 1_001):
        wall += (i * 7919) % 50 * 1_000_000  # gaps of 0-49 ms, each value many times
        sender = "coordinator" if i % 300 < 200 else f"peer/{i % 3}"  # whole blocks of one, and mixed
        message = m.SyncNow(cycle=i) if i % 5 else m.Heartbeat(rank=i % 4, step_count=i)
        duration = (i * 104729) % 97 * 1_000  # 0-96 us, ties too
        start = 10 * i * 1_000_000
        writer.write(In(i, start, wall, m.Envelope(sender=sender, target="worker/0", seq=i), message,
                        start + duration), i, wall)
        walls.append(wall)
        durations.append(duration)
        senders.append(sender)
        kinds.append(type(message).wire_tag())
    writer.close()

    stats = collect_stats([str(tmp_path)])
    assert stats["records"] == 1_000
    assert {k: v["count"] for k, v in stats["kinds"].items()} == Counter(kinds)
    assert {(p["sender"], p["target"]): p["count"] for p in stats["pairs"]} == {
        (s, "worker/0"): n for s, n in Counter(senders).items()}
    steps = [0] + [b - a for a, b in zip(walls, walls[1:])]
    gaps = sorted(((d / 1e9, i + 1) for i, d in enumerate(steps)), key=lambda g: (-g[0], g[1]))[:5]
    assert [(g["seconds"], g["index"]) for g in stats["largest_gaps"]] == gaps
    slow = sorted(((d / 1e6, i + 1) for i, d in enumerate(durations)), key=lambda s: (-s[0], s[1]))[:10]
    assert [(h["ms"], h["index"]) for h in stats["slowest_handlers"]] == slow


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 8192, 30_001])
def test_block_checksums_in_pieces_equal_one_crc32(size: int) -> None:
    """The writer checksums a block in pieces (so the GIL is never let go); readers check one crc32."""
    import zlib

    from actorwire.transport.recording._writer import _crc32

    data = bytes(range(256)) * (size // 256 + 1)
    assert _crc32(data[:size]) == zlib.crc32(data[:size])


def test_log_show_keeps_time_order_for_protocol_logs_too(tmp_path: pathlib.Path) -> None:
    """An actor's log writes a handler's sends before its In; a protocol log (``worker/<rank>``)
    writes its In or Call first and the sends when they go out. Both merge in wall-clock order."""
    from actorwire.actors.cli._log import _Progress, merged
    from actorwire.transport.recording import Call, Out

    def out(index: int, wall: int, sender: str, target: str) -> Out:
        return Out(index, "tell", wall, (m.Envelope(sender=sender, target=target, seq=index, wall_ns=wall),
                                         m.Heartbeat(rank=0, step_count=index)))

    actor = SegmentWriter(tmp_path, msgspec.structs.replace(HEADER, actor="coordinator"))
    protocol = SegmentWriter(tmp_path, msgspec.structs.replace(HEADER, actor="worker/0"))
    for i in range(1, 6):
        base = i * 1_000
        # The coordinator handles message i at base+100 and sends at base+150 (written first).
        actor.write(out(i, base + 150, "coordinator", "worker/0"))
        actor.write(In(i, base, base + 100, m.Envelope(sender="worker/0", target="coordinator", seq=i),
                       m.SyncNow(cycle=i), base + 1), i, base + 100)
        # The rank takes input 2i-1 (a message) at base+200, sends at base+300; input 2i (a tick)
        # at base+400, sends at base+500.
        protocol.write(In(2 * i - 1, base, base + 200, m.Envelope(sender="coordinator", target="worker/0", seq=i),
                          m.SyncNow(cycle=i), base + 1), 2 * i - 1, base + 200)
        protocol.write(out(2 * i - 1, base + 300, "worker/0", "coordinator"))
        protocol.write(Call(2 * i, "tick", base, base + 400, msgspec.Raw(b"\x90")), 2 * i, base + 400)
        protocol.write(out(2 * i, base + 500, "worker/0", "coordinator"))
    actor.close()
    protocol.close()

    rows = list(merged([str(tmp_path)], skip_corrupt=False, progress=_Progress(0, "")))
    walls = [record.wall_ns for _, record in rows]
    assert walls == sorted(walls)
    assert len(rows) == 5 * 2 + 5 * 3  # the coordinator's In and Out; the rank's In and two Outs
