"""What a running system says of itself: ``actorwire status``, ``actorwire top`` and ``statistics()``.

Every node hosts an introspector that answers :class:`StatusRequest` with the
node's :class:`NodeStatus`; ``ActorSystem.statistics()`` returns the same record
in-process.  It is read-only: answering changes nothing in the system.  Counts
are totals since the node started; a reader that wants rates takes two and
divides by the difference of their ``wall_ns``.
"""

from __future__ import annotations

from typing import Union

from .._base import ActorName, Count, Message, Record


class RankStatus(Record, frozen=True):
    """One training rank as its coordinator knows it."""

    rank: Count
    #: ``joined`` (the run has not started), ``training``, ``waiting`` (joins at the next epoch),
    #: ``exited`` or ``dead``.
    state: str
    #: The last epoch it reported done (-1: none yet), its steps in all and its pace.
    epoch: int = -1
    steps: Count = 0
    ms_per_batch: float | None = None
    #: Seconds since the coordinator last heard from it.
    silent_s: float = 0.0


class ActorDetail(Record, frozen=True):
    """What an actor says of itself (``Actor.status()``); every field is optional."""

    #: A state machine's phase (the coordinator's: ``joining``, ``training``, ...).
    phase: str = ""
    epoch: int = -1
    ranks: list[RankStatus] = []
    #: Anything else, as text.
    notes: dict[str, str] = {}


class ActorStatus(Record, frozen=True):
    """One actor of a node, as its introspector sees it."""

    name: ActorName
    #: The actor's class (qualified name).
    cls: str
    #: Messages waiting in its mailbox.
    mailbox: Count = 0
    #: Messages handled since it started, and per kind (wire tags).
    handled: Count = 0
    by_kind: dict[str, Count] = {}
    #: Handlers that raised.
    failures: Count = 0
    #: What the actor says of itself (``Actor.status()``): the coordinator's phase and ranks, say.
    detail: ActorDetail | None = None


class MemberStatus(Record, frozen=True):
    """One node of the system as the root judges it (the root's status lists every member)."""

    node_id: str
    host: str = ""
    pid: Count = 0
    #: ``up``, or how long its connection has been down (``down 0.4 s``), or ``joining``.
    liveness: str = "up"
    #: Actor names it hosts.
    actors: list[ActorName] = []


class NodeStatus(Message, frozen=True, tag="node_status"):
    """A node's answer to :class:`StatusRequest` (and what ``ActorSystem.statistics()`` returns)."""

    node_id: str
    host: str
    pid: Count
    is_root: bool
    #: When the node started and when this was taken (wall clock, nanoseconds).
    started_ns: int
    wall_ns: int
    actors: list[ActorStatus] = []
    #: Filled on the root only: every member node and its liveness.
    members: list[MemberStatus] = []
    #: Asks this node waits on, messages it sent that are not yet handled, peers it admitted.
    pending_asks: Count = 0
    unacked: Count = 0
    peers: Count = 0
    #: What it refused from peers, and messages that came past a gap in their stream.
    refused: Count = 0
    gaps: Count = 0
    #: The last errors it logged (handler failures, refusals), newest last.
    errors: list[str] = []


class StatusRequest(Message, frozen=True, tag="status_request"):
    """Ask an introspector (``.introspect/<node id>``) for its node's :class:`NodeStatus`."""


StatusMsg = Union[StatusRequest, NodeStatus]
