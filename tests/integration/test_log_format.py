"""docs/recording.md's "The log format" is enough to read a recording: this reader uses that
section, Python's struct and zlib, and msgpack-python, and nothing of actorwire's reader."""

from __future__ import annotations

import pathlib
import struct
import zlib
from typing import Any

import msgpack
import pytest

from actorwire import messages as m
from actorwire.actors import Actor, ActorSystem, Context, handler
from actorwire.actors.runtime._replay import load_records

pytestmark = [pytest.mark.timeout(60)]

MAGIC = b"AWLOG1\n\0"
FRAME = struct.Struct("<II")  # u32 length | u32 crc32
ENTRY = struct.Struct("<QQQ")  # index entry: offset, index, wall_ns


class Teller(Actor):
    """On ``StartEpoch(partition_size=N)`` tells N heartbeats to ``sink`` and reads the clock once."""

    @handler
    def on_start_epoch(self, msg: m.StartEpoch, ctx: Context) -> None:
        ctx.now()
        for i in range(msg.partition_size):
            ctx.tell("sink", m.Heartbeat(rank=0, step_count=i + 1))


class Sink(Actor):
    def __init__(self, notify: str = "", expect: int = 0) -> None:
        self.notify, self.expect, self.count = notify, expect, 0

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        self.count += 1
        if self.count == self.expect:
            ctx.tell(self.notify, m.SyncAck(rank=0, step_count=self.count))


def frame(data: bytes, at: int) -> tuple[bytes, int]:
    """The payload of the ``u32 length | u32 crc32 | msgpack`` frame at ``at``, and where the next begins."""
    length, crc = FRAME.unpack_from(data, at)
    payload = data[at + FRAME.size:at + FRAME.size + length]
    assert len(payload) == length and zlib.crc32(payload) == crc, f"bad frame at byte {at}"
    return payload, at + FRAME.size + length


def read_segment(path: pathlib.Path) -> tuple[dict[str, Any], list[tuple[int, list[Any]]]]:
    """The header and the blocks (offset, records) of one format-2 segment."""
    data = path.read_bytes()
    assert data[:len(MAGIC)] == MAGIC
    raw, at = frame(data, len(MAGIC))
    header = msgpack.unpackb(raw)
    assert header["format_version"] == 2
    blocks = []
    while at < len(data):
        offset = at
        raw, at = frame(data, at)
        records = msgpack.unpackb(raw)
        assert isinstance(records, list) and 1 <= len(records) <= 256
        blocks.append((offset, records))
    return header, blocks


def test_a_recording_read_with_the_page_alone(tmp_path: pathlib.Path) -> None:
    n = 700  # three blocks of the teller's Out records at least
    with ActorSystem(record=str(tmp_path)) as system:
        inbox = system.inbox("main")
        system.spawn(Sink("main", n), "sink")
        system.spawn(Teller(), "teller")
        system.tell("teller", m.StartEpoch(epoch=0, partition_offset=0, partition_size=n))
        assert inbox.get(timeout=30) is not None
    (run,) = tmp_path.iterdir()  # one run per directory
    assert sorted(p.name for p in run.iterdir()) == ["sink", "teller"]

    seen: dict[str, list[Any]] = {}
    for actor in ("sink", "teller"):
        (segment,) = sorted((run / actor).glob("seg-*.awlog"))
        header, blocks = read_segment(segment)
        assert header["actor"] == actor and header["run_id"] == run.name and header["segment"] == 1
        records = [r for _, block in blocks for r in block]
        seen[actor] = records
        # The index: one entry per block, its offset, and the first In record's index and wall_ns.
        index = segment.with_suffix(".awidx").read_bytes()
        entries = [ENTRY.unpack_from(index, i) for i in range(0, len(index), ENTRY.size)]
        assert len(index) % ENTRY.size == 0 and len(entries) == len(blocks)
        for (offset, block), (at, first, wall) in zip(blocks, entries):
            ins = [r for r in block if r[0] == "i"]
            assert at == offset
            assert (first, wall) == ((ins[0][1], ins[0][3]) if ins else (0, 0))

    # The sink: n In records; the envelope an array, the message a map tagged by "type".
    ins = [r for r in seen["sink"] if r[0] == "i"]
    assert len(ins) == n
    tag, index, start_ns, wall_ns, envelope, message, end_ns, *_ = ins[-1]
    assert index == n and start_ns <= end_ns and wall_ns > 0
    assert envelope[:4] == [1, "teller", "sink", n]
    assert message["type"] == "heartbeat" and message["step_count"] == n
    # The teller: a Begin, its clock read, n Outs of handler 1 with [envelope, body] as sent, its In.
    teller = seen["teller"]
    assert teller[0][0] == "b"
    assert [r[0] for r in teller[1:]] == ["c"] + ["o"] * n + ["i"]
    outs = teller[2:2 + n]
    assert {(o[1], o[2]) for o in outs} == {(1, "tell")}
    assert [o[4][0][3] for o in outs] == list(range(1, n + 1))  # the envelope's seq
    assert [o[4][1]["step_count"] for o in outs] == list(range(1, n + 1))

    # The same records as actorwire's own reader gives.
    for actor, records in seen.items():
        _, ours = load_records(run, actor)
        assert [type(r).__struct_config__.tag for r in ours] == [r[0] for r in records]
