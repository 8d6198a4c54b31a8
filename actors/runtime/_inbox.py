"""Inboxes: named mailboxes that user threads (a training loop) poll instead of running an actor."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from actorwire.actors.runtime._mailbox import Mailbox
from actorwire.messages import Envelope, Message
from actorwire.transport.internal import NotAnAsk

if TYPE_CHECKING:
    from actorwire.actors.runtime._system import ActorSystem

R = TypeVar("R", bound=Message)


class Received(NamedTuple):
    """A message taken from an :class:`Inbox`."""

    message: Message
    envelope: Envelope
    source: str | None
    #: When it came into the inbox (``time.monotonic()`` of this process).
    received_at: float = 0.0

    @property
    def sender(self) -> str:
        return self.envelope.sender


class Inbox:
    """A named mailbox for a user thread (e.g. the training loop).

    Other actors address it by name like any actor.  ``poll()`` never blocks;
    ``get(timeout)`` waits.  Use it from one thread at a time.
    """

    def __init__(self, system: ActorSystem, name: str) -> None:
        self.name = name
        self._system = system
        self._node = system._node
        self._mailbox: Mailbox[tuple[Envelope, Message, str | None, float]] = Mailbox(system.config.mailbox_capacity)
        #: Called with each message and its envelope as it arrives, in the thread that delivers it
        #: (the node's I/O thread), before it is queued: for what must act while the inbox's own
        #: thread is busy (a worker aborts a collective its training thread waits in).  It must not
        #: block or raise.
        self.on_arrival: Callable[[Envelope, Message], None] | None = None

    def _deliver(self, envelope: Envelope, message: Message, source: str | None, timeout: float | None) -> bool:
        if self.on_arrival is not None:
            self.on_arrival(envelope, message)
        return self._mailbox.put((envelope, message, source, time.monotonic()), timeout)

    def _deliver_many(self, items: list[tuple[Envelope, Message, str | None]]) -> None:
        """The I/O thread's bulk path: a run that arrived together, stamped with one clock read."""
        at = time.monotonic()
        if self.on_arrival is not None:
            for envelope, message, _ in items:
                self.on_arrival(envelope, message)
        self._mailbox.put_many([(envelope, message, source, at) for envelope, message, source in items])

    def _take(self, item: tuple[Envelope, Message, str | None, float] | None) -> Received | None:
        if item is None:
            return None
        envelope, message, source, at = item
        if source is not None:
            self._node.handled(source, envelope)
        return Received(message, envelope, source, at)

    def poll(self) -> Received | None:
        """The oldest message, or None at once if there is none."""
        return self._take(self._mailbox.get_nowait())

    def get(self, timeout: float | None = None) -> Received | None:
        """The oldest message, waiting up to ``timeout`` s (None: forever); None on timeout."""
        return self._take(self._mailbox.get(timeout))

    def drain(self) -> Iterator[Received]:
        """Every message waiting now, oldest first, without blocking."""
        while (item := self.poll()) is not None:
            yield item

    def __len__(self) -> int:
        return len(self._mailbox)

    def tell(self, target: str, message: Message, *, timeout: float | None = None) -> None:
        self._node.send(self.name, target, message, timeout=timeout)

    def tell_nowait(self, target: str, message: Message) -> None:
        self._node.send(self.name, target, message, block=False)

    def ask(self, target: str, message: Message, *, timeout: float | None = None,
            expect: type[R] | None = None) -> Any:
        return self._system._blocking_ask(self.name, target, message, timeout, expect)

    def reply(self, to: Received, message: Message) -> None:
        if not to.envelope.correlation_id or to.envelope.is_reply:
            raise NotAnAsk(f"the message from {to.sender!r} is not an ask")
        self._node.reply(self.name, to.envelope, to.source, message)

    def watch(self, name: str) -> None:
        self._system._watch(self.name, name)

    def unwatch(self, name: str) -> None:
        self._system._unwatch(self.name, name)

    def close(self) -> None:
        self._system._inboxes.pop(self.name, None)
        self._node.remove_local(self.name)
        self._mailbox.close()
