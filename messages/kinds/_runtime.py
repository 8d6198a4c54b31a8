"""The runtime's own messages: handshake, liveness, supervision, errors.

Actors rarely see these: the runtime consumes ``Hello``/``Welcome`` and
``NodeHeartbeat`` itself, turns deaths into ``Down`` for watchers, and turns
``ErrorReply`` into an exception on the asker's side.
"""

from __future__ import annotations

from typing import Union

from .._base import ActorName, Count, Message, Record
from ._enums import DownReason, ErrorCode


class NodeInfo(Record, frozen=True):
    """Where a process (a *node*) of the system can be reached."""

    node_id: str
    #: ZeroMQ endpoints its ROUTER is bound to (ipc and/or tcp).
    endpoints: list[str]
    host: str = ""
    pid: Count = 0
    #: z85 CURVE public key of its tcp endpoint (None: no tcp, or plain loopback tcp).
    curve_key: str | None = None
    #: The credit window it grants each stream it receives (0: not said; a sender then uses its own).
    window: Count = 0


class Hello(Message, frozen=True, tag="hello"):
    """First message on every connection from one node to another.

    To the root it asks to join the system; to any other node it identifies
    the connection (the receiver drops traffic from connections that did not
    say hello with the right run id and protocol version).
    """

    protocol_version: Count
    run_id: str
    node: NodeInfo


class Welcome(Message, frozen=True, tag="welcome"):
    """Root -> node: accepted; the current registry (nodes and actor names)."""

    protocol_version: Count
    run_id: str
    root_node_id: str
    nodes: dict[str, NodeInfo] = {}
    #: Actor name -> the node_id hosting it.
    names: dict[str, str] = {}
    #: The root's liveness timing (already scaled), which every member adopts
    #: so that nobody is judged by a staleness timeout shorter than its beat.
    heartbeat_interval: float = 1.0
    staleness_timeout: float = 3.0


class Refused(Message, frozen=True, tag="refused"):
    """A ``Hello`` or a ``Register`` was refused, and why."""

    reason: str


class Register(Message, frozen=True, tag="register"):
    """Node -> root: these actors now live on the sending node.

    ``takeover`` lets a restarted process claim names still held by its
    previous incarnation (messages not yet handled there are re-sent).
    """

    names: list[ActorName]
    takeover: bool = False


class Unregister(Message, frozen=True, tag="unregister"):
    """Node -> root: these actors stopped cleanly."""

    names: list[ActorName]


class RegistryUpdate(Message, frozen=True, tag="registry_update"):
    """Root -> nodes: nodes and names added, names removed (with why)."""

    nodes: dict[str, NodeInfo] = {}
    #: Actor name -> node_id.
    added: dict[str, str] = {}
    removed: list[ActorName] = []
    reasons: dict[str, DownReason] = {}
    detail: str = ""
    #: Nodes that left the system (their connections can be closed).
    left_nodes: list[str] = []


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


class RankExited(Message, frozen=True, tag="rank_exited"):
    """The process of a launched rank exited (told to the launch's ``watcher``), whether or not it
    had joined: one that never joined has no actor whose ``Down`` could say so."""

    rank: Count
    #: The exit status; negative: killed by that signal.
    returncode: int
    detail: str = ""


class ErrorReply(Message, frozen=True, tag="error_reply"):
    """A request could not be served; the asker raises an error carrying this."""

    code: ErrorCode
    message: str
    #: The kind of the request that failed, when known.
    request_kind: str | None = None


class AckEntry(Record, frozen=True, array_like=True):
    """``[sender, target, received_seq, handled_seq]``: cumulative, per sender-target pair."""

    sender: ActorName
    target: ActorName
    received: Count
    handled: Count


class Ack(Message, frozen=True, tag="ack"):
    """Receiving node -> sending node: how far each pair was received and handled.

    ``handled`` returns send credit; ``received`` stops retransmission.
    """

    entries: list[AckEntry]


class AskFailed(Message, frozen=True, tag="ask_failed"):
    """Delivered to an actor whose ``ask`` got no reply: timeout, dead target, error."""

    correlation_id: Count
    target: ActorName
    request_kind: str
    reason: str
    code: ErrorCode = ErrorCode.HANDLER_FAILED


class TimerFired(Message, frozen=True, tag="timer_fired"):
    """Delivered to an actor when one of its timers fires."""

    key: str
    #: How many times this timer has fired (periodic timers count up from 1).
    count: Count = 1


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
    RankExited,
    ErrorReply,
    Ack,
    AskFailed,
    TimerFired,
]
