"""Reading segments back: header, records, torn tails, corruption, indexes."""

from __future__ import annotations

import os
import pathlib
import zlib
from collections.abc import Iterator
from typing import Any

import msgspec

from actorwire.transport._errors import NoSuchFile
from actorwire.transport.recording._schema import (
    FORMAT_VERSION,
    FRAME,
    INDEX,
    MAGIC,
    MAX_RECORD,
    CorruptRecord,
    LogFormatError,
    LogHeader,
    Record,
)

_header_decoder = msgspec.msgpack.Decoder(LogHeader)
_record_decoder = msgspec.msgpack.Decoder(Record)


class Segment:
    """Read one segment file: its header, then its records with their offsets."""

    def __init__(self, path: pathlib.Path | str) -> None:
        self.path = pathlib.Path(path)
        self.data = self.path.read_bytes()
        if not self.data.startswith(MAGIC):
            raise LogFormatError(f"{self.path}: not an actorwire recording (bad magic)")
        header, self.body_offset = self._read_header()
        if header.format_version > FORMAT_VERSION:
            raise LogFormatError(
                f"{self.path}: written by log format {header.format_version}; this build reads up to "
                f"{FORMAT_VERSION}"
            )
        self.header = header
        #: Bytes at the end that did not form a whole record (a torn write).
        self.torn_tail = 0

    def _read_header(self) -> tuple[LogHeader, int]:
        offset = len(MAGIC)
        if len(self.data) < offset + FRAME.size:
            raise LogFormatError(f"{self.path}: truncated before its header")
        length, crc = FRAME.unpack_from(self.data, offset)
        payload = self.data[offset + FRAME.size: offset + FRAME.size + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            raise LogFormatError(f"{self.path}: corrupt header at byte {offset}")
        try:
            return _header_decoder.decode(payload), offset + FRAME.size + length
        except msgspec.DecodeError as exc:
            raise LogFormatError(f"{self.path}: unreadable header: {exc}") from None

    def records(self, *, skip_corrupt: bool = False, raw: bool = False) -> Iterator[tuple[int, Any]]:
        """``(offset, record)`` pairs; ``raw=True`` yields the msgpack bytes undecoded."""
        data, size = self.data, len(self.data)
        offset = self.body_offset
        unpack = FRAME.unpack_from
        crc32 = zlib.crc32
        decode = _record_decoder.decode
        while offset < size:
            if size - offset < FRAME.size:
                self.torn_tail = size - offset
                return
            length, crc = unpack(data, offset)
            start = offset + FRAME.size
            end = start + length
            if end > size and length <= MAX_RECORD:
                self.torn_tail = size - offset  # the writer died mid-record
                return
            payload = data[start:end]
            if length > MAX_RECORD or crc32(payload) != crc:
                reason = "length out of range" if length > MAX_RECORD else "crc mismatch"
                if not skip_corrupt:
                    raise CorruptRecord(self.path, offset, reason)
                offset = self._resync(offset + 1)
                continue
            if raw:
                yield offset, payload
            else:
                try:
                    yield offset, decode(payload)
                except msgspec.DecodeError as exc:
                    if not skip_corrupt:
                        raise CorruptRecord(self.path, offset, f"undecodable record: {exc}") from None
            offset = end

    def _resync(self, offset: int) -> int:
        """The next offset at which a whole record checks out (or the end)."""
        data, size = self.data, len(self.data)
        while offset + FRAME.size <= size:
            length, crc = FRAME.unpack_from(data, offset)
            end = offset + FRAME.size + length
            if length <= MAX_RECORD and end <= size and zlib.crc32(data[offset + FRAME.size: end]) == crc:
                return offset
            offset += 1
        return size

    def index(self) -> list[tuple[int, int, int]]:
        """``(offset, message index, wall_ns)`` entries of the segment's index file."""
        path = self.path.with_suffix(".awidx")
        if not path.exists():
            return []
        raw = path.read_bytes()
        whole = len(raw) - len(raw) % INDEX.size
        return [INDEX.unpack_from(raw, i) for i in range(0, whole, INDEX.size)]


def actor_logs(paths: list[str] | list[pathlib.Path]) -> dict[pathlib.Path, list[pathlib.Path]]:
    """Expand recording paths (a recording dir, an actor dir, or segment files) into actor dirs."""
    found: dict[pathlib.Path, list[pathlib.Path]] = {}
    for raw in paths:
        path = pathlib.Path(raw)
        if not path.exists():
            raise NoSuchFile(f"{path}: no such file or directory")
        if path.is_file():
            found.setdefault(path.parent, []).append(path)
            continue
        segments = sorted(path.glob("seg-*.awlog"))
        if segments:
            found.setdefault(path, []).extend(segments)
            continue
        for sub in sorted(p for p in path.iterdir() if p.is_dir()):
            segs = sorted(sub.glob("seg-*.awlog"))
            if segs:
                found.setdefault(sub, []).extend(segs)
    if not found:
        raise NoSuchFile(f"no recordings under {', '.join(map(str, paths))}")
    return {d: sorted(set(s)) for d, s in found.items()}


def file_size(paths: list[pathlib.Path]) -> int:
    return sum(os.path.getsize(p) for p in paths)
