"""Replay one recorded actor and compare what it does with what it did.

The actor is rebuilt from its recorded class and config (or a factory you
pass), then fed its recorded inbox in order.  Clock readings and random draws
come from the log, so the only thing that can make the replay differ is the
code.  Every message the replayed actor sends, and every timer, watch or stop,
is compared with the recorded one; the first difference is reported with the
message index, its kind, and a field-by-field diff.

    report = replay("runs/7f3a", actor="coordinator")
    assert report.ok, report.summary()
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import msgspec

from actorwire.actors.runtime._actor import Actor, dispatch
from actorwire.actors.runtime._context import ReplayContext, ReplayExhausted, Sent
from actorwire.actors.runtime._launch import ActorSpec, load_actor
from actorwire.messages import Message
from actorwire.transport._errors import InvalidArgument, NoSuchFile
from actorwire.transport.recording import (
    Begin,
    Clock,
    Done,
    Draw,
    Effect,
    In,
    LogHeader,
    Out,
    Segment,
    actor_dir_name,
    actor_logs,
)


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first place where the replayed actor did something else than the recorded one."""

    index: int
    kind: str
    expected: str
    got: str
    diff: list[str]

    def describe(self) -> str:
        lines = [f"divergence at message {self.index} (`{self.kind}`):",
                 f"  expected: {self.expected}", f"  got:      {self.got}"]
        lines += [f"    {d}" for d in self.diff]
        return "\n".join(lines)


@dataclasses.dataclass
class ReplayReport:
    actor: str
    actor_class: str
    messages: int
    divergences: list[Divergence]

    @property
    def ok(self) -> bool:
        return not self.divergences

    def summary(self) -> str:
        head = f"{self.messages} messages replayed, {len(self.divergences)} divergences"
        if self.ok:
            return head
        return head + "\n" + self.divergences[0].describe()


def _field_diff(expected: Any, got: Any, path: str = "") -> list[str]:
    if type(expected) is not type(got):
        return [f"{path or 'message'}: expected {_show(expected)}, got {_show(got)}"]
    if isinstance(expected, msgspec.Struct):
        out = []
        for field in expected.__struct_fields__:
            out += _field_diff(getattr(expected, field), getattr(got, field), f"{path}.{field}" if path else field)
        return out
    if isinstance(expected, dict):
        out = []
        for key in sorted(set(expected) | set(got), key=str):
            if key not in got:
                out.append(f"{path}[{key!r}]: missing")
            elif key not in expected:
                out.append(f"{path}[{key!r}]: unexpected")
            else:
                out += _field_diff(expected[key], got[key], f"{path}[{key!r}]")
        return out
    if isinstance(expected, (list, tuple)) and len(expected) == len(got):
        out = []
        for i, (a, b) in enumerate(zip(expected, got)):
            out += _field_diff(a, b, f"{path}[{i}]")
        return out
    if expected != got and not (expected != expected and got != got):  # NaN == NaN here
        return [f"{path}: expected {expected!r}, got {got!r}"]
    return []


def _show(value: Any) -> str:
    if isinstance(value, Message):
        return f"`{type(value).wire_tag()}` {value!r}"
    return repr(value)


def _describe_out(item: Any) -> str:
    if isinstance(item, tuple):  # an effect
        op, key, delay, periodic = item
        return f"{op}({key!r}" + (f", {delay:g}, periodic={periodic})" if op == "start_timer" else ")")
    return f"{item.kind} {item.target!r} {_show(item.message)}"


def _compare(index: int, kind: str, expected: list[Any], got: list[Any]) -> Divergence | None:
    for i in range(max(len(expected), len(got))):
        if i >= len(expected):
            return Divergence(index, kind, "nothing more", _describe_out(got[i]), ["an extra effect"])
        if i >= len(got):
            return Divergence(index, kind, _describe_out(expected[i]), "nothing", ["a missing effect"])
        want, have = expected[i], got[i]
        if isinstance(want, tuple) or isinstance(have, tuple):
            if want != have:
                return Divergence(index, kind, _describe_out(want), _describe_out(have), [])
            continue
        if (want.kind, want.target) != (have.kind, have.target):
            return Divergence(index, kind, _describe_out(want), _describe_out(have),
                              [f"sent with {have.kind} to {have.target!r}, recorded {want.kind} to {want.target!r}"])
        if want.message != have.message:
            return Divergence(index, kind, _describe_out(want), _describe_out(have),
                              _field_diff(want.message, have.message))
    return None


