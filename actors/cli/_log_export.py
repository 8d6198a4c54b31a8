"""``actorwire log export``: a recording as a Perfetto (Chrome trace-event) file."""

from __future__ import annotations

import argparse
import json
import pathlib
from collections import defaultdict
from typing import Any

import msgspec

from actorwire.actors.cli._log_read import _Progress, _segments, iter_actor, note
from actorwire.transport.recording import (
    Call,
    In,
    Out,
    file_size,
)

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
