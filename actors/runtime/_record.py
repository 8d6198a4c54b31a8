"""Recording taps: everything an actor receives, sends, reads from the clock and draws at random.

Switched on per system (``ActorSystem(record=DIR)``, written to ``DIR/<run id>/``) or by the environment
(``ACTORWIRE_RECORD=DIR``, optionally ``ACTORWIRE_RECORD_ACTORS="coordinator,worker/*"``),
with no change to the actors.  Each recorded actor writes its own log (see
:mod:`actorwire.transport.recording`); the context that feeds the recorder is
:class:`~._context.RecordingContext`, and :mod:`._replay` reads the log back.
"""

from __future__ import annotations

import fnmatch
import pathlib
import time
from typing import Any

import msgspec

from actorwire.transport.internal import settings
from actorwire.transport.recording import (
    Begin,
    In,
    LogHeader,
    SegmentWriter,
    actor_dir_name,
)

_FLUSH_EVERY_NS = 200_000_000  # written out every 0.2 s at least, while messages come
IN_TAG = In.__struct_config__.tag  # In rows (recording.row), built inline: one per message handled
_IN = IN_TAG


class RecordSettings(msgspec.Struct, frozen=True):
    directory: str
    #: Glob patterns of actor names to record.
    actors: tuple[str, ...] = ("*",)
    max_segment_bytes: int = 64 * 1024 * 1024

    @classmethod
    def from_env(cls) -> RecordSettings | None:
        directory = settings().record
        if not directory:
            return None
        patterns = tuple(p.strip() for p in settings().record_actors.split(",") if p.strip())
        return cls(directory, patterns or ("*",))

    def wants(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.actors)


def run_directory(directory: str | pathlib.Path, run_id: str) -> pathlib.Path:
    """Where run ``run_id`` recorded into ``directory`` is written: ``directory/<run id>/``."""
    return pathlib.Path(directory) / actor_dir_name(run_id)


def actor_class_path(actor: object) -> str:
    cls = type(actor)
    return f"{cls.__module__}:{cls.__qualname__}"


class Recorder:
    """The log of one actor, and the index of the message being handled."""

    def __init__(self, settings: RecordSettings, *, run_id: str, name: str, actor: Any, rank: int | None,
                 seed: int) -> None:
        config = actor.config()
        try:
            msgspec.msgpack.encode(config)
        except TypeError:
            config = {}
        header = LogHeader(run_id=run_id, actor=name, actor_class=actor_class_path(actor), config=config,
                           rank=rank, seed=seed, created_wall_ns=time.time_ns())
        # One directory per run: a second run recorded into the same DIR sits beside the first.
        self.writer = SegmentWriter(run_directory(settings.directory, run_id), header,
                                    max_segment_bytes=settings.max_segment_bytes)
        self.index = 0
        self._flushed = time.monotonic_ns()

    def begin(self) -> None:
        self.writer.write(Begin(time.monotonic_ns(), time.time_ns()))

    # The In row of every message handled is written by the live runtime itself (_Cell._handle builds
    # recording.row's tuple inline); the other records come through write().

    def handled_until(self, now_ns: int) -> None:
        """The live runtime wrote In rows itself up to monotonic ``now_ns``: flush on schedule."""
        if now_ns - self._flushed > _FLUSH_EVERY_NS:
            self.writer.flush()
            self._flushed = now_ns

    def write(self, record: Any) -> None:
        self.writer.write(record)

    def close(self) -> None:
        self.writer.close()
