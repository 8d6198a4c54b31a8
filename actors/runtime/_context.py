"""What a handler may do: the context interface and its four implementations, side by side.

Handlers see only :class:`Context`.  Each implementation answers the same
calls for one way of running an actor:

- :class:`LiveContext` performs them over the transport (the running system);
- :class:`RecordingContext` performs them and writes every read of time and
  randomness and every effect to the actor's recording;
- :class:`FakeContext` keeps a virtual clock and collects every effect instead
  of performing it (the test kit, :class:`~._testkit.ActorHarness`);
- :class:`ReplayContext` is the fake one fed from a recording: clock reads,
  draws and name lists come from the log, effects are compared with it.
"""

from __future__ import annotations

import abc
import dataclasses
import fnmatch
import itertools
import random
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from actorwire.actors.runtime._timers import check_delay
from actorwire.messages import ActorwireError, Envelope, Message
from actorwire.messages.kinds import DownReason
from actorwire.transport.internal import ActorDead, NotAnAsk, UnknownActor, get_logger
from actorwire.transport.recording import Clock, Draw, Effect, Out

_OUT = Out.__struct_config__.tag
_time_ns = time.time_ns  # a module global: one look-up fewer per recorded tell

if TYPE_CHECKING:
    from actorwire.actors.runtime._cell import _Cell
    from actorwire.actors.runtime._record import Recorder


class Context(abc.ABC):
    """The handler's view of the world: time, randomness and effects."""

    #: This actor's name.
    name: str
    #: Envelope of the message being handled (None in on_start/on_stop).
    envelope: Envelope | None = None
    #: A seeded generator: the only randomness a handler may use.
    random: random.Random
    #: Structured logger bound with the actor's name and rank.
    log: Any

    @property
    def sender(self) -> str | None:
        """Name of the sender of the message being handled."""
        return self.envelope.sender if self.envelope is not None else None

    @property
    def correlation_id(self) -> int:
        """Non-zero when the current message is an ask (or the reply to one of ours)."""
        return self.envelope.correlation_id if self.envelope is not None else 0

    @property
    def is_reply(self) -> bool:
        return self.envelope is not None and self.envelope.is_reply

    @abc.abstractmethod
    def now(self) -> float:
        """Monotonic time in seconds."""

    @abc.abstractmethod
    def wall(self) -> float:
        """Wall-clock time, seconds since the Unix epoch (for display, not for deadlines)."""

    @abc.abstractmethod
    def tell(self, target: str, message: Message, *, timeout: float | None = None) -> None:
        """Send ``message`` to ``target``; blocks while the target is full (``BackpressureTimeout``)."""

    @abc.abstractmethod
    def ask(self, target: str, message: Message, *, timeout: float | None = None) -> int:
        """Send a request; returns its correlation id.

        The reply arrives later as an ordinary message (``ctx.is_reply`` true,
        ``ctx.correlation_id`` equal to the returned id).  If none comes within
        ``timeout``, or the target dies, the actor receives ``AskFailed``.
        """

    @abc.abstractmethod
    def reply(self, message: Message) -> None:
        """Answer the ask being handled."""

    @abc.abstractmethod
    def names(self) -> list[str]:
        """Every actor name currently registered in the system."""

    def broadcast(self, group: str | Iterable[str], message: Message) -> list[str]:
        """Tell every actor of ``group`` (a glob such as ``"worker/*"``, or names); returns them."""
        if isinstance(group, str):
            targets = sorted(n for n in self.names() if fnmatch.fnmatchcase(n, group) and n != self.name)
        else:
            targets = list(group)
        for target in targets:
            self.tell(target, message)
        return targets

    @abc.abstractmethod
    def start_timer(self, key: str, delay: float, *, periodic: bool = False) -> None:
        """Deliver ``TimerFired(key)`` after ``delay`` s (then every ``delay`` s if periodic).

        Starting a timer with a key already running replaces it.
        """

    @abc.abstractmethod
    def cancel_timer(self, key: str) -> None:
        """Cancel timer ``key``; a no-op if it is not running."""

    @abc.abstractmethod
    def watch(self, name: str) -> None:
        """Receive ``Down`` once ``name`` stops, dies or becomes unreachable."""

    @abc.abstractmethod
    def unwatch(self, name: str) -> None:
        """Stop watching ``name``."""

    @abc.abstractmethod
    def stop(self, failure: str = "") -> None:
        """Stop this actor after the current handler returns.  ``failure`` (one line) says it stopped
        short of its work (a rank evicted or refused): a process started by ``spawn_process`` whose
        actor stopped with one exits with status 3, not 0."""


