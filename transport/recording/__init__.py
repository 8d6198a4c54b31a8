"""actorwire.transport.recording: the on-disk format of recordings.

``_schema`` defines it once (segment framing, the header, every record
kind); the writer and the reader, the recorder's fast rows and the log
command's partial views all derive from it.
"""

from __future__ import annotations

from actorwire.transport.recording._reader import (
    IncompleteHeader,
    RunInfo,
    Segment,
    SeveralRuns,
    actor_logs,
    file_size,
    runs_under,
)
from actorwire.transport.recording._schema import (
    FORMAT_VERSION,
    INDEX_EVERY,
    MAGIC,
    RECORD_TYPES,
    Begin,
    Call,
    Clock,
    CorruptRecord,
    Done,
    Draw,
    Effect,
    In,
    LogFormatError,
    LogHeader,
    Out,
    Record,
    actor_dir_name,
    row,
    view,
)
from actorwire.transport.recording._writer import SegmentWriter

__all__ = [
    "FORMAT_VERSION", "INDEX_EVERY", "MAGIC", "RECORD_TYPES", "Record", "LogHeader", "Begin", "Call", "In", "Done", "Out",
    "Clock", "Draw", "Effect", "CorruptRecord", "LogFormatError", "SegmentWriter", "Segment", "actor_logs",
    "file_size", "actor_dir_name", "row", "view", "IncompleteHeader", "SeveralRuns", "RunInfo", "runs_under",
]
