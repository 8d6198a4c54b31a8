"""``actorwire log stats``: counts, sizes and latencies of a recording, read in blocks (collect_stats
is also what ``bench record`` measures)."""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import operator
from collections import Counter
from collections.abc import Iterator
from typing import Any, Union

import msgspec

from actorwire.actors.cli._log_read import _Progress, _segments, note, printable
from actorwire.messages import Envelope
from actorwire.transport.recording import (
    RECORD_TYPES,
    CorruptRecord,
    Done,
    In,
    Segment,
    file_size,
)
from actorwire.transport.recording import view as record_view

# -- stats ---------------------------------------------------------------------


_EnvView = record_view(Envelope, "_EnvView", version=int, sender=str)


class _BodyView(msgspec.Struct, gc=False):
    type: str = "?"


_InView = record_view(In, "_InView", index=int, start_ns=int, wall_ns=int, envelope=_EnvView,
                      message=msgspec.Raw, end_ns=int)
#: The kinds of a block's messages, decoded in one call from their raw bytes joined as one array.
_KINDS_DECODER = msgspec.msgpack.Decoder(list[_BodyView])
_DoneView = record_view(Done, "_DoneView", index=int, end_ns=int)
_VIEWS = {In: _InView, Done: _DoneView}
#: Stats read only a few fields; msgspec skips the rest without building them (2x faster).
_BLOCK_STATS_DECODER = msgspec.msgpack.Decoder(list[Union[tuple(  # type: ignore[misc]
    _VIEWS.get(kind) or record_view(kind, f"_{kind.__name__}View") for kind in RECORD_TYPES)]])


_TYPE, _SENDER, _WALL, _START, _END, _MESSAGE = (operator.attrgetter(a) for a in (
    "type", "envelope.sender", "wall_ns", "start_ns", "end_ns", "message"))
#: Gaps and handler times rank by value alone: of equal ones the first read is kept (nlargest with a
#: key is stable), not the one with the larger actor name or index.
_FIRST = operator.itemgetter(0)


def _top(values: list[Any], k: int) -> list[int]:
    """Where the ``k`` largest of ``values`` are, largest first (of equal ones, the first first).

    One sort in C, stable, so ties keep their order: looking values up again with
    ``list.index`` named the first of equal values for each of them, the same message twice.
    """
    return sorted(range(len(values)), key=values.__getitem__, reverse=True)[:k]


def _array(items: list[Any]) -> bytes:
    """msgpack array of already-encoded items."""
    n = len(items)
    head = bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big") if n < 0x10000 else b"\xdd" + n.to_bytes(4, "big")
    return head + b"".join(items)


def _stat_blocks(segment: Segment, skip_corrupt: bool) -> Iterator[list[Any]]:
    """Each block of ``segment`` as stats views, decoded in one call."""
    v1 = segment.header.format_version < 2
    for offset, payload in segment.frames(skip_corrupt=skip_corrupt):
        data = b"\x91" + payload if v1 else payload
        try:
            yield _BLOCK_STATS_DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            if not skip_corrupt:
                why = "nested too deep to decode" if isinstance(exc, RecursionError) else f"undecodable record: {exc}"
                raise CorruptRecord(segment.path, offset, why) from None