class LiveContext(Context):
    """The runtime's context: effects go straight to the transport."""

    def __init__(self, cell: _Cell, seed: int) -> None:
        self._cell = cell
        self._node = cell.node
        self.name = cell.name
        self.random = random.Random(seed)
        self.log = cell.log
        self.envelope = None
        self._source: str | None = None

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def tell(self, target: str, message: Message, *, timeout: float | None = None) -> None:
        # send_record, not send, and by position: one call and the keywords fewer.
        envelope = self.envelope
        self._node.send_record(self.name, target, message, 0, timeout, True,
                               envelope.trace_id if envelope is not None else None)

    def ask(self, target: str, message: Message, *, timeout: float | None = None) -> int:
        return self._cell.ask(target, message, timeout)

    def reply(self, message: Message) -> None:
        envelope = self.envelope
        if envelope is None or not envelope.correlation_id or envelope.is_reply:
            raise NotAnAsk(f"{self.name}: reply() outside the handling of an ask")
        self._node.reply(self.name, envelope, self._source, message)

    def names(self) -> list[str]:
        return self._node.names()

    def start_timer(self, key: str, delay: float, *, periodic: bool = False) -> None:
        self._cell.start_timer(key, delay, periodic)

    def cancel_timer(self, key: str) -> None:
        self._cell.cancel_timer(key)

    def watch(self, name: str) -> None:
        self._cell.watch(name)

    def unwatch(self, name: str) -> None:
        self._cell.unwatch(name)

    def stop(self, failure: str = "") -> None:
        self._cell.stopping = True
        if failure:
            self._cell.failure = failure


# -- recording: the live context, every read and effect logged ---------------------


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
        self._write = recorder.writer.write
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
        wall = _time_ns()  # one clock read for the envelope and the Out row alike
        try:
            envelope = self.envelope
            _, sent = self._node.send_record(self.name, target, message, 0, timeout, True,
                                             envelope.trace_id if envelope is not None else None, wall)
        except ActorDead as exc:
            # The target went down while this handler ran (its Down is on the way): a race the
            # replay cannot recompute, so the outcome is recorded and replay raises it again.
            self.recorder.write(Effect(self.recorder.index, "tell_dead",
                                       f"{target}\n{exc.reason.value}\n{exc.detail}"))
            raise
        # An Out row (recording.row's tuple, built inline: this runs once per message sent).
        if isinstance(sent, bytes):  # the wire record: copied, not encoded again
            self._write((_OUT, self.recorder.index, "tell", wall, msgspec.Raw(sent)))
        else:
            self._write((_OUT, self.recorder.index, "tell", wall, (sent, message)))

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

    def stop(self, failure: str = "") -> None:
        super().stop(failure)
        self.recorder.write(Effect(self.recorder.index, "stop", failure))


# -- fake: a virtual clock, effects collected ---------------------------------------


@dataclasses.dataclass(frozen=True)
class Sent:
    """One message the actor sent (``kind`` is tell, ask, reply)."""

    target: str
    message: Message
    kind: str = "tell"
    correlation_id: int = 0


class FakeContext(Context):
    """A context with a virtual clock that records every effect."""

    def __init__(self, name: str, *, now: float = 0.0, seed: int = 0, names: Iterable[str] = (),
                 wall_offset: float = 1.7e9) -> None:
        self.name = name
        self.clock = now
        self.wall_offset = wall_offset
        self.random = random.Random(seed)
        self.log = get_logger(actor=name, harness=True)
        self.envelope = None
        self.known: set[str] = set(names) | {name}
        self.outbox: list[Sent] = []
        self.timers: dict[str, tuple[float, float, int]] = {}  # key -> (due, period, count)
        self.watched: set[str] = set()
        self.stopped = False
        #: What the actor said when it stopped short of its work (``stop(failure=...)``).
        self.failure = ""
        self._corr = itertools.count(1)
        self.pending_asks: dict[int, tuple[str, str, float]] = {}  # corr -> (target, kind, deadline)

    def now(self) -> float:
        return self.clock

    def wall(self) -> float:
        return self.clock + self.wall_offset

    def _check(self, target: str) -> None:
        if target not in self.known:
            raise UnknownActor(target, self.known)

    def tell(self, target: str, message: Message, *, timeout: float | None = None) -> None:
        self._check(target)
        self.outbox.append(Sent(target, message))

    def ask(self, target: str, message: Message, *, timeout: float | None = None) -> int:
        self._check(target)
        corr = next(self._corr)
        self.pending_asks[corr] = (target, type(message).wire_tag(), self.clock + (30.0 if timeout is None else timeout))
        self.outbox.append(Sent(target, message, "ask", corr))
        return corr

    def reply(self, message: Message) -> None:
        envelope = self.envelope
        if envelope is None or not envelope.correlation_id or envelope.is_reply:
            raise NotAnAsk(f"{self.name}: reply() outside the handling of an ask")
        self.outbox.append(Sent(envelope.sender, message, "reply", envelope.correlation_id))

    def names(self) -> list[str]:
        return sorted(self.known)

    def broadcast(self, group: str | Iterable[str], message: Message) -> list[str]:
        if isinstance(group, str):
            targets = sorted(n for n in self.known if fnmatch.fnmatchcase(n, group) and n != self.name)
        else:
            targets = list(group)
        for target in targets:
            self.tell(target, message)
        return targets

    def start_timer(self, key: str, delay: float, *, periodic: bool = False) -> None:
        check_delay(key, delay, periodic)  # what the live runtime refuses, the test kit refuses
        self.timers[key] = (self.clock + delay, delay if periodic else 0.0, 1)

    def cancel_timer(self, key: str) -> None:
        self.timers.pop(key, None)

    def watch(self, name: str) -> None:
        self._check(name)
        self.watched.add(name)

    def unwatch(self, name: str) -> None:
        self.watched.discard(name)

    def stop(self, failure: str = "") -> None:
        self.stopped = True
        self.failure = failure


