"""The root's half of the node protocol: the keeper of the registry.

A member is admitted by its hello (the membership view checks the hello; this role adds the node to
the registry and welcomes it), asks for names with ``Register`` and ``Unregister``, says
``NodeExiting`` when it leaves cleanly, and is judged by the root's connection to it, once what it
sent before that connection closed has been read (:meth:`RootRole.drained`).  A node the
root removed while it lived (stopped past the grace, cut off, expelled) that is heard from again is
told it is out, at most once a :data:`TELL_REMOVED_EVERY`: it ends what it runs for this system
instead of waiting for a coordinator that no longer counts it.

No I/O, no threads, no clock reads: every input carries ``now`` where time matters, every output is
an effect (:mod:`._effects`) the driver carries out in order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from actorwire.messages import PROTOCOL_VERSION, Message
from actorwire.messages.runtime import (
    Hello,
    NodeExiting,
    NodeInfo,
    Refused,
    Register,
    RegistryUpdate,
    Unregister,
    Welcome,
)
from actorwire.transport._liveness import Timing
from actorwire.transport._registry import DROPPED_KEPT, REMOVED, Registry, RegistryError
from actorwire.transport.node._effects import Answer, Effect, OpenLink, Publish, Refuse, Send, SendRaw, Warn
from actorwire.transport.node._member import NOT_FROM_ROOT, NOT_OUR_ROOT

#: A removed node heard from again is told it is out at most this often (seconds).
TELL_REMOVED_EVERY = 1.0
#: How long, at most, a member whose connection closed or whose process exited waits for its verdict
#: while the root's routers still hold unread messages (seconds): under a steady flood from other
#: peers they may never be empty.  A root that keeps up reads them within milliseconds; reading
#: 6,000 unregistrations behind a member's exit took 0.4 s on a 2-core VM.
DRAIN_AT_MOST = 5.0
#: And at least this long after its connection closed: the member's own connection to the root (the
#: routers read it) closes at the same moment as the root's to it, not necessarily first.
DRAIN_AFTER = 0.05


@dataclasses.dataclass
class _Pending:
    """What the root learnt of a member's end and has not judged yet: the last messages the member
    sent may still wait in the root's routers (a ``NodeExiting`` among them makes it a clean exit)."""

    since: float
    down_at: float | None = None  # its connection closed (everything it sent before is now readable)
    returncode: int | None = None  # the launcher saw its process exit


