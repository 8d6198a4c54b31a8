"""Replay one recorded actor and compare what it does with what it did.

The actor is rebuilt from its recorded class and config (or a factory you
pass), then fed its recorded inbox in order.  Clock readings and random draws
come from the log, so the only thing that can make the replay differ is the
code.  Every message the replayed actor sends, and every timer, watch or stop,
is compared with the recorded one; the first difference is reported with the
message index, its kind, and a field-by-field diff.

    report = replay("runs/7f3a", actor="coordinator")
    assert report.ok, report.summary()

Replay imports nothing a recording names.  A header's ``actor_class`` is looked
up in :func:`built_in` (the package's own actors, imported from this file);
any other class is built only when the caller names it (``actor_class=`` here,
``--actor-class MODULE:CLASS`` on the command line), or by ``actor_factory``.
The recorded config is passed to that class as keyword arguments and nothing
else: handlers with effects (shared memory, GPU, files) hand them to an
adapter that replay never builds (see ``Actor.effects``).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from actorwire.actors.runtime._actor import Actor, dispatch
from actorwire.actors.runtime._context import ReplayContext, ReplayExhausted, Sent
from actorwire.messages import Message
from actorwire.transport.internal import InvalidArgument, NoSuchFile, WrongType
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


class UntrustedClass(InvalidArgument):
    """The recording names an actor class that is not built in, and the caller did not name one."""


#: Recorded ``actor_class`` -> the class replay builds for it: the package's own actors, each
#: registered by its module (``register_replayable``), never a class a file names.  The runtime
#: imports nothing above it; ``actorwire.actors.replay`` loads the built-in actors first.
_REPLAYABLE: list[type[Actor]] = []
#: Recorded ``actor_class`` -> how to replay a log that is not an actor's (a rank's protocol).
_LOG_REPLAYERS: dict[str, Callable[[LogHeader, list[Any]], tuple[int, list[tuple[int, str, str, str]]]]] = {}

A = TypeVar("A", bound=type[Actor])


def register_replayable(cls: A) -> A:
    """Class decorator: replay may build ``cls`` for a recording that names it (a built-in actor)."""
    _REPLAYABLE.append(cls)
    return cls


def register_log_replayer(actor_class: str,
                          fn: Callable[[LogHeader, list[Any]], tuple[int, list[tuple[int, str, str, str]]]]) -> None:
    """Logs whose header names ``actor_class`` are replayed by ``fn(header, records)`` -> (count,
    divergences as (index, kind, expected, got))."""
    _LOG_REPLAYERS[actor_class] = fn


def built_in() -> dict[str, type[Actor]]:
    """Recorded ``actor_class`` -> the class replay builds for it (see ``register_replayable``).  Keyed
    when asked, not at registration: a public class's ``__module__`` is its package's once the
    package has published it, and recordings name it so."""
    return {f"{cls.__module__}:{cls.__qualname__}": cls for cls in _REPLAYABLE}


def _named_class(target: str) -> type[Actor]:
    """Import the class the *caller* named (never one a file named)."""
    import importlib

    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise InvalidArgument(f"--actor-class must look like 'package.module:Class', got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(f"--actor-class {target}: {exc}") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, Actor)):
        raise WrongType(f"--actor-class {target} is not an Actor subclass")
    return obj


def build_actor(header: LogHeader, actor_class: str | None = None) -> Actor:
    """The actor a recording's header describes, built from the table or the class the caller named."""
    if actor_class is not None:
        cls = _named_class(actor_class)
    else:
        found = built_in().get(header.actor_class)
        if found is None:
            raise UntrustedClass(
                f"{header.actor} was recorded from class {header.actor_class!r}, which is not built in; replay "
                f"imports only what you name: pass --actor-class {header.actor_class} if you trust that code")
        cls = found
    try:
        return cls(**header.config)
    except (TypeError, ValueError, msgspec.ValidationError) as exc:
        raise InvalidArgument(f"the recorded config does not build {header.actor_class}: {exc}") from None


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
    #: Torn tails and other things the reader noticed, one line each.
    notes: list[str] = dataclasses.field(default_factory=list)
    #: With ``until=``: the actor after that message (its attributes, JSON-able).
    state: dict[str, Any] | None = None

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