def collect_stats(paths: list[str], *, skip_corrupt: bool = False) -> dict[str, Any]:
    """Counts, rates and sizes per kind and per actor pair, gaps and slowest handlers.

    A block's records are decoded in one call and counted with comprehensions and Counter
    updates, not one loop turn of Python per record (``bench record``'s ``record.read``).
    """
    logs = _segments(paths)
    progress = _Progress(sum(file_size(s) for s in logs.values()), "reading")
    kinds: Counter[str] = Counter()
    kind_bytes: Counter[str] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    gaps: list[tuple[float, str, int]] = []
    slow: list[tuple[float, str, int, str]] = []
    records = 0
    first = last = None
    for segments in logs.values():
        prev_wall: int | None = None
        starts: dict[int, tuple[int, str]] = {}
        for path in segments:
            segment = Segment(path)
            actor = segment.header.actor
            # A block at a time, and forgotten after it: memory stays flat however long the log.
            for views in _stat_blocks(segment, skip_corrupt):
                records += len(views)
                ins = list(itertools.compress(views, map(operator.is_, map(type, views), itertools.repeat(_InView))))
                if _DoneView in map(type, views):
                    done = [v for v in views if type(v) is _DoneView]
                    slow += [((d.end_ns - starts[d.index][0]) / 1e6, actor, d.index, starts[d.index][1])
                             for d in done if d.index in starts]
                if not ins:
                    continue
                raws = list(map(_MESSAGE, ins))
                sizes = list(map(len, raws))
                try:
                    names = list(map(_TYPE, _KINDS_DECODER.decode(_array(raws))))
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                    if not skip_corrupt:
                        raise CorruptRecord(segment.path, 0, f"undecodable message: {exc}") from None
                    continue
                kinds.update(names)
                for kind in set(names):  # summed in C, one pass per kind
                    kind_bytes[kind] += sum(itertools.compress(sizes, map(kind.__eq__, names)))
                for sender, n in Counter(map(_SENDER, ins)).items():
                    pairs[(sender, actor)] += n
                walls = list(map(_WALL, ins))
                low, high = min(walls), max(walls)
                first = low if first is None or low < first else first
                last = high if last is None or high > last else last
                # The top few by value, and where they are (_top: no Python loop per record).
                before = [walls[0] if prev_wall is None else prev_wall, *walls[:-1]]
                steps = list(map(operator.sub, walls, before))
                gaps += [(steps[i] / 1e9, actor, ins[i].index) for i in _top(steps, 5)]
                prev_wall = walls[-1]
                durations = list(map(operator.sub, map(_END, ins), map(_START, ins)))  # < 0: no end recorded
                slow += [(durations[i] / 1e6, actor, ins[i].index, names[i]) for i in _top(durations, 10)
                         if durations[i] >= 0]
                if min(durations) < 0:
                    starts.update((v.index, (v.start_ns, n)) for v, n in zip(ins, names) if not v.end_ns)
                if len(gaps) > 64:
                    gaps = heapq.nlargest(5, gaps, key=_FIRST)
                if len(slow) > 64:
                    slow = heapq.nlargest(10, slow, key=_FIRST)
            torn = segment.torn_note()
            if torn:
                note(torn)
            progress.advance(len(segment))
            segment.close()
    progress.close()
    span = (last - first) / 1e9 if first is not None and last is not None and last > first else 0.0
    return {
        "records": records,
        "span_s": span,
        "kinds": {k: {"count": n, "rate_per_s": n / span if span else None, "bytes": kind_bytes[k]}
                  for k, n in kinds.most_common()},
        "pairs": [{"sender": s, "target": t, "count": n} for (s, t), n in pairs.most_common()],
        "largest_gaps": [{"seconds": g, "actor": a, "index": i} for g, a, i in heapq.nlargest(5, gaps, key=_FIRST)],
        "slowest_handlers": [{"ms": ms, "actor": a, "index": i, "kind": k}
                             for ms, a, i, k in heapq.nlargest(10, slow, key=_FIRST)],
    }


def cmd_stats(args: argparse.Namespace) -> int:
    stats = collect_stats(args.paths, skip_corrupt=args.skip_corrupt)
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def cell(value: object) -> Text:  # every name and kind came from a file: escaped, never markup
        return Text(printable(str(value)))

    console = Console(highlight=False)
    console.print(cell(f"{stats['records']} records over {stats['span_s']:.3f} s"))
    kinds = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("kind", "count", "rate/s", "bytes"):
        kinds.add_column(column, justify="left" if column == "kind" else "right", overflow="fold")
    for kind, k in stats["kinds"].items():
        rate = f"{k['rate_per_s']:.1f}" if k["rate_per_s"] is not None else "-"
        kinds.add_row(cell(kind), str(k["count"]), rate, str(k["bytes"]))
    pairs = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("sender", "target", "count"):
        pairs.add_column(column, justify="right" if column == "count" else "left", overflow="fold")
    for p in stats["pairs"]:
        pairs.add_row(cell(p["sender"]), cell(p["target"]), str(p["count"]))
    console.print()
    console.print(kinds)
    console.print()
    console.print(pairs)
    console.print("\nlargest gaps between messages:")
    for g in stats["largest_gaps"]:
        console.print(cell(f"  {g['seconds']:.3f} s  {g['actor']} before message {g['index']}"))
    console.print("\nslowest handlers:")
    for h in stats["slowest_handlers"]:
        console.print(cell(f"  {h['ms']:.3f} ms  {h['actor']} message {h['index']} ({h['kind']})"))
    return 0
