"""Reading segments back: header, records, torn tails, corruption, indexes.

A recording comes from wherever a user found it, so nothing here trusts it:

* a segment is opened only if it is a regular file whose real path lies
  inside the recording it was found in (no FIFOs, devices, or symlinks out);
* it is memory-mapped, never read whole, so its size costs address space,
  not memory;
* every length is checked against the file and against ``MAX_RECORD``, a
  nesting too deep to decode is an error naming file and offset, and a
  resync after corruption looks at most ``MAX_RESYNC`` bytes ahead.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import pathlib
import re
import stat
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
_block_decoder = msgspec.msgpack.Decoder(list[Record])  # type: ignore[valid-type]
_raw_block_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])

#: The smallest record: a one-byte tag and a one-element array (format 1).
MIN_RECORD = 2
#: The smallest block: an empty array (format 2).
MIN_BLOCK = 1
#: How far past a corrupt record ``skip_corrupt`` looks for the next whole one.
MAX_RESYNC = 64 * 1024 * 1024
_NONZERO = re.compile(rb"[^\x00]")
#: An index file larger than this is not one of ours.
MAX_INDEX = 256 * 1024 * 1024


class IncompleteHeader(LogFormatError):
    """The file ends before its header does: a segment being created, or a cut one."""


class SeveralRuns(LogFormatError):
    """A directory holds more than one run: the reader will not mix them."""


def _inside(path: pathlib.Path, root: pathlib.Path) -> bool:
    return path == root or root in path.parents


def open_regular(path: pathlib.Path, root: pathlib.Path | None = None, *, limit: int | None = None) -> mmap.mmap | bytes:
    """Map ``path`` read-only, refusing anything but a regular file inside ``root``."""
    real = pathlib.Path(os.path.realpath(path))
    if root is not None and not _inside(real, pathlib.Path(os.path.realpath(root))):
        raise LogFormatError(f"{path}: a link out of the recording (to {real}); not read")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise NoSuchFile(f"{path}: no such file") from None
    except OSError as exc:
        raise LogFormatError(f"{path}: cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LogFormatError(f"{path}: not a regular file; not read")
        if limit is not None and info.st_size > limit:
            raise LogFormatError(f"{path}: {info.st_size} bytes, more than any file of a recording ({limit})")
        if info.st_size == 0:
            return b""
        try:
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except OSError as exc:  # ENOMEM under an address-space limit (ulimit -v): a huge (sparse) file
            raise LogFormatError(f"{path}: cannot map its {info.st_size} bytes: {exc.strerror}") from None
    finally:
        os.close(fd)


class Segment:
    """Read one segment file: its header, then its records with their offsets."""

    def __init__(self, path: pathlib.Path | str, *, root: pathlib.Path | str | None = None) -> None:
        self.path = pathlib.Path(path)
        self.root = pathlib.Path(root) if root is not None else self.path.parent
        self.data = open_regular(self.path, self.root)
        if len(self.data) < len(MAGIC) and MAGIC.startswith(bytes(self.data)):
            raise IncompleteHeader(f"{self.path}: truncated before its header")
        if self.data[:len(MAGIC)] != MAGIC:
            raise LogFormatError(f"{self.path}: not an actorwire recording (bad magic)")
        header, self.body_offset = self._read_header()
        if header.format_version > FORMAT_VERSION:
            raise LogFormatError(
                f"{self.path}: written by log format {header.format_version}; this build reads up to "
                f"{FORMAT_VERSION}"
            )
        self.header = header
        #: Bytes at the end that did not form a whole record (a torn write), and where they start.
        self.torn_tail = 0
        self.torn_at = 0

    def __len__(self) -> int:
        return len(self.data)

    def close(self) -> None:
        if isinstance(self.data, mmap.mmap):
            self.data.close()

    def _read_header(self) -> tuple[LogHeader, int]:
        offset = len(MAGIC)
        if len(self.data) < offset + FRAME.size:
            raise IncompleteHeader(f"{self.path}: truncated before its header")
        length, crc = FRAME.unpack_from(self.data, offset)
        if length > MAX_RECORD:
            raise LogFormatError(f"{self.path}: header length {length} at byte {offset} is out of range")
        if offset + FRAME.size + length > len(self.data):
            raise IncompleteHeader(f"{self.path}: header at byte {offset} runs past the end of the file")
        payload = self.data[offset + FRAME.size: offset + FRAME.size + length]
        if zlib.crc32(payload) != crc:
            raise LogFormatError(f"{self.path}: corrupt header at byte {offset}")
        try:
            return _header_decoder.decode(payload), offset + FRAME.size + length
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise LogFormatError(f"{self.path}: unreadable header at byte {offset}: {exc}") from None
        except RecursionError:
            raise LogFormatError(f"{self.path}: header at byte {offset} is nested too deep to decode") from None

    def frames(self, *, skip_corrupt: bool = False) -> Iterator[tuple[int, bytes]]:
        """``(offset, payload)`` of every whole frame after the header (a block; in format 1 a record).

        A torn tail ends the iteration and is left in ``torn_tail``/``torn_at`` for the caller
        to report; a bad length or CRC raises :class:`CorruptRecord` unless ``skip_corrupt``.
        """
        data, size = self.data, len(self.data)
        offset = self.body_offset
        unpack = FRAME.unpack_from
        crc32 = zlib.crc32
        low = self._min
        while offset < size:
            if size - offset < FRAME.size:
                self.torn_tail, self.torn_at = size - offset, offset
                return
            length, crc = unpack(data, offset)
            start = offset + FRAME.size
            end = start + length
            if end > size and low <= length <= MAX_RECORD:
                # A length past the end: a torn tail (the writer died mid-write) only if nothing whole
                # follows; with whole records after it, a length corrupted mid-segment.
                after = self._next_whole(offset + 1, size)
                if after is None:
                    self.torn_tail, self.torn_at = size - offset, offset
                    return
                if not skip_corrupt:
                    raise CorruptRecord(self.path, offset, f"length {length} runs past the end of the file, "
                                                           f"and a whole record follows at byte {after}")
                offset = after
                continue
            payload = data[start:end]
            if not low <= length <= MAX_RECORD or crc32(payload) != crc:
                reason = f"length {length} out of range" if not low <= length <= MAX_RECORD else "crc mismatch"
                if not skip_corrupt:
                    raise CorruptRecord(self.path, offset, reason)
                offset = self._resync(offset + 1)
                continue
            yield offset, payload
            offset = end

    @property
    def _min(self) -> int:
        return MIN_RECORD if self.header.format_version < 2 else MIN_BLOCK

    def blocks(self, decoder: msgspec.msgpack.Decoder[Any] | None = None, *,
               skip_corrupt: bool = False) -> Iterator[tuple[int, list[Any]]]:
        """``(offset, records)`` per block, each block decoded in one call (``decoder`` decodes a
        list: of :data:`Record` by default, or of views).  A format 1 segment yields one-record blocks."""
        v1 = self.header.format_version < 2
        if decoder is None:
            decode = _record_decoder.decode if v1 else _block_decoder.decode
        else:
            decode = decoder.decode
        for offset, payload in self.frames(skip_corrupt=skip_corrupt):
            try:
                records = decode(b"\x91" + payload) if v1 and decoder is not None else decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                if not skip_corrupt:
                    raise CorruptRecord(self.path, offset, f"undecodable record: {exc}") from None
                continue
            except RecursionError:
                if not skip_corrupt:
                    raise CorruptRecord(self.path, offset, "nested too deep to decode") from None
                continue
            yield offset, [records] if v1 and decoder is None else records

    def records(self, *, skip_corrupt: bool = False, raw: bool = False) -> Iterator[tuple[int, Any]]:
        """``(offset, record)`` pairs (the offset of the record's block); ``raw=True`` yields each
        record's msgpack bytes undecoded."""
        if raw:
            if self.header.format_version < 2:
                yield from self.frames(skip_corrupt=skip_corrupt)
                return
            for offset, block in self.blocks(_raw_block_decoder, skip_corrupt=skip_corrupt):
                for item in block:
                    yield offset, bytes(item)
            return
        for offset, block in self.blocks(skip_corrupt=skip_corrupt):
            for record in block:
                yield offset, record

    def _resync(self, offset: int) -> int:
        """The next offset at which a whole record checks out (or the end), looking at most MAX_RESYNC ahead."""
        size = len(self.data)
        found = self._next_whole(offset, min(size, offset + MAX_RESYNC + FRAME.size))
        if found is not None:
            return found
        if size - offset > MAX_RESYNC:
            raise CorruptRecord(self.path, offset - 1, f"no whole record in the {MAX_RESYNC >> 20} MiB after it")
        return size

    def _next_whole(self, offset: int, stop: int) -> int | None:
        """The first offset in [offset, stop) at which a whole record checks out, or None.

        A frame's length is at least 1, so one of its four bytes is not zero: runs of zeros (a sparse
        or zero-filled file) are skipped with one search instead of one step per byte (8 GiB of zeros
        took --skip-corrupt over a minute)."""
        data, size, low = self.data, len(self.data), self._min
        unpack, crc32 = FRAME.unpack_from, zlib.crc32
        while offset + FRAME.size <= stop:
            hit = _NONZERO.search(data, offset, min(stop, size))
            if hit is None:
                return None
            offset = max(offset, hit.start() - 3)
            length, crc = unpack(data, offset)
            end = offset + FRAME.size + length
            if low <= length <= MAX_RECORD and end <= size and crc32(data[offset + FRAME.size: end]) == crc:
                return offset
            offset += 1
        return None

    def index(self) -> list[tuple[int, int, int]]:
        """``(offset, message index, wall_ns)`` entries of the segment's index file."""
        path = self.path.with_suffix(".awidx")
        if not path.exists():
            return []
        raw = open_regular(path, self.root, limit=MAX_INDEX)
        whole = len(raw) - len(raw) % INDEX.size
        return [INDEX.unpack_from(raw, i) for i in range(0, whole, INDEX.size)]

    def torn_note(self) -> str | None:
        """One line for a torn tail, or None."""
        if not self.torn_tail:
            return None
        return (f"{self.path}: torn tail: the last {self.torn_tail} bytes (from byte {self.torn_at}) are not a "
                f"whole record; ignored")


def _segments_of(directory: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in directory.glob("seg-*.awlog"))


@dataclasses.dataclass(frozen=True)
class RunInfo:
    path: pathlib.Path
    actors: int
    created_wall_ns: int


def runs_under(directory: pathlib.Path) -> list[RunInfo]:
    """The run directories directly under ``directory`` (each holds actor directories of segments)."""
    found = []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        actors = [a for a in sorted(sub.iterdir()) if a.is_dir() and _segments_of(a)]
        if not actors:
            continue
        created = 0
        try:
            created = Segment(_segments_of(actors[0])[0], root=directory).header.created_wall_ns
        except LogFormatError:
            pass
        found.append(RunInfo(sub, len(actors), created))
    return found


def _describe_runs(runs: list[RunInfo]) -> str:
    import time

    parts = []
    for run in runs:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.created_wall_ns / 1e9)) if run.created_wall_ns else "?"
        parts.append(f"{run.path.name} ({run.actors} actors, {when})")
    return ", ".join(parts)