class RootRole:
    def __init__(self, own: NodeInfo, *, run_id: str, timing: Timing, now: float,
                 heartbeat_interval: float, staleness_timeout: float,
                 process_alive: Callable[[int], bool] | None = None) -> None:
        self.node_id = own.node_id
        self.run_id = run_id
        self.heartbeat_interval = heartbeat_interval
        self.staleness_timeout = staleness_timeout
        self.registry = Registry(root_node=own, timing=timing, now=now, process_alive=process_alive)
        self._told_removed: dict[str, float] = {}  # removed nodes told they are out, and when
        #: Members whose end was seen and is judged once the routers are read (``drained``).
        self.pending: dict[str, _Pending] = {}
        #: Members whose connection (the root's monitored link) is up: a leaving root waits for them.
        self.up: set[str] = set()

    # -- admission and requests ---------------------------------------------

    def admit(self, source: str, hello: Hello, now: float) -> list[Effect]:
        """``source`` said a hello the membership view accepted: a node new to the registry joins
        and is welcomed with the registry's tables; one already in it (a second connection of a
        member, its line) changes nothing."""
        if self.registry.has_node(source):
            return []
        try:
            update = self.registry.join(hello.node, now)
        except RegistryError as exc:
            return [Send(source, Refused(reason=str(exc)))]
        welcome = Welcome(protocol_version=PROTOCOL_VERSION, run_id=self.run_id, root_node_id=self.node_id,
                          nodes=self.registry.nodes, names=self.registry.names,
                          heartbeat_interval=self.heartbeat_interval, staleness_timeout=self.staleness_timeout)
        return [Send(source, welcome), self._publish(update, skip=source), OpenLink(source)]

    def request(self, source: str, correlation_id: int, message: Message) -> list[Effect]:
        """A member's (or this node's own) request of the registry; a refusal goes back as
        ``Refused`` to a request that awaits an answer and is dropped otherwise."""
        registry = self.registry
        try:
            if isinstance(message, Register):
                update = registry.register(source, list(message.names), takeover=message.takeover)
            elif isinstance(message, Unregister):
                update = registry.unregister(source, list(message.names))
            elif isinstance(message, NodeExiting):
                update = registry.exiting(source)
            else:
                return [Warn("unexpected node message", {"source": source, "kind": type(message).wire_tag()})]
        except RegistryError as exc:
            return [Answer(source, correlation_id, Refused(reason=str(exc)))] if correlation_id else []
        # A node that leaves cleanly closes its sockets after it said so: a leaving root still waits
        # for it (until its drop is seen, or the grace ends); closing under it aborts libzmq there.
        effects: list[Effect] = [Publish(update) if isinstance(message, NodeExiting) else self._publish(update)]
        if correlation_id:
            effects.append(Answer(source, correlation_id, update))
        return effects

    def node_message(self, source: str, correlation_id: int, message: Message) -> list[Effect]:
        """A node-level message from a member that said hello: a request of the registry.  What only
        a root sends (a welcome, a registry update) is refused; a refusal is nothing to the root."""
        if isinstance(message, Welcome):
            return [Refuse(source, NOT_OUR_ROOT)]
        if isinstance(message, RegistryUpdate):
            return [Refuse(source, NOT_FROM_ROOT)]
        if isinstance(message, Refused):
            return []
        return self.request(source, correlation_id, message)

    # -- this node's own requests ---------------------------------------------------

    def own_request(self, correlation_id: int, message: Message) -> list[Effect]:
        """A request of this process's own (registering a name): the registry is here."""
        return self.request(self.node_id, correlation_id, message)

    def unregister_own(self, name: str) -> list[Effect]:
        """An actor of the root's own process stopped."""
        return [self._publish(self.registry.unregister(self.node_id, [name]))]

    def exiting_own(self, actors: list[str], peers: list[str]) -> list[Effect]:
        """This process leaves cleanly: every member that said hello hears it."""
        return [Send(node, NodeExiting(node_id=self.node_id, actors=actors)) for node in peers]

    # -- liveness -------------------------------------------------------------

    def link_up(self, node: str) -> list[Effect]:
        """The root's connection to ``node`` is up (again): a drop seen before it is judged first."""
        self.up.add(node)
        pending = self.pending.get(node)
        effects = self._judge(node, self.pending.pop(node)) if pending is not None and pending.down_at is not None else []
        self.registry.connected(node)
        return effects

    def link_down(self, node: str, now: float) -> list[Effect]:
        """The root's connection to ``node`` closed.  Judged once the routers hold nothing more
        (:meth:`drained`): the messages the node sent before it closed (its ``NodeExiting`` last) are
        read first, so a clean exit behind a backlog is not taken for a death."""
        self.up.discard(node)
        pending = self.pending.setdefault(node, _Pending(since=now))
        pending.down_at = now
        return []

    def process_exited(self, node: str, returncode: int, now: float) -> list[Effect]:
        """A process this root launched exited (its launcher saw it).  Judged once its connection
        closed and the routers were read (:meth:`drained`), or :data:`DRAIN_AT_MOST` after."""
        self.pending.setdefault(node, _Pending(since=now)).returncode = returncode
        return []

    def drained(self, now: float) -> list[Effect]:
        """The routers hold no unread message: judge each member whose connection closed at least
        :data:`DRAIN_AFTER` ago (all it sent before is read), and any whose end waited
        :data:`DRAIN_AT_MOST`."""
        return self._judge_due(now, drained=True)

    def next_verdict(self) -> float | None:
        """When :meth:`drained` may judge a pending end next (None: nothing pends)."""
        return min((pending.since + DRAIN_AT_MOST if pending.down_at is None else pending.down_at + DRAIN_AFTER
                    for pending in self.pending.values()), default=None)

    def _judge_due(self, now: float, *, drained: bool) -> list[Effect]:
        """Judge the pending ends due at ``now``: past :data:`DRAIN_AT_MOST`, and when the routers
        were just read (``drained``) a closed connection past :data:`DRAIN_AFTER`."""
        effects: list[Effect] = []
        for node, pending in list(self.pending.items()):
            if (now >= pending.since + DRAIN_AT_MOST
                    or drained and pending.down_at is not None and now >= pending.down_at + DRAIN_AFTER):
                effects += self._judge(node, self.pending.pop(node))
        return effects

    def _judge(self, node: str, pending: _Pending) -> list[Effect]:
        """The exit status first (a launched process's death says more than a closed connection);
        a node that said ``NodeExiting`` meanwhile has left cleanly and neither changes anything."""
        effects: list[Effect] = []
        if pending.returncode is not None:
            effects.append(self._publish(self.registry.process_exited(node, pending.returncode)))
        if pending.down_at is not None:
            effects.append(self._publish(self.registry.disconnected(node, pending.down_at)))
        return effects

    def check(self, now: float) -> list[Effect]:
        """The periodic verdicts: members whose connection stayed down past the grace are removed;
        an end that waited :data:`DRAIN_AT_MOST` for the routers to be read is judged."""
        effects = self._judge_due(now, drained=False)
        for update in self.registry.check(now):
            effects += [Warn("node unreachable", {"detail": update.detail, "actors": update.removed}),
                        self._publish(update)]
        return effects

    # -- misbehaviour -----------------------------------------------------------

    def heard_from_refused(self, peer: str, now: float) -> list[Effect]:
        """Something ``peer`` sent was refused.  A node the root removed while it lived is told
        it is out (at most once a :data:`TELL_REMOVED_EVERY`)."""
        why = self.registry.removed(peer)
        if why is None:
            self._told_removed.pop(peer, None)
            return []
        if now - self._told_removed.get(peer, -TELL_REMOVED_EVERY) < TELL_REMOVED_EVERY:
            return []
        self._told_removed.pop(peer, None)
        self._told_removed[peer] = now
        if len(self._told_removed) > DROPPED_KEPT:
            del self._told_removed[next(iter(self._told_removed))]
        return [Warn("told a removed node it is out", {"peer": peer, "why": why}),
                SendRaw(peer, Refused(reason=f"{REMOVED} ({why})"))]

    def expel(self, peer: str, why: str) -> list[Effect]:
        """``peer`` broke the protocol: its node is declared dead (never the root itself)."""
        if peer == self.node_id or not self.registry.has_node(peer):
            return []
        return [self._publish(self.registry.expel(peer, why))]

    def _publish(self, update: RegistryUpdate, skip: str | None = None) -> Publish:
        """``update`` goes to the members.  A node it removes is no longer waited for by a leaving
        root: the driver closes its link, monitor and all, so no drop of that link will be seen
        (but for a clean exit, :meth:`request`)."""
        self.up.difference_update(update.left_nodes)
        return Publish(update, skip=skip)

    # -- queries ------------------------------------------------------------------

    def members_but(self, skip: str | None) -> list[str]:
        """The member nodes an update goes to: all but the root and ``skip``."""
        return [node for node in self.registry.nodes if node not in (self.node_id, skip)]
