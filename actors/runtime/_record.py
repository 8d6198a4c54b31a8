"""Recording taps: everything an actor receives, sends, reads from the clock and draws at random.

Switched on per system (``ActorSystem(record=DIR)``) or by the environment
(``ACTORWIRE_RECORD=DIR``, optionally ``ACTORWIRE_RECORD_ACTORS="coordinator,worker/*"``),
with no change to the actors.  Each recorded actor writes its own log (see
:mod:`actorwire.transport.recording._format`); :mod:`._replay` reads it back.
"""

from __future__ import annotations

import fnmatch
import random
import time
from typing import TYPE_CHECKING, Any

import msgspec

from actorwire.actors.runtime._context import LiveContext
from actorwire.messages import Envelope, Message
from actorwire.transport._settings import settings
from actorwire.transport.recording import (
    Begin,
    Clock,
    Draw,
    Effect,
    In,
    LogHeader,
    Out,
    SegmentWriter,
    row,
)

if TYPE_CHECKING:
    from actorwire.actors.runtime._system import _Cell

_FLUSH_EVERY_S = 0.2


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
        self.writer = SegmentWriter(settings.directory, header, max_segment_bytes=settings.max_segment_bytes)
        self.index = 0
        self._flushed = time.monotonic()

    def begin(self) -> None:
        self.writer.write(Begin(time.monotonic_ns(), time.time_ns()))

    # The records written for every message are encoded from rows (see
    # recording.row): the same bytes as the structs, without building them.

    def message(self, envelope: Envelope, message: Message) -> None:
        self.index += 1
        self._current = (envelope, message, time.monotonic_ns(), time.time_ns())

    def done(self, error: BaseException | None = None) -> None:
        envelope, message, start, wall = self._current
        end = time.monotonic_ns()
        if error is None:
            record = row(In, self.index, start, wall, envelope, message, end)
        else:
            record = row(In, self.index, start, wall, envelope, message, end, f"{type(error).__name__}: {error}")
        self.writer.write(record, self.index, wall)
        now = time.monotonic()
        if now - self._flushed > _FLUSH_EVERY_S:
            self.writer.flush()
            self._flushed = now

    def write(self, record: Any) -> None:
        self.writer.write(record)

    def close(self) -> None:
        self.writer.close()


class _RecordingRandom(random.Random):
    """``random.Random`` whose two primitives (all others derive from them) are logged."""

    def __init__(self, seed: int, recorder: Recorder) -> None:
        self._recorder = recorder
        super().__init__(seed)

    def random(self) -> float:
        value = super().random()
        self._recorder.write(Draw(self._recorder.index, value))
        return value

    def getrandbits(self, k: int) -> int:
        value = super().getrandbits(k)
        self._recorder.write(Draw(self._recorder.index, value, k))
        return value


class RecordingContext(LiveContext):
    """The live context, with every read of time and randomness and every effect logged."""

    def __init__(self, cell: _Cell, seed: int, recorder: Recorder) -> None:
        super().__init__(cell, seed)
        self.recorder = recorder
        self.random = _RecordingRandom(seed, recorder)

    def now(self) -> float:
        value = time.monotonic()
        self.recorder.write(Clock(self.recorder.index, value))
        return value

    def wall(self) -> float:
        value = time.time()
        self.recorder.write(Clock(self.recorder.index, value, True))
        return value

    def tell(self, target: str, message: Message, *, timeout: float | None = None) -> None:
        _, sent = self._node.send_record(self.name, target, message, timeout=timeout,
                                         trace_id=self.envelope.trace_id if self.envelope is not None else None)
        index = self.recorder.index
        if isinstance(sent, bytes):  # the wire record: copied, not encoded again
            self.recorder.write(row(Out, index, "tell", time.time_ns(), msgspec.Raw(sent)))
        else:
            self.recorder.write(row(Out, index, "tell", time.time_ns(), (sent, message)))

    def ask(self, target: str, message: Message, *, timeout: float | None = None) -> int:
        corr = self._cell.ask(target, message, timeout)
        self._log_out("ask", target, corr, message)
        return corr

    def reply(self, message: Message) -> None:
        super().reply(message)
        envelope = self.envelope
        assert envelope is not None
        self._log_out("reply", envelope.sender, envelope.correlation_id, message)

    def _log_out(self, how: str, target: str, corr: int, message: Message) -> None:
        sent = Envelope(sender=self.name, target=target, seq=self._node.last_seq(self.name), correlation_id=corr,
                        is_reply=how == "reply", wall_ns=time.time_ns())
        self.recorder.write(Out(self.recorder.index, how, sent.wall_ns, (sent, message)))

    def names(self) -> list[str]:
        names = super().names()
        self.recorder.write(Effect(self.recorder.index, "names", "\n".join(names)))
        return names

    def start_timer(self, key: str, delay: float, *, periodic: bool = False) -> None:
        super().start_timer(key, delay, periodic=periodic)
        self.recorder.write(Effect(self.recorder.index, "start_timer", key, delay, periodic))

    def cancel_timer(self, key: str) -> None:
        super().cancel_timer(key)
        self.recorder.write(Effect(self.recorder.index, "cancel_timer", key))

    def watch(self, name: str) -> None:
        super().watch(name)
        self.recorder.write(Effect(self.recorder.index, "watch", name))

    def unwatch(self, name: str) -> None:
        super().unwatch(name)
        self.recorder.write(Effect(self.recorder.index, "unwatch", name))

    def stop(self) -> None:
        super().stop()
        self.recorder.write(Effect(self.recorder.index, "stop"))
