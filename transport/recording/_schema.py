"""The recording log format: append-only segment files of CRC-checked records.

A recording is a directory; each recorded actor has a sub-directory of
segments, ``seg-000001.awlog``, ``seg-000002.awlog``, ... (a new one when the
current one passes ``max_segment_bytes``) each with an index beside it
(``seg-000001.awidx``).

Segment layout (format 2)::

    magic   b"AWLOG1\\n\\0"                      8 bytes
    header  u32 length | u32 crc32 | msgpack LogHeader
    block   u32 length | u32 crc32 | msgpack array of Record   (repeated)

Integers are little-endian; the CRC is zlib's crc32 of the msgpack bytes.
Records travel in blocks of up to ``BLOCK_RECORDS`` (a block is written when
it is full and whenever the writer flushes, every 0.2 s while recording), so
a reader decodes a block in one msgspec call.  Format 1 framed each record on
its own (``u32 length | u32 crc32 | msgpack Record``); readers still take it.

A writer that dies mid-block leaves a torn tail: a reader stops at the last
whole block and reports how many bytes it ignored.  A block whose CRC does not
match in the *middle* of a segment is corruption: the reader raises
``CorruptRecord`` naming the file and the byte offset, or skips past it when
asked to (resynchronising on the next offset whose length and CRC check out).

The index holds one ``(offset, index, wall_ns)`` triple of u64 per block (per
``INDEX_EVERY`` records in format 1): where the block starts, and the first
message index and wall time in it, so a reader can seek by either without
scanning the segment.
"""

from __future__ import annotations

import pathlib
import re
import struct
import typing
from typing import Any, Union

import msgspec

from actorwire.messages import ActorwireError, AnyMessage, Envelope

MAGIC = b"AWLOG1\n\0"
#: 2: records in blocks, and ``Call`` records (a protocol's inputs other than messages).
FORMAT_VERSION = 2
#: Records per block at most (format 2).
BLOCK_RECORDS = 256
INDEX_EVERY = 256
FRAME = struct.Struct("<II")
INDEX = struct.Struct("<QQQ")
MAX_RECORD = 256 * 1024 * 1024


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


class Call(msgspec.Struct, frozen=True, array_like=True, tag="k"):
    """Input ``index`` of a recorded protocol (not an actor): ``method`` called with ``args``.

    ``args`` and ``result`` are msgpack of per-method types (the recorder and replay derive
    them from the method's signature), kept undecoded until replay knows the method.
    """

    index: int
    method: str
    start_ns: int
    wall_ns: int
    args: msgspec.Raw
    end_ns: int = 0
    result: msgspec.Raw = msgspec.Raw(b"\xc0")
    error: str | None = None


Record = Union[Begin, In, Done, Out, Clock, Draw, Effect, Call]


class CorruptRecord(ActorwireError):
    """A record failed its CRC or framing check in the middle of a segment."""

    def __init__(self, path: pathlib.Path | str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record at byte {offset} ({reason})")
        self.path = str(path)
        self.offset = offset
        self.reason = reason


class LogFormatError(ActorwireError):
    """Not a recording, or one written by a newer format version."""



RECORD_TYPES: tuple[type[msgspec.Struct], ...] = typing.get_args(Record)


def row(record_type: type[msgspec.Struct], *values: Any) -> tuple[Any, ...]:
    """The fields of one record as a tagged tuple: the same bytes as the struct, without building it.

    Written once or twice per handled message, so the writer skips the
    struct; the tag still comes from the schema.
    """
    return (record_type.__struct_config__.tag, *values)


def view(record_type: type[msgspec.Struct], name: str, **fields: Any) -> type[msgspec.Struct]:
    """A read-only view of ``record_type`` that decodes only the leading fields named in ``fields``.

    ``fields`` maps field names to the type to decode them as (often another
    view).  Fields before the last named one are kept as ``msgspec.Raw``;
    those after it are skipped without being built.
    """
    names = record_type.__struct_fields__
    last = max((names.index(f) for f in fields), default=-1)
    defaults = dict(zip(names[len(names) - len(record_type.__struct_defaults__):], record_type.__struct_defaults__))
    spec: list[Any] = []
    for field in names[:last + 1]:
        kind = fields.get(field, msgspec.Raw)
        spec.append((field, kind, defaults[field]) if field in defaults else (field, kind))
    config = record_type.__struct_config__
    # Not tracked by the cycle collector: a view holds plain values, and a reader keeps
    # hundreds of thousands of them (tracking them made log stats 1.5x slower).
    return msgspec.defstruct(name, spec, array_like=config.array_like, tag=config.tag, frozen=True, kw_only=True,
                             gc=False)


def actor_dir_name(actor: str) -> str:
    """The directory an actor's segments live in: its name with anything unsafe replaced."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", actor)
