"""``actorwire log show|stats|tail|export`` and ``actorwire replay``: reading recordings.

Logs of several actors are merged in wall-clock order (``wall_ns``: the only
clock that means the same thing on every host).  Filters compose: actor
globs, kinds, a time window relative to the first record, a correlation id,
and ``--where`` with a small, safe expression language over the message's
fields and the envelope's (``rank == 3 and batch_ms > 50``; no function calls,
no attribute access, nothing that runs code).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import heapq
import itertools
import json
import operator
import pathlib
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any, Union

import msgspec

from actorwire.actors.cli._where import Where, WhereError
from actorwire.messages import Envelope
from actorwire.transport.recording import (
    RECORD_TYPES,
    Call,
    CorruptRecord,
    Done,
    In,
    IncompleteHeader,
    LogFormatError,
    Out,
    Segment,
    actor_logs,
    file_size,
)
from actorwire.transport.recording import view as record_view

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


# -- show ----------------------------------------------------------------------


def _row(actor: str, record: Any) -> dict[str, Any]:
    message = record.message
    if isinstance(record, In):
        env = record.envelope
        row = {"wall_ns": record.wall_ns, "actor": actor, "dir": "in", "peer": env.sender, "seq": env.seq,
               "correlation_id": env.correlation_id, "index": record.index,
               "asker": actor if env.is_reply else env.sender}
    else:
        row = {"wall_ns": record.wall_ns, "actor": actor, "dir": record.how, "peer": record.target,
               "seq": record.seq, "correlation_id": record.correlation_id, "index": record.index,
               "asker": record.target if record.how == "reply" else actor}
    row["kind"] = type(message).wire_tag()
    row["message"] = msgspec.to_builtins(message)
    return row


_STYLES = {"in": "green", "tell": "cyan", "ask": "magenta", "reply": "yellow"}


#: The columns of a record's line, in `log show` and `log tail` alike.
HEADER = f"{'t (s)':>10}  {'actor':<16}    {'peer':<16} {'dir':<5} {'kind':<18} fields"


def record_line(row: dict[str, Any], t: float) -> str:
    """One record as a line under :data:`HEADER` (escaped: a recorded string cannot recolour the terminal)."""
    arrow = "<-" if row["dir"] == "in" else "->"
    body = " ".join(f"{k}={v}" for k, v in row["message"].items() if k != "type")
    corr = f" corr={row['correlation_id']}" if row["correlation_id"] else ""
    return printable(f"{t:10.6f}  {row['actor']:<16} {arrow} {row['peer']:<16} {row['dir']:<5} "
                     f"{row['kind']:<18}{corr} {body}")


def cmd_show(args: argparse.Namespace) -> int:
    where = Where(args.where) if args.where else None
    corr_asker, corr_id = _corr(args.corr)  # a bad filter is said before anything is read
    progress = _Progress(sum(file_size(s) for s in _segments(args.paths).values()), "reading")
    console = None
    if not args.json and sys.stdout.isatty():
        from rich.console import Console

        console = Console(highlight=False)  # rich leaves colour out with NO_COLOR or a dumb terminal
        if console.no_color or not console.is_terminal:
            console = None
    first: int | None = None
    shown = 0
    askers: set[str] = set()
    try:
        for actor, record in merged(args.paths, skip_corrupt=args.skip_corrupt, progress=progress):
            first = first if first is not None else record.wall_ns
            t = (record.wall_ns - first) / 1e9
            if args.since is not None and t < args.since or args.until is not None and t > args.until:
                continue
            if args.actor and not any(fnmatch.fnmatchcase(actor, p) for p in args.actor):
                continue
            kind = type(record.message).wire_tag()
            if args.kind and kind not in args.kind and type(record.message).__name__ not in args.kind:
                continue
            row = _row(actor, record)
            if corr_id is not None:
                # An id names an ask only with its asker: every asker numbers its own.
                if row["correlation_id"] != corr_id or corr_asker is not None and row["asker"] != corr_asker:
                    continue
                askers.add(row["asker"])
            if where is not None:
                fields = {**row["message"], "actor": actor, "peer": row["peer"], "kind": kind,
                          "seq": row["seq"], "correlation_id": row["correlation_id"], "t": t}
                if not where(fields):
                    continue
            shown += 1
            if args.json:
                print(json.dumps(row))
                continue
            if shown == 1:
                print(HEADER)
            line = record_line(row, t)
            if console is not None:
                from rich.text import Text

                console.print(Text(line, style=_STYLES.get(row["dir"], "")), soft_wrap=True)
            else:
                print(line)
    finally:
        progress.close()
    if len(askers) > 1:
        note(f"correlation id {corr_id} was used by {len(askers)} askers ({', '.join(sorted(askers))}): these are "
             f"different asks; pick one with --corr ASKER:{corr_id}")
    if not shown:
        note("no record matched the filters")
        return 1
    if not args.json:
        print(f"({shown} records)", file=sys.stderr)
    return 0


def _corr(text: str | None) -> tuple[str | None, int | None]:
    """``--corr ID`` or ``--corr ASKER:ID``."""
    if text is None:
        return None, None
    asker, _, number = text.rpartition(":")
    try:
        return asker or None, int(number)
    except ValueError:
        raise WhereError(f"--corr takes ID or ASKER:ID (an integer id), got {text!r}") from None


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


# -- tail ----------------------------------------------------------------------


def cmd_tail(args: argparse.Namespace) -> int:
    """Print new records of one actor's log as they are written (until interrupted or --for)."""
    logs = _segments([args.path])
    if len(logs) != 1:
        print("actorwire log tail: give one actor's log directory or segment", file=sys.stderr)
        return 2
    (directory,) = logs
    seen: dict[pathlib.Path, int] = {}
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    shown = 0
    first: int | None = None
    while True:
        for path in sorted(directory.glob("seg-*.awlog")):
            try:
                segment = Segment(path)
            except IncompleteHeader:
                continue  # a segment being created
            done = seen.get(path, 0)
            records = [(o, r) for o, r in segment.records(skip_corrupt=args.skip_corrupt) if o >= done]
            for offset, record in records:
                if isinstance(record, (In, Out)):
                    row = _row(segment.header.actor, record)
                    first = record.wall_ns if first is None else first
                    if not args.json and not shown:
                        print(HEADER)
                    print(json.dumps(row) if args.json else record_line(row, (record.wall_ns - first) / 1e9),
                          flush=True)
                    shown += 1
                seen[path] = offset + 1
        if not args.follow or (deadline is not None and time.monotonic() > deadline):
            return 0
        time.sleep(0.2)


