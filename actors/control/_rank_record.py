"""Recording and replaying a rank's protocol: the embedded ``Worker`` is not an actor, but its
decisions are :class:`~._rank.RankProtocol`'s, a sans-IO machine, so they are logged and replayed
like an actor's.

What is written, in the rank's own log (``worker/<rank>``, beside the actors' logs):

* every message the protocol receives, as an ``In`` record, with the ``now`` it was given as a
  ``Clock`` record;
* every other call the training thread makes on it (``batch_done``, ``sync_done``, ``take``, ...)
  as a ``Call`` record: the arguments (clock reads included), the result, the error;
* every effect a call returned, as an ``Effect`` record (``op="effect"``, the effect as JSON),
  and every message the rank then sent, as an ``Out`` record (flow arrows in the timeline).

Replay rebuilds the protocol from the header's config, makes the same calls and compares each
call's effects and result with the recorded ones.
"""

from __future__ import annotations

import functools
import inspect
import time
import typing
from typing import Any

import msgspec

from actorwire.actors.control._rank import RankProtocol, Send
from actorwire.actors.runtime._replay import register_log_replayer
from actorwire.messages import AnyMessage, Envelope, Message
from actorwire.transport.internal import InvalidArgument
from actorwire.transport.recording import Call, Clock, Effect, In, LogHeader, Out, SegmentWriter, row

#: The header's ``actor_class`` for a rank's protocol log.
PROTOCOL_CLASS = f"{RankProtocol.__module__}:{RankProtocol.__qualname__}"

#: The calls that change the protocol (``receive`` is logged as an ``In``).
RECORDED = ("join_reply", "receive", "tick", "coordinator_gone", "relay_gone", "send_failed", "sync_done", "group_formed", "group_id_made",
            "evaluated", "checkpointed", "epoch_fn_done", "start_plan", "take", "batch_done", "report_held", "record_scalar",
            "report_epoch", "intent", "exiting")

_encoder = msgspec.msgpack.Encoder()
_json = msgspec.json.Encoder(enc_hook=repr)


@functools.cache
def _args_type(method: str) -> type[msgspec.Struct]:
    """A struct of ``method``'s parameters, typed from its annotations (how its arguments are logged)."""
    fn = getattr(RankProtocol, method)
    hints = typing.get_type_hints(fn)
    fields = []
    for name, param in list(inspect.signature(fn).parameters.items())[1:]:
        kind = hints.get(name, Any)
        if kind is Message:
            kind = AnyMessage  # decoded by its tag
        fields.append((name, kind) if param.default is inspect.Parameter.empty else (name, kind, param.default))
    return msgspec.defstruct(f"_{method}_args", fields, array_like=True)


def _result(value: Any) -> Any:
    """A call's result as plain data (effects are logged apart)."""
    if isinstance(value, range):
        return [value.start, value.stop]
    if isinstance(value, list):
        return None
    return value


def effect_text(effect: Any) -> str:
    """One effect as JSON: what replay compares."""
    return f"{type(effect).__name__} {_json.encode(effect).decode()}"


def protocol_config(p: RankProtocol) -> dict[str, Any]:
    return {"rank": p.rank, "world_size": p.world_size, "coordinator": p.coordinator,
            "coordinator_timeout": p.coordinator_timeout, "regroup_wait": p.regroup_wait, "relay": p.relay,
            "report_every": p.report_every}