def load_records(path: str | pathlib.Path, actor: str | None = None,
                 notes: list[str] | None = None) -> tuple[LogHeader, list[Any]]:
    """The header and every record of one actor's log, in order (torn tails appended to ``notes``)."""
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
        torn = segment.torn_note()
        if torn and notes is not None:
            notes.append(torn)
        segment.close()
    assert header is not None
    return header, records


def actor_state(actor: Actor) -> dict[str, Any]:
    """An actor's attributes as JSON-able values: objects of its own (a coordinator's ``RankState``
    per rank) as their attributes, functions and what cannot be told apart as their ``repr``."""
    return {key: _plain(value, 0)
            for key, value in sorted(vars(actor).items()) if not key.startswith("_actorwire")}


def _plain(value: Any, depth: int) -> Any:
    if depth > 8:  # a cycle, or nesting no one reads: said, not followed
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [_plain(v, depth + 1) for v in items]
    if callable(value):
        return repr(value)
    attrs = _attributes(value)
    if attrs is not None and not isinstance(value, msgspec.Struct) and not isinstance(value, type):
        fields = {k.lstrip("_"): v for k, v in attrs.items() if not callable(v)}
        return {k: _plain(v, depth + 1) for k, v in sorted(fields.items())}
    return msgspec.to_builtins(value, str_keys=True, enc_hook=repr)


def _attributes(value: Any) -> dict[str, Any] | None:
    """An object's attributes, from its ``__dict__`` and its classes' ``__slots__`` (a slotted
    object, such as the coordinator's ``RankState``, has no dict); None for an object with neither."""
    attrs = dict(getattr(value, "__dict__", None) or {})
    slotted = False
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            slotted = True
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                attrs[name] = getattr(value, name)
    return attrs if attrs or slotted or hasattr(value, "__dict__") else None


def _debug(actor: Actor, message: Message, ctx: ReplayContext, index: int) -> None:
    """Stop in pdb before message ``index`` is handled: ``actor``, ``message`` and ``ctx`` are at hand."""
    import pdb

    print(f"replay: stopped before message {index} (`{type(message).wire_tag()}` from "
          f"{ctx.envelope.sender if ctx.envelope else '?'}); `actor`, `message` and `ctx` are here; "
          f"`c` handles it and goes on")
    pdb.Pdb().set_trace()


def replay(
    log: str | pathlib.Path,
    *,
    actor: str | None = None,
    actor_class: str | None = None,
    actor_factory: Callable[[LogHeader], Actor] | None = None,
    until: int | None = None,
    stop_before: int | None = None,
) -> ReplayReport:
    """Re-run a recorded actor against its log; see the module doc.

    ``until=N`` stops after message ``N`` and fills ``report.state``; ``stop_before=N`` enters pdb
    before message ``N`` is handled.
    """
    notes: list[str] = []
    header, records = load_records(log, actor, notes)
    replay_log = _LOG_REPLAYERS.get(header.actor_class)
    if replay_log is not None and actor_factory is None and actor_class is None:
        if until is not None or stop_before is not None:
            raise InvalidArgument(f"{header.actor} is a rank's protocol log: --until and --break step actors only")
        count, found = replay_log(header, records)
        return ReplayReport(header.actor, header.actor_class, count,
                            [Divergence(i, kind, want, got, []) for i, kind, want, got in found], notes)
    instance = actor_factory(header) if actor_factory else build_actor(header, actor_class)
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

    report = ReplayReport(header.actor, header.actor_class, 0, [], notes)

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

    if until is not None and until > (inbox[-1].index if inbox else 0):
        raise InvalidArgument(f"--until {until}: the recording of {header.actor} has messages 0 to "
                              f"{inbox[-1].index if inbox else 0}")
    if not run(0, "on_start", lambda: instance.on_start(ctx)):
        return report
    for record in inbox:
        if until is not None and record.index > until:
            break
        ctx.envelope = record.envelope
        message = record.message

        def call(message: Message = message, index: int = record.index) -> None:
            if stop_before == index:
                _debug(instance, message, ctx, index)
            dispatch(instance, message, ctx)

        report.messages += 1
        if not run(record.index, type(message).wire_tag(), call):
            break
        ctx.envelope = None
    if until is not None:
        report.state = actor_state(instance)
    return report
