"""The recording log format: append-only segment files of CRC-checked records.

A recording is a directory; each recorded actor has a sub-directory of
segments, ``seg-000001.awlog``, ``seg-000002.awlog``, ... (a new one when the
current one passes ``max_segment_bytes``) each with an index beside it
(``seg-000001.awidx``).

Segment layout::

    magic   b"AWLOG1\\n\\0"                      8 bytes
    header  u32 length | u32 crc32 | msgpack LogHeader
    record  u32 length | u32 crc32 | msgpack Record      (repeated)

Integers are little-endian; the CRC is zlib's crc32 of the msgpack bytes.
A writer that dies mid-record leaves a torn tail: a reader stops at the last
whole record and reports how many bytes it ignored.  A record whose CRC does
not match in the *middle* of a segment is corruption: the reader raises
``CorruptRecord`` naming the file and the byte offset, or skips past it when
asked to (resynchronising on the next offset whose length and CRC check out).

The index holds one ``(offset, index, wall_ns)`` triple of u64 every
``INDEX_EVERY`` records, so a reader can seek by message index or time
without scanning the segment.
"""

from __future__ import annotations

import os
import pathlib
import re
import struct
import zlib
from collections.abc import Iterator
from typing import Any, Union

import msgspec

from actorwire.messages import ActorwireError, AnyMessage, Envelope

MAGIC = b"AWLOG1\n\0"
FORMAT_VERSION = 1
INDEX_EVERY = 256
_FRAME = struct.Struct("<II")
_INDEX = struct.Struct("<QQQ")
_MAX_RECORD = 256 * 1024 * 1024


class LogHeader(msgspec.Struct, frozen=True, kw_only=True):
    """First record of every segment: what was recorded, and how to rebuild the actor."""

    format_version: int = FORMAT_VERSION
    run_id: str
    actor: str
    #: ``module:Qualname`` of the actor's class.
    actor_class: str
    #: The actor's ``config()``: keyword arguments that rebuild it.
    config: dict[str, Any] = {}
    rank: int | None = None
    seed: int = 0
    segment: int = 1
    created_wall_ns: int = 0


# Records.  Arrays with a short tag: they are written once per message, so size matters.


class Begin(msgspec.Struct, frozen=True, array_like=True, tag="b"):
    """The actor started (its ``on_start`` is handler index 0)."""

    start_ns: int
    wall_ns: int


class In(msgspec.Struct, frozen=True, array_like=True, tag="i"):
    """Message number ``index``, handled from ``start_ns`` to ``end_ns`` (monotonic).

    Written when the handler returns (one record per message, not two), so
    the sends, clock reads and draws of message ``index`` precede it in the
    file; readers group records by ``index``.
    """

    index: int
    start_ns: int
    wall_ns: int
    envelope: Envelope
    message: AnyMessage  # type: ignore[valid-type]
    end_ns: int = 0
    #: ``"Type: text"`` when the handler raised.
    error: str | None = None


class Done(msgspec.Struct, frozen=True, array_like=True, tag="d"):
    """Reserved: a handler end written apart from its ``In`` (not written by this version)."""

    index: int
    end_ns: int
    error: str | None = None


class Out(msgspec.Struct, frozen=True, array_like=True, tag="o"):
    """While handling ``index`` the actor sent ``message`` (``how``: tell, ask, reply).

    ``envelope`` and ``message`` are stored as the exact ``[envelope, body]``
    pair that went on the wire, copied rather than encoded again.
    """

    index: int
    how: str
    wall_ns: int
    sent: tuple[Envelope, AnyMessage]  # type: ignore[valid-type]

    @property
    def target(self) -> str:
        return self.sent[0].target

    @property
    def seq(self) -> int:
        return self.sent[0].seq

    @property
    def correlation_id(self) -> int:
        return self.sent[0].correlation_id

    @property
    def message(self) -> Any:
        return self.sent[1]


class Clock(msgspec.Struct, frozen=True, array_like=True, tag="c"):
    """A ``ctx.now()`` (``wall=False``) or ``ctx.wall()`` reading."""

    index: int
    value: float
    wall: bool = False


class Draw(msgspec.Struct, frozen=True, array_like=True, tag="r"):
    """A primitive draw of ``ctx.random``: ``random()`` (float) or ``getrandbits(bits)`` (int)."""

    index: int
    value: Union[float, int]
    bits: int = 0


class Effect(msgspec.Struct, frozen=True, array_like=True, tag="e"):
    """Any other effect: ``start_timer``, ``cancel_timer``, ``watch``, ``unwatch``, ``stop``."""

    index: int
    op: str
    key: str = ""
    delay: float = 0.0
    periodic: bool = False


Record = Union[Begin, In, Done, Out, Clock, Draw, Effect]