class RecordedProtocol:
    """A :class:`RankProtocol` whose every input and effect is logged; reads pass through."""

    def __init__(self, protocol: RankProtocol, writer: SegmentWriter, name: str) -> None:
        self._protocol = protocol
        self._writer = writer
        self._name = name
        self.index = 0
        self._flushed = time.monotonic()
        #: id(effect) -> the index of the call that returned it, for the ``Out`` written when it is sent.
        self._origin: dict[int, int] = {}

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._protocol, attr)
        if attr in RECORDED:
            return functools.partial(self._call, attr, value)
        return value

    def _call(self, method: str, fn: Any, *args: Any, envelope: Envelope | None = None, **kwargs: Any) -> Any:
        self.index += 1
        index = self.index
        start, wall = time.monotonic_ns(), time.time_ns()
        write = self._writer.write
        if method == "receive":
            message, now = args
            write(Clock(index, now))
        error: str | None = None
        result: Any = None
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            end = time.monotonic_ns()
            if method == "receive":
                env = envelope or Envelope(sender="?", target=self._name, seq=0)
                write(row(In, index, start, wall, env, message, end, error), index, wall)
            else:
                bound = inspect.signature(fn).bind(*args, **kwargs)
                encoded = _encoder.encode(_args_type(method)(**bound.arguments))
                write(Call(index, method, start, wall, msgspec.Raw(encoded), end,
                           msgspec.Raw(_encoder.encode(_result(result))), error), index, wall)
        if isinstance(result, list):
            for effect in result:
                write(Effect(index, "effect", effect_text(effect)))
                self._origin[id(effect)] = index
        if time.monotonic() - self._flushed > 0.2:
            self._writer.flush()
            self._flushed = time.monotonic()
        return result

    def sent(self, effect: Send, target: str, seq: int) -> None:
        """The rank told ``effect.message`` to ``target`` (as ``seq``): an ``Out`` for the timeline."""
        index = self._origin.pop(id(effect), self.index)
        wall = time.time_ns()
        sent = Envelope(sender=self._name, target=target, seq=seq, wall_ns=wall)
        self._writer.write(Out(index, "tell", wall, (sent, effect.message)))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def recorded(protocol: RankProtocol, system: Any, name: str) -> RankProtocol | RecordedProtocol:
    """``protocol`` logged into the system's recording when it records ``name``; else ``protocol``."""
    settings = getattr(system, "_record", None)
    if settings is None or not settings.wants(name):
        return protocol
    from actorwire.actors.runtime._record import run_directory

    header = LogHeader(run_id=system.run_id, actor=name, actor_class=PROTOCOL_CLASS,
                       config=protocol_config(protocol), rank=protocol.rank, created_wall_ns=time.time_ns())
    writer = SegmentWriter(run_directory(settings.directory, system.run_id), header,
                           max_segment_bytes=settings.max_segment_bytes)
    return RecordedProtocol(protocol, writer, name)


# -- replay ---------------------------------------------------------------------------------


def replay_protocol(header: LogHeader, records: list[Any]) -> tuple[int, list[tuple[int, str, str, str]]]:
    """Make the recorded calls on a fresh protocol; ``(inputs replayed, divergences)``, each divergence
    ``(index, input, expected, got)``; replay stops at the first."""
    try:
        protocol = RankProtocol(**{"report_every": 0.0, **header.config})  # recorded before reports were folded
    except TypeError as exc:
        raise InvalidArgument(f"the recorded config does not build RankProtocol: {exc}") from None
    effects: dict[int, list[str]] = {}
    clocks: dict[int, float] = {}
    inputs: list[Any] = []
    for record in records:
        if isinstance(record, (In, Call)):
            inputs.append(record)
        elif isinstance(record, Effect) and record.op == "effect":
            effects.setdefault(record.index, []).append(record.key)
        elif isinstance(record, Clock):
            clocks[record.index] = record.value
    done = 0
    for record in inputs:
        done += 1
        if isinstance(record, In):
            name, call = type(record.message).wire_tag(), (lambda r=record: protocol.receive(r.message,
                                                                                          clocks.get(r.index, 0.0)))
            recorded_result: Any = None
        else:
            name = record.method
            if name not in RECORDED:
                return done, [(record.index, name, "a recorded protocol call", f"`{name}`, which is not one")]
            try:
                args = msgspec.msgpack.decode(record.args, type=_args_type(name))
                recorded_result = msgspec.msgpack.decode(record.result)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                return done, [(record.index, name, "arguments of its signature", f"undecodable: {exc}")]
            kwargs = {f: getattr(args, f) for f in args.__struct_fields__}
            call = functools.partial(getattr(protocol, name), **kwargs)
        error: str | None = None
        result: Any = None
        try:
            result = call()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error != record.error:
            return done, [(record.index, name, record.error or "no error", error or "no error")]
        got = [effect_text(e) for e in result] if isinstance(result, list) else []
        want = effects.get(record.index, [])
        if got != want:
            for i in range(max(len(got), len(want))):
                a = want[i] if i < len(want) else "nothing more"
                b = got[i] if i < len(got) else "nothing"
                if a != b:
                    return done, [(record.index, name, a, b)]
        if isinstance(record, Call) and _result(result) != recorded_result and not isinstance(result, list):
            return done, [(record.index, name, repr(recorded_result), repr(_result(result)))]
    return done, []


register_log_replayer(PROTOCOL_CLASS, replay_protocol)