# -- replay: the fake context fed from a recording -------------------------------------


class ReplayExhausted(ActorwireError):
    """The replayed code read more of the clock or of the random generator than was recorded."""


class _ReplayRandom(random.Random):
    def __init__(self, draws: list[Draw]) -> None:
        self._draws = draws
        self._next = 0
        super().__init__(0)

    def _take(self, what: str) -> Draw:
        if self._next >= len(self._draws):
            raise ReplayExhausted(f"the code drew {what} more often than the recording did")
        draw = self._draws[self._next]
        self._next += 1
        return draw

    def random(self) -> float:
        draw = self._take("random()")
        if draw.bits:
            raise ReplayExhausted(f"the code called random() where the recording drew getrandbits({draw.bits})")
        return float(draw.value)

    def getrandbits(self, k: int) -> int:
        if not hasattr(self, "_draws"):  # random.Random.__init__ seeds through here
            return super().getrandbits(k)
        draw = self._take(f"getrandbits({k})")
        if draw.bits != k:
            raise ReplayExhausted(f"the code called getrandbits({k}) where the recording drew something else")
        return int(draw.value)


class _QuietLog:
    def _drop(self, *args: Any, **kwargs: Any) -> None:
        pass

    debug = info = warning = error = exception = _drop


class ReplayContext(FakeContext):
    """A virtual-clock context whose clock, randomness and name list come from the log."""

    def __init__(self, name: str, draws: list[Draw]) -> None:
        super().__init__(name)
        self.random = _ReplayRandom(draws)
        self.log = _QuietLog()  # the recording already holds what the live run logged
        self.clock_reads: list[Clock] = []
        self.names_reads: list[list[str]] = []
        #: Sends and effects of the current handler, in the order they happened.
        self.emitted: list[Any] = []
        #: Tells of the current handler that found their target dead: "target\nreason\ndetail".
        self.dead_tells: list[str] = []

    def _check(self, target: str) -> None:
        pass  # the recorded system knew its names; replay sends wherever the code says

    def tell(self, target: str, message: Message, *, timeout: float | None = None) -> None:
        if self.dead_tells and self.dead_tells[0].split("\n", 1)[0] == target:
            key = self.dead_tells.pop(0)
            self.emitted.append(("tell_dead", key, 0.0, False))
            name, reason, detail = key.split("\n", 2)
            raise ActorDead(name, DownReason(reason), detail)
        super().tell(target, message, timeout=timeout)
        self.emitted.append(self.outbox[-1])

    def ask(self, target: str, message: Message, *, timeout: float | None = None) -> int:
        corr = super().ask(target, message, timeout=timeout)
        self.emitted.append(self.outbox[-1])
        return corr

    def reply(self, message: Message) -> None:
        super().reply(message)
        self.emitted.append(self.outbox[-1])

    broadcast = Context.broadcast  # by the recorded name list, as live

    def now(self) -> float:
        return self._read(False)

    def wall(self) -> float:
        return self._read(True)

    def _read(self, wall: bool) -> float:
        while self.clock_reads:
            reading = self.clock_reads.pop(0)
            if reading.wall == wall:
                return reading.value
        raise ReplayExhausted(f"the code read ctx.{'wall' if wall else 'now'}() more often than the recording did")

    def names(self) -> list[str]:
        if not self.names_reads:
            raise ReplayExhausted("the code called ctx.names() (or broadcast) more often than the recording did")
        return self.names_reads.pop(0)

    def start_timer(self, key: str, delay: float, *, periodic: bool = False) -> None:
        check_delay(key, delay, periodic)  # raised live too: the handler's recorded error replays
        self.emitted.append(("start_timer", key, delay, periodic))

    def cancel_timer(self, key: str) -> None:
        self.emitted.append(("cancel_timer", key, 0.0, False))

    def watch(self, name: str) -> None:
        self.emitted.append(("watch", name, 0.0, False))

    def unwatch(self, name: str) -> None:
        self.emitted.append(("unwatch", name, 0.0, False))

    def stop(self, failure: str = "") -> None:
        self.stopped = True
        self.emitted.append(("stop", failure, 0.0, False))
