"""Reading recordings for the log commands: segments, actors' records merged in wall-clock order,
progress on long reads."""

from __future__ import annotations

import heapq
import pathlib
import re
import sys
from collections.abc import Iterator
from typing import Any

from actorwire.transport.recording import (
    Call,
    In,
    Out,
    Segment,
    actor_logs,
)

# -- reading -------------------------------------------------------------------


class _Progress:
    """A progress bar on stderr (rich's, transient), only on a terminal and only for large reads."""

    def __init__(self, total: int, label: str) -> None:
        self._bar: Any = None
        if total > 8 * 1024 * 1024 and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn(label), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=True)
            self._task = self._bar.add_task(label, total=total)
            self._bar.start()

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _segments(paths: list[str]) -> dict[pathlib.Path, list[pathlib.Path]]:
    return actor_logs(paths)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters escaped: a recorded string cannot move the cursor or recolour
    a terminal (``\\x1b[2J`` in a message prints as those characters, not as a cleared screen)."""
    return _CONTROL.sub(lambda c: f"\\x{ord(c.group()):02x}", text)


def note(text: str) -> None:
    """One line on stderr, escaped."""
    print(f"actorwire: {printable(text)}", file=sys.stderr)


def iter_actor(segments: list[pathlib.Path], *, skip_corrupt: bool, progress: _Progress) -> Iterator[tuple[str, Any]]:
    """``(actor name, record)`` for every record of one actor, in order; a torn tail is reported."""
    for path in segments:
        segment = Segment(path)
        for _, record in segment.records(skip_corrupt=skip_corrupt):
            yield segment.header.actor, record
        torn = segment.torn_note()
        if torn:
            note(torn)
        progress.advance(len(segment))


def _time(record: Any) -> int:
    return getattr(record, "wall_ns", 0)


def _in_time_order(records: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """One actor's In and Out records in wall-clock order.

    An actor's ``In`` is written when its handler returns, after the sends it made: those sends
    are held back until their ``In`` comes, then follow it.  A protocol log (``worker/<rank>``)
    writes an input's ``In`` or ``Call`` first and its sends as they go out: a send whose input
    has been read already is in order as it stands.
    """
    held: list[tuple[str, Any]] = []
    taken = 0  # the highest input index read so far (In or Call)
    for actor, record in records:
        if isinstance(record, Out):
            if record.index <= taken:  # from on_start (index 0), or after its input's record
                yield actor, record
            else:
                held.append((actor, record))
        elif isinstance(record, (In, Call)):
            taken = max(taken, record.index)
            if isinstance(record, In):
                yield actor, record
            keep = []
            for item in held:
                if item[1].index <= taken:
                    yield item
                else:
                    keep.append(item)
            held = keep
    yield from held


def merged(paths: list[str], *, skip_corrupt: bool, progress: _Progress) -> Iterator[tuple[str, Any]]:
    """In and Out records of every actor under ``paths``, merged by wall clock."""
    streams = [
        _in_time_order(iter_actor(segments, skip_corrupt=skip_corrupt, progress=progress))
        for segments in _segments(paths).values()
    ]
    return heapq.merge(*streams, key=lambda item: _time(item[1]))
