"""What a handler may do: the context interface, and the live implementation.

Handlers see only :class:`Context`.  The live runtime implements it over the
transport; the test kit (:mod:`._testkit`) and the replay harness implement
it with a virtual clock and record every effect instead of performing it.
"""

from __future__ import annotations

import abc
import fnmatch
import random
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from actorwire.messages import Envelope, Message
from actorwire.transport._errors import NotAnAsk

if TYPE_CHECKING:
    from actorwire.actors.runtime._system import _Cell


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
    def stop(self) -> None:
        """Stop this actor after the current handler returns."""


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
        self._node.send(self.name, target, message, timeout=timeout,
                        trace_id=self.envelope.trace_id if self.envelope is not None else None)

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

    def stop(self) -> None:
        self._cell.stopping = True