class CorruptRecord(ActorwireError):
    """A record failed its CRC or framing check in the middle of a segment."""

    def __init__(self, path: pathlib.Path | str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record at byte {offset} ({reason})")
        self.path = str(path)
        self.offset = offset
        self.reason = reason


class LogFormatError(ActorwireError):
    """Not a recording, or one written by a newer format version."""


_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(LogHeader)
_record_decoder = msgspec.msgpack.Decoder(Record)


def _safe_name(actor: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", actor)


class SegmentWriter:
    """Appends records for one actor, rotating segments by size."""

    def __init__(self, directory: pathlib.Path | str, header: LogHeader, *,
                 max_segment_bytes: int = 64 * 1024 * 1024) -> None:
        self.directory = pathlib.Path(directory) / _safe_name(header.actor)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_segment_bytes = max_segment_bytes
        self._header = header
        self._segment = 0
        self._file: Any = None
        self._index_file: Any = None
        self._records = 0
        self._last_index = 0
        self._last_wall = 0
        existing = sorted(self.directory.glob("seg-*.awlog"))
        self._open(int(existing[-1].stem[4:]) + 1 if existing else 1)

    def _open(self, segment: int) -> None:
        self.close()
        self._segment = segment
        path = self.directory / f"seg-{segment:06d}.awlog"
        self._file = open(path, "ab", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        self._index_file = open(path.with_suffix(".awidx"), "ab")  # noqa: SIM115
        self._pos = self._file.tell()
        header = _encoder.encode(msgspec.structs.replace(self._header, segment=segment))
        self._file.write(MAGIC + _FRAME.pack(len(header), zlib.crc32(header)) + header)
        self._pos += len(MAGIC) + _FRAME.size + len(header)
        self._records = 0
        self.path = path

    def write(self, record: Any, index: int = 0, wall_ns: int = 0) -> None:
        """Append one record (a record struct, or the same fields as a tagged tuple).

        The position is counted here, not asked of the file: ``tell()`` on a
        buffered file is an lseek per record (profile: a fifth of the cost).
        """
        payload = _encoder.encode(record)
        if self._records % INDEX_EVERY == 0:
            self._index_file.write(_INDEX.pack(self._pos, index, wall_ns))
        self._file.write(_FRAME.pack(len(payload), zlib.crc32(payload)) + payload)
        self._pos += _FRAME.size + len(payload)
        self._records += 1
        if self._pos >= self.max_segment_bytes:
            self._open(self._segment + 1)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            self._index_file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._index_file.close()
            self._file = None
            self._index_file = None


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
        if len(self.data) < offset + _FRAME.size:
            raise LogFormatError(f"{self.path}: truncated before its header")
        length, crc = _FRAME.unpack_from(self.data, offset)
        payload = self.data[offset + _FRAME.size: offset + _FRAME.size + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            raise LogFormatError(f"{self.path}: corrupt header at byte {offset}")
        try:
            return _header_decoder.decode(payload), offset + _FRAME.size + length
        except msgspec.DecodeError as exc:
            raise LogFormatError(f"{self.path}: unreadable header: {exc}") from None

    def records(self, *, skip_corrupt: bool = False, raw: bool = False) -> Iterator[tuple[int, Any]]:
        """``(offset, record)`` pairs; ``raw=True`` yields the msgpack bytes undecoded."""
        data, size = self.data, len(self.data)
        offset = self.body_offset
        unpack = _FRAME.unpack_from
        crc32 = zlib.crc32
        decode = _record_decoder.decode
        while offset < size:
            if size - offset < _FRAME.size:
                self.torn_tail = size - offset
                return
            length, crc = unpack(data, offset)
            start = offset + _FRAME.size
            end = start + length
            if end > size and length <= _MAX_RECORD:
                self.torn_tail = size - offset  # the writer died mid-record
                return
            payload = data[start:end]
            if length > _MAX_RECORD or crc32(payload) != crc:
                reason = "length out of range" if length > _MAX_RECORD else "crc mismatch"
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
        while offset + _FRAME.size <= size:
            length, crc = _FRAME.unpack_from(data, offset)
            end = offset + _FRAME.size + length
            if length <= _MAX_RECORD and end <= size and zlib.crc32(data[offset + _FRAME.size: end]) == crc:
                return offset
            offset += 1
        return size

    def index(self) -> list[tuple[int, int, int]]:
        """``(offset, message index, wall_ns)`` entries of the segment's index file."""
        path = self.path.with_suffix(".awidx")
        if not path.exists():
            return []
        raw = path.read_bytes()
        whole = len(raw) - len(raw) % _INDEX.size
        return [_INDEX.unpack_from(raw, i) for i in range(0, whole, _INDEX.size)]


def actor_logs(paths: list[str] | list[pathlib.Path]) -> dict[pathlib.Path, list[pathlib.Path]]:
    """Expand recording paths (a recording dir, an actor dir, or segment files) into actor dirs."""
    found: dict[pathlib.Path, list[pathlib.Path]] = {}
    for raw in paths:
        path = pathlib.Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
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
        raise FileNotFoundError(f"no recordings under {', '.join(map(str, paths))}")
    return {d: sorted(set(s)) for d, s in found.items()}


def file_size(paths: list[pathlib.Path]) -> int:
    return sum(os.path.getsize(p) for p in paths)