def load_records(path: str | pathlib.Path, actor: str | None = None) -> tuple[LogHeader, list[Any]]:
    """The header and every record of one actor's log, in order."""
    logs = actor_logs([path])
    if actor is not None:
        matches = {d: s for d, s in logs.items() if d.name == actor_dir_name(actor)}
        if not matches:
            names = ", ".join(sorted(Segment(s[0]).header.actor for s in logs.values()))
            raise NoSuchFile(f"no recording of actor {actor!r} under {path} (recorded: {names})")
        logs = matches
    if len(logs) != 1:
        names = ", ".join(sorted(Segment(s[0]).header.actor for s in logs.values()))
        raise InvalidArgument(f"{path} holds several actors ({names}); name the one to replay (--actor NAME)")
    (segments,) = logs.values()
    header = None
    records: list[Any] = []
    for seg_path in segments:
        segment = Segment(seg_path)
        header = header or segment.header
        records += [r for _, r in segment.records()]
    assert header is not None
    return header, records


def replay(
    log: str | pathlib.Path,
    *,
    actor: str | None = None,
    actor_factory: Callable[[LogHeader], Actor] | None = None,
) -> ReplayReport:
    """Re-run a recorded actor against its log; see the module doc."""
    header, records = load_records(log, actor)
    instance = actor_factory(header) if actor_factory else load_actor(
        ActorSpec(header.actor, header.actor_class, header.config))
    draws = [r for r in records if isinstance(r, Draw)]
    ctx = ReplayContext(header.actor, draws)
    by_index: dict[int, dict[str, list[Any]]] = {}
    inbox: list[In] = []
    errors: dict[int, str | None] = {}
    for record in records:
        if isinstance(record, In):
            inbox.append(record)
            errors[record.index] = record.error
            continue
        if isinstance(record, Begin):
            continue
        if isinstance(record, Done):
            errors[record.index] = record.error
            continue
        slot = by_index.setdefault(record.index, {"out": [], "clock": [], "names": []})
        if isinstance(record, Out):
            slot["out"].append(Sent(record.target, record.message, record.how, record.correlation_id))
        elif isinstance(record, Clock):
            slot["clock"].append(record)
        elif isinstance(record, Effect):
            if record.op == "names":
                slot["names"].append(record.key.split("\n") if record.key else [])
            else:
                slot["out"].append((record.op, record.key, record.delay, record.periodic))

    report = ReplayReport(header.actor, header.actor_class, 0, [])

    def run(index: int, kind: str, call: Callable[[], None]) -> bool:
        slot = by_index.get(index, {"out": [], "clock": [], "names": []})
        ctx.clock_reads = list(slot["clock"])
        ctx.names_reads = list(slot["names"])
        ctx.dead_tells = [out[1] for out in slot["out"] if isinstance(out, tuple) and out[0] == "tell_dead"]
        ctx.outbox = []
        ctx.emitted = []
        error: str | None = None
        try:
            call()
        except ReplayExhausted as exc:
            report.divergences.append(Divergence(index, kind, "the recorded reads", str(exc), []))
            return False
        except Exception as exc:  # the handler raised: compare with the recording
            error = f"{type(exc).__name__}: {exc}"
        recorded_error = errors.get(index)
        if (error is None) != (recorded_error is None):
            report.divergences.append(Divergence(index, kind, recorded_error or "no error", error or "no error",
                                                 ["the handler's outcome changed"]))
            return False
        divergence = _compare(index, kind, slot["out"], ctx.emitted)
        if divergence is not None:
            report.divergences.append(divergence)
            return False
        return True

    if not run(0, "on_start", lambda: instance.on_start(ctx)):
        return report
    for record in inbox:
        ctx.envelope = record.envelope
        message = record.message

        def call(message: Message = message) -> None:
            dispatch(instance, message, ctx)

        report.messages += 1
        if not run(record.index, type(message).wire_tag(), call):
            break
        ctx.envelope = None
    return report
