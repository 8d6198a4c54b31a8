"""``actorwire log show|stats|tail|export`` and ``actorwire replay``: reading recordings.

Logs of several actors are merged in wall-clock order (``wall_ns``: the only
clock that means the same thing on every host).  Filters compose: actor
globs, kinds, a time window relative to the first record, a correlation id,
and ``--where`` with a small, safe expression language over the message's
fields and the envelope's (``rank == 3 and batch_ms > 50``; no function calls,
no attribute access, nothing that runs code: ``_where``).  Reading and merging is ``_log_read``,
``stats`` is ``_log_stats``, ``export`` is ``_log_export``; ``show``, ``tail``, ``replay`` and the
parsers are here.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import pathlib
import sys
import time
from typing import Any

import msgspec

from actorwire.actors.cli._log_export import cmd_export
from actorwire.actors.cli._log_read import _Progress, _segments, merged, note, printable
from actorwire.actors.cli._log_stats import cmd_stats
from actorwire.actors.cli._where import Where, WhereError
from actorwire.transport.recording import (
    CorruptRecord,
    In,
    IncompleteHeader,
    LogFormatError,
    Out,
    Segment,
    file_size,
)

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
