"""What the node's machines ask their driver to do: plain values, compared in tests."""

from __future__ import annotations

import dataclasses
from typing import Any

from actorwire.messages import Envelope, Message
from actorwire.messages.runtime import RegistryUpdate, Welcome


@dataclasses.dataclass(frozen=True)
class Send:
    """Send a node-level ``message`` to node ``node`` over the connection it came on."""

    node: str
    message: Message


@dataclasses.dataclass(frozen=True)
class SendRaw:
    """Send ``message`` to ``peer`` straight through the router, whatever the peer's standing
    (a removed node has no admitted connection left, yet must hear that it is out)."""

    peer: str
    message: Message


@dataclasses.dataclass(frozen=True)
class Answer:
    """Reply to request ``correlation_id`` of node ``node`` (this node's own requests included)."""

    node: str
    correlation_id: int
    message: Message


@dataclasses.dataclass(frozen=True)
class Publish:
    """Apply ``update`` to this node's view and send it to every member but ``skip``."""

    update: RegistryUpdate
    skip: str | None = None


@dataclasses.dataclass(frozen=True)
class OpenLink:
    """Open the connection the root judges member ``node`` by (its monitor reports up and down)."""

    node: str


@dataclasses.dataclass(frozen=True)
class Warn:
    """Log ``event`` at warning level with ``fields``."""

    event: str
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Refuse:
    """Drop what ``peer`` sent, counted per reason ``what`` (and logged the first time)."""

    peer: str
    what: str


@dataclasses.dataclass(frozen=True)
class RefuseLine:
    """Refuse line ``identity`` of node ``node``: counted per ``what`` as :class:`Refuse` is, and the
    line told so (``told``, else ``what``) and forgotten; its asker's asks then go the node's way."""

    identity: str
    node: str
    what: str
    told: str | None = None


@dataclasses.dataclass(frozen=True)
class Take:
    """Read ``pairs`` (the asks that came on one of its lines) as records node ``node`` sent."""

    node: str
    pairs: list[tuple[Envelope, Message]]


@dataclasses.dataclass(frozen=True)
class Joined:
    """A member's join was answered: admitted with ``welcome``, or refused because of ``error``."""

    welcome: Welcome | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class ToRoot:
    """Send a node-level ``message`` to the root over the join connection (a member's own request,
    unregistration or exit); ``correlation_id`` when it awaits an answer."""

    message: Message
    correlation_id: int = 0


@dataclasses.dataclass(frozen=True)
class RootGone:
    """The root is gone: ``why`` it is taken for dead, or None when it said it exits."""

    why: str | None


Effect = Send | SendRaw | Answer | Publish | OpenLink | Warn | Refuse | RefuseLine | Take | Joined | RootGone | ToRoot
