"""The runtime's own messages: handshake, liveness, supervision, errors.

Actors rarely see these: the runtime consumes ``Hello``/``Welcome`` and
``NodeHeartbeat`` itself, turns deaths into ``Down`` for watchers, and turns
``ErrorReply`` into an exception on the asker's side.
"""

from __future__ import annotations

from typing import Union

from ._base import ActorName, Count, Message
from ._enums import DownReason, ErrorCode


class Hello(Message, frozen=True, tag="hello"):
    """First message a node sends to a peer node."""

    protocol_version: Count
    run_id: str
    node_id: str
    endpoint: str
    actors: list[ActorName] = []
    host: str = ""
    pid: Count = 0


class Welcome(Message, frozen=True, tag="welcome"):
    """Answer to ``Hello``: the peer is accepted; ``registry`` maps actor names to endpoints."""

    protocol_version: Count
    run_id: str
    node_id: str
    registry: dict[str, str] = {}


class Refused(Message, frozen=True, tag="refused"):
    """Answer to ``Hello`` when the peer may not join (wrong run, wrong version)."""

    reason: str


class Register(Message, frozen=True, tag="register"):
    """Node -> registry: these actors now live at ``endpoint``."""

    node_id: str
    endpoint: str
    actors: list[ActorName]


class Unregister(Message, frozen=True, tag="unregister"):
    """Node -> registry: these actors stopped."""

    node_id: str
    actors: list[ActorName]


class RegistryUpdate(Message, frozen=True, tag="registry_update"):
    """Registry -> nodes: names added (with endpoints) and names removed."""

    added: dict[str, str] = {}
    removed: list[ActorName] = []
    #: Why the removed names left, by name, when it was not a clean stop.
    reasons: dict[str, DownReason] = {}


class NodeHeartbeat(Message, frozen=True, tag="node_heartbeat"):
    """Process-level proof of life, sent by the I/O thread."""

    node_id: str
    seq: Count = 0


class NodeExiting(Message, frozen=True, tag="node_exiting"):
    """A process is exiting cleanly; its actors are ``exited``, not ``dead``."""

    node_id: str
    actors: list[ActorName] = []


class Watch(Message, frozen=True, tag="watch"):
    """Ask to be told (``Down``) when ``target`` stops, for whatever reason."""

    target: ActorName


class Unwatch(Message, frozen=True, tag="unwatch"):
    target: ActorName


class Down(Message, frozen=True, tag="down"):
    """A watched actor is gone."""

    name: ActorName
    reason: DownReason
    detail: str = ""


class ErrorReply(Message, frozen=True, tag="error_reply"):
    """A request could not be served; the asker raises an error carrying this."""

    code: ErrorCode
    message: str
    #: The kind of the request that failed, when known.
    request_kind: str | None = None


RuntimeMsg = Union[
    Hello,
    Welcome,
    Refused,
    Register,
    Unregister,
    RegistryUpdate,
    NodeHeartbeat,
    NodeExiting,
    Watch,
    Unwatch,
    Down,
    ErrorReply,
]
