"""Appending one actor's records to its segments (the format is in ``_schema``)."""

from __future__ import annotations

import pathlib
import zlib
from typing import Any

import msgspec

from actorwire.transport.recording._schema import (
    BLOCK_RECORDS,
    FRAME,
    INDEX,
    MAGIC,
    LogHeader,
    actor_dir_name,
)

_encoder = msgspec.msgpack.Encoder()
#: zlib.crc32 lets go of the GIL for buffers over 5 KiB, and a block is 20-40 KiB: the actor's thread
#: then waits for the I/O thread to hand the GIL back (profile of bench record's sender: the CRC
#: line was a fifth of the actor thread's samples).  Checksummed in pieces under that size instead.
_CRC_PIECE = 4096


def _crc32(data: bytes) -> int:
    """zlib.crc32 of ``data``, never letting go of the GIL."""
    if len(data) <= _CRC_PIECE:
        return zlib.crc32(data)
    view, crc = memoryview(data), 0
    for at in range(0, len(data), _CRC_PIECE):
        crc = zlib.crc32(view[at:at + _CRC_PIECE], crc)
    return crc


class SegmentWriter:
    """Appends records for one actor, rotating segments by size."""

    def __init__(self, directory: pathlib.Path | str, header: LogHeader, *,
                 max_segment_bytes: int = 64 * 1024 * 1024) -> None:
        self.directory = pathlib.Path(directory) / actor_dir_name(header.actor)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_segment_bytes = max_segment_bytes
        self._header = header
        self._segment = 0
        self._file: Any = None
        self._index_file: Any = None
        self._pending: list[Any] = []
        self._block_index = 0
        self._block_wall = 0
        existing = sorted(self.directory.glob("seg-*.awlog"))
        self._open(int(existing[-1].stem[4:]) + 1 if existing else 1)

    def _open(self, segment: int) -> None:
        self._close_files()
        self._segment = segment
        path = self.directory / f"seg-{segment:06d}.awlog"
        # Each write out of this buffer is a syscall in the recording thread: about a tenth of the
        # recorded sender in bench record (0.80 of unrecorded with writes stubbed out, 0.73 with).
        # Neither an 8 MiB buffer nor a writer thread did better.
        self._file = open(path, "ab", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        self._index_file = open(path.with_suffix(".awidx"), "ab")  # noqa: SIM115
        self._pos = self._file.tell()
        header = _encoder.encode(msgspec.structs.replace(self._header, segment=segment))
        self._file.write(MAGIC + FRAME.pack(len(header), zlib.crc32(header)) + header)
        self._pos += len(MAGIC) + FRAME.size + len(header)
        self.path = path

    def write(self, record: Any, index: int = 0, wall_ns: int = 0) -> None:
        """Append one record (a record struct, or the same fields as a tagged tuple).

        It is written with its block: one array, one encoder call, one CRC and one file write
        for up to ``BLOCK_RECORDS`` records (profile of bench record: framing, checksumming and
        encoding each record alone was a third of the recorder's time; one encoder call per
        block costs 370 ns a record against 520).  A record is encoded when its block is, at
        most 0.2 s later while the actor records: what it holds must not change meanwhile
        (messages are immutable; wire records are bytes).
        """
        pending = self._pending
        if index and not self._block_index:
            self._block_index, self._block_wall = index, wall_ns
        pending.append(record)
        if len(pending) >= BLOCK_RECORDS:
            self._emit()

    def _emit(self) -> None:
        pending = self._pending
        if not pending:
            return
        payload = _encoder.encode(pending)  # a list: one msgpack array, the block
        self._index_file.write(INDEX.pack(self._pos, self._block_index, self._block_wall))
        self._file.write(FRAME.pack(len(payload), _crc32(payload)))
        self._file.write(payload)
        self._pos += FRAME.size + len(payload)
        self._pending = []
        self._block_index = self._block_wall = 0
        if self._pos >= self.max_segment_bytes:
            self._open(self._segment + 1)

    def flush(self) -> None:
        if self._file is not None:
            self._emit()
            self._file.flush()
            self._index_file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._emit()
        self._close_files()

    def _close_files(self) -> None:
        if self._file is not None:
            self._file.close()
            self._index_file.close()
            self._file = None
            self._index_file = None