def actor_logs(paths: list[str] | list[pathlib.Path]) -> dict[pathlib.Path, list[pathlib.Path]]:
    """Expand recording paths into actor dirs and their segments.

    A path may be a segment, an actor directory, a run directory (actor directories), or a
    directory holding exactly one run; one holding several is refused, naming them.
    """
    found: dict[pathlib.Path, list[pathlib.Path]] = {}
    for raw in paths:
        path = pathlib.Path(raw)
        if not path.exists():
            raise NoSuchFile(f"{path}: no such file or directory")
        if not path.is_dir():
            found.setdefault(path.parent, []).append(path)
            continue
        segments = _segments_of(path)
        if segments:
            found.setdefault(path, []).extend(segments)
            continue
        actors = {sub: _segments_of(sub) for sub in sorted(p for p in path.iterdir() if p.is_dir())}
        actors = {sub: segs for sub, segs in actors.items() if segs}
        if not actors:
            runs = runs_under(path)
            if len(runs) > 1:
                raise SeveralRuns(f"{path} holds {len(runs)} runs: {_describe_runs(runs)}; give one "
                                  f"(e.g. {runs[-1].path})")
            if runs:
                actors = {sub: _segments_of(sub) for sub in sorted(p for p in runs[0].path.iterdir() if p.is_dir())}
                actors = {sub: segs for sub, segs in actors.items() if segs}
        for sub, segs in actors.items():
            found.setdefault(sub, []).extend(segs)
    for segs in found.values():
        for seg in segs:
            _check_inside(seg, paths)
    if not found:
        raise NoSuchFile(f"no recordings under {', '.join(map(str, paths))}")
    return {d: sorted(set(s)) for d, s in found.items()}


def _check_inside(segment: pathlib.Path, given: list[str] | list[pathlib.Path]) -> None:
    real = pathlib.Path(os.path.realpath(segment))
    roots = [pathlib.Path(os.path.realpath(g if os.path.isdir(g) else os.path.dirname(g) or ".")) for g in given]
    if not any(_inside(real, root) for root in roots):
        raise LogFormatError(f"{segment}: a link out of the recording (to {real}); not read")


def file_size(paths: list[pathlib.Path]) -> int:
    return sum(os.path.getsize(p) for p in paths)