# -- export --------------------------------------------------------------------


def perfetto_trace(paths: list[str], *, skip_corrupt: bool = False) -> dict[str, Any]:
    """Chrome trace-event JSON: a track per actor, handlers as slices, send->receive flow arrows."""
    logs = _segments(paths)
    events: list[dict[str, Any]] = []
    actors: dict[str, int] = {}
    sends: dict[tuple[str, str, int], int] = {}
    receives: list[tuple[str, In, int, float]] = []
    origin: int | None = None
    progress = _Progress(sum(file_size(s) for s in logs.values()), "exporting")
    per_actor: dict[str, list[Any]] = defaultdict(list)
    for segments in logs.values():
        for actor, record in iter_actor(segments, skip_corrupt=skip_corrupt, progress=progress):
            per_actor[actor].append(record)
            if isinstance(record, In):
                origin = record.wall_ns if origin is None else min(origin, record.wall_ns)
    progress.close()
    origin = origin or 0
    flow_ids = iter(range(1, 1 << 62))
    for tid, (actor, records) in enumerate(sorted(per_actor.items()), start=1):
        actors[actor] = tid
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": actor}})
        last_end: int | None = None  # wall ns at which the previous input of a protocol log returned
        for record in records:
            if isinstance(record, Call):
                events.extend(_protocol_slices(record, tid, origin, last_end))
                last_end = record.wall_ns + max(0, record.end_ns - record.start_ns)
                continue
            if isinstance(record, In):
                last_end = record.wall_ns + max(0, record.end_ns - record.start_ns) if record.end_ns else record.wall_ns
                ts = (record.wall_ns - origin) / 1e3
                dur = max(0.001, (record.end_ns - record.start_ns) / 1e3) if record.end_ns else 0.001
                kind = type(record.message).wire_tag()
                events.append({"ph": "X", "name": kind, "cat": "handler", "pid": 1, "tid": tid, "ts": ts,
                               "dur": dur, "args": {"from": record.envelope.sender, "seq": record.envelope.seq,
                                                    "index": record.index,
                                                    **({"error": record.error} if record.error else {})}})
                receives.append((actor, record, tid, ts))
            elif isinstance(record, Out):
                ts = (record.wall_ns - origin) / 1e3
                flow = next(flow_ids)
                sends[(actor, record.target, record.seq)] = flow
                events.append({"ph": "s", "name": type(record.message).wire_tag(), "cat": "message", "id": flow,
                               "pid": 1, "tid": tid, "ts": ts})
                if type(record.message).__name__ == "PublishGroup":
                    events.append({"ph": "X", "name": "publish", "cat": "tensor", "pid": 2, "tid": 1, "ts": ts,
                                   "dur": 1.0, "args": {"from": actor}})
    for actor, start, tid, ts in receives:
        arrow = sends.get((start.envelope.sender, actor, start.envelope.seq))
        if arrow is not None:
            events.append({"ph": "f", "bp": "e", "name": type(start.message).wire_tag(), "cat": "message",
                           "id": arrow, "pid": 1, "tid": tid, "ts": ts})
    # Drop flow starts nobody received (e.g. to actors that were not recorded).
    finished = {e["id"] for e in events if e["ph"] == "f"}
    events = [e for e in events if e["ph"] != "s" or e["id"] in finished]
    events.insert(0, {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "actors"}})
    events.insert(1, {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "tensor planes"}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


#: A rank's protocol calls that close a piece of work: the slice runs from the input that
#: started it (the previous one) to the call.  ``batch_done`` carries its own duration.
_WORK = {"sync_done": "sync", "evaluated": "eval", "checkpointed": "checkpoint", "group_formed": "form group",
         "epoch_fn_done": "epoch fn"}


def _protocol_slices(call: Call, tid: int, origin: int, last_end: int | None) -> list[dict[str, Any]]:
    """The timeline slices of one ``Call`` of a rank's protocol log: batches, syncs, evals, checkpoints."""
    from actorwire.actors.control._rank_record import RECORDED, _args_type

    if call.method not in RECORDED:
        return []
    try:
        args = msgspec.msgpack.decode(call.args, type=_args_type(call.method))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return []
    if call.method == "batch_done":
        dur = max(0.001, float(args.batch_ms) * 1e3)
        ts = (call.wall_ns - origin) / 1e3 - dur
        return [{"ph": "X", "name": "batch", "cat": "rank", "pid": 1, "tid": tid, "ts": max(0.0, ts), "dur": dur,
                 "args": {"loss": args.loss, "index": call.index}}]
    name = _WORK.get(call.method)
    if name is None or last_end is None:
        return []
    ts = (last_end - origin) / 1e3
    dur = max(0.001, (call.wall_ns - last_end) / 1e3)
    extra = {"error": call.error} if call.error else {}
    return [{"ph": "X", "name": name, "cat": "rank", "pid": 1, "tid": tid, "ts": max(0.0, ts), "dur": dur,
             "args": {"index": call.index, **extra}}]


def cmd_export(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.perfetto)
    if out.is_dir() or not out.parent.is_dir():  # said before a long read, not after it
        note(f"cannot write {out}: " + ("it is a directory" if out.is_dir() else "its directory does not exist"))
        return 1
    trace = perfetto_trace(args.paths, skip_corrupt=args.skip_corrupt)
    try:
        out.write_text(json.dumps(trace))
    except OSError as exc:
        note(f"cannot write {out}: {exc.strerror}")
        return 1
    slices = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    flows = sum(1 for e in trace["traceEvents"] if e["ph"] == "f")
    print(f"wrote {args.perfetto}: {slices} handler slices, {flows} flows; open it at https://ui.perfetto.dev")
    return 0


# -- replay --------------------------------------------------------------------


def cmd_replay(args: argparse.Namespace) -> int:
    from actorwire.actors import replay

    if args.state and args.until is None:
        note("--state prints the actor after message --until N: give --until")
        return 2
    report = replay(args.path, actor=args.actor, actor_class=args.actor_class, until=args.until,
                    stop_before=args.stop_before)
    for line in report.notes:
        note(line)
    if args.json:
        print(json.dumps({"actor": report.actor, "actor_class": report.actor_class, "messages": report.messages,
                          "ok": report.ok, "divergences": [dataclasses.asdict(d) for d in report.divergences],
                          **({"state": report.state} if args.state else {})}))
    elif args.state:  # stdout is the JSON alone (`--state > state.json`); the summary goes to stderr
        note(printable(report.summary()))
        print(json.dumps(report.state, indent=2, sort_keys=True))
    else:
        print(printable(report.summary()))
    return 0 if report.ok else 1


# -- wiring --------------------------------------------------------------------


def run_guarded(func: Any, args: argparse.Namespace) -> int:
    """Run a log command; a corrupt or missing log is one clear line, not a traceback."""
    try:
        return int(func(args))
    except (CorruptRecord, LogFormatError, FileNotFoundError, WhereError, ValueError, TypeError) as exc:
        hint = " (use --skip-corrupt to read past it)" if isinstance(exc, CorruptRecord) and hasattr(
            args, "skip_corrupt") else ""
        note(f"{exc}{hint}")
        return 1
    except RecursionError:
        note("a record is nested too deep to show")
        return 1
    except BrokenPipeError:
        return 0


def add_parsers(sub: Any) -> None:
    from actorwire.actors.cli._main import _non_negative, _seconds

    log = sub.add_parser("log", help="read recordings: show, stats, tail, export")
    logsub = log.add_subparsers(dest="log_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, *, many: bool = True) -> None:
        if many:
            p.add_argument("paths", nargs="+", metavar="PATH", help="recording dirs, actor dirs or segments")
        p.add_argument("--skip-corrupt", action="store_true", help="read past corrupt records")
        p.add_argument("--json", action="store_true", help="JSON output")

    p = logsub.add_parser("show", help="messages in time order, merged across actors")
    common(p)
    p.add_argument("--actor", action="append", metavar="GLOB", help="only these actors (repeatable)")
    p.add_argument("--kind", action="append", metavar="KIND", help="only these kinds (tag or class)")
    p.add_argument("--since", type=float, metavar="S", help="seconds after the first record")
    p.add_argument("--until", type=float, metavar="S", help="seconds after the first record")
    p.add_argument("--corr", metavar="[ASKER:]ID",
                   help="only this ask and its reply (ids are per asker: ASKER:ID picks one asker's)")
    p.add_argument("--where", metavar="EXPR", help="e.g. 'rank == 3 and batch_ms > 50'")
    p.set_defaults(func=lambda a: run_guarded(cmd_show, a))

    p = logsub.add_parser("stats", help="counts, rates, sizes, gaps, slowest handlers")
    common(p)
    p.set_defaults(func=lambda a: run_guarded(cmd_stats, a))

    p = logsub.add_parser("tail", help="print one actor's records as they are written")
    p.add_argument("path", metavar="PATH")
    common(p, many=False)
    p.add_argument("-f", "--follow", action="store_true", help="keep following the log")
    p.add_argument("--for", dest="seconds", type=_seconds, metavar="S", help="stop following after S seconds")
    p.set_defaults(func=lambda a: run_guarded(cmd_tail, a))

    p = logsub.add_parser("export", help="export a timeline")
    common(p)
    p.add_argument("--perfetto", required=True, metavar="OUT.json", help="Chrome trace-event JSON for Perfetto")
    p.set_defaults(func=lambda a: run_guarded(cmd_export, a))

    p = sub.add_parser("replay", help="re-run a recorded actor and compare what it sends")
    p.add_argument("path", metavar="PATH", help="a recording directory")
    p.add_argument("--actor", metavar="NAME", help="which actor (needed when several were recorded)")
    p.add_argument("--actor-class", metavar="MODULE:CLASS",
                   help="build the actor from this class (needed for classes that are not built in: replay "
                        "never imports what a recording names)")
    p.add_argument("--until", type=_non_negative, metavar="N", help="stop after message N")
    p.add_argument("--state", action="store_true", help="with --until: print the actor's attributes as JSON")
    p.add_argument("--break", dest="stop_before", type=_non_negative, metavar="N",
                   help="stop in pdb before message N, with the actor, the message and the context at hand")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.set_defaults(func=lambda a: run_guarded(cmd_replay, a))
