"""A member's half of the node protocol: its join, and its root's liveness and exit.

A member connects to the root, says hello and waits for the answer on that connection (named
:data:`ROOT_LINK` until the welcome names the root).  The root welcomes it once; nothing else may:
a welcome from any other peer, or a second one, is refused, and registry updates count only when
the root sends them.  After the join the member judges the root by its own connection to it
(libzmq's heartbeats, :mod:`actorwire.transport._liveness`): down past the grace, or down with the
root's process gone from this host, the root is unreachable or dead; a root that says it exits is
gone at once.  Either way the root's actors are down for this node.

No I/O, no threads, no clock reads: inputs carry ``now`` where time matters; ``process_alive`` is
the one question asked of the host, injected like the registry's.
"""

from __future__ import annotations

from collections.abc import Callable

from actorwire.messages import Message
from actorwire.messages.kinds import DownReason
from actorwire.messages.runtime import Hello, NodeExiting, Refused, RegistryUpdate, Unregister, Welcome
from actorwire.transport._liveness import Timing, Watch
from actorwire.transport._membership import View
from actorwire.transport._registry import REMOVED
from actorwire.transport.node._effects import Effect, Joined, Publish, Refuse, RootGone, ToRoot

#: The source name of what arrives on the join connection before the welcome names the root.
ROOT_LINK = "@root"
#: What a welcome from anyone but the root, or a second one, is refused as.
NOT_OUR_ROOT = "a welcome from a peer that is not this node's root"
#: What a registry update from anyone but the root is refused as.
NOT_FROM_ROOT = "a registry update; only the root changes the registry"


class MemberRole:
    def __init__(self, view: View, *, timing: Timing, host: str, root_endpoint: str,
                 process_alive: Callable[[int], bool]) -> None:
        self.node_id = view.node_id
        self.view = view
        self.timing = timing
        self.host = host
        self.root_endpoint = root_endpoint
        self._process_alive = process_alive
        self.watch = Watch(None, 0.0)  # the connection to the root (up once the join's handshake is done)
        self.joined = False  # the join was answered, either way
        self.gone = False  # the root is gone: this member is headless

    # -- what arrives ------------------------------------------------------------

    def admit(self, source: str, hello: Hello, now: float) -> list[Effect]:
        """A peer said a hello the membership view accepted: only the root admits to the registry."""
        return []

    def node_message(self, source: str, correlation_id: int, message: Message) -> list[Effect]:
        """A node-level message from a peer that said hello (or from the join connection): the
        root's answers to the join, its registry updates, its exit.  A request of the registry is
        the root's to answer: a member drops it."""
        if isinstance(message, Welcome):
            return self.welcome(source, message)
        if isinstance(message, Refused):
            return self.refused(source, message.reason)
        if isinstance(message, RegistryUpdate):
            return self.update(source, message)
        if isinstance(message, NodeExiting):
            return self.root_exiting(source)
        return []

    # -- this node's own requests, to the root ---------------------------------------------

    def own_request(self, correlation_id: int, message: Message) -> list[Effect]:
        return [ToRoot(message, correlation_id)]

    def unregister_own(self, name: str) -> list[Effect]:
        return [ToRoot(Unregister(names=[name]))]

    def exiting_own(self, actors: list[str], peers: list[str]) -> list[Effect]:
        """This process leaves cleanly: the root hears it (and tells the others)."""
        return [ToRoot(NodeExiting(node_id=self.node_id, actors=actors))]

    # -- what only the root judges: nothing for a member --------------------------------

    @property
    def pending(self) -> bool:
        return False  # no member's end waits for a verdict here

    def next_verdict(self) -> float | None:
        return None

    def drained(self, now: float) -> list[Effect]:
        return []

    def process_exited(self, node: str, returncode: int, now: float) -> list[Effect]:
        return []

    def heard_from_refused(self, peer: str, now: float) -> list[Effect]:
        return []

    def expel(self, peer: str, why: str) -> list[Effect]:
        return []  # the peer's hello is forgotten (the view's); only the root removes nodes

    def members_but(self, skip: str | None) -> list[str]:
        return []  # a member forwards no registry update

    # -- the join -------------------------------------------------------------

    def welcome(self, source: str, welcome: Welcome) -> list[Effect]:
        """Admitted: the root's registry as of the join, and the timing every member adopts."""
        if source != ROOT_LINK or self.joined:
            return [Refuse(source, NOT_OUR_ROOT)]
        self.view.welcomed(welcome)
        self.timing = Timing.of(welcome.heartbeat_interval, welcome.staleness_timeout)
        self.watch.up()  # the welcome came over it
        self.joined = True
        return [Joined(welcome=welcome)]

    def refused(self, source: str, reason: str) -> list[Effect]:
        """The root refused the join, or (later) says it removed this node while it lived: nothing
        it runs counts for the system any more, and its actors see the root's go down."""
        if not self.joined:
            if source != ROOT_LINK:
                return []
            self.joined = True
            return [Joined(error=f"the root refused this process: {reason}")]
        if source == self.view.root_id and reason.startswith(REMOVED):
            return self._down(f"the root removed this node: {reason}", DownReason.UNREACHABLE)
        return []

    def handshake_failed(self, auth: bool) -> list[Effect]:
        """The tcp handshake with the root failed.  Before the join that is the answer (libzmq
        would retry for ever); after it, the connection's state judges the root."""
        if self.joined:
            return []
        self.joined = True
        if auth:
            why = ("the root refused this process's CURVE key: its public key is not among the root's "
                   "allowed keys (copy it into the root's ACTORWIRE_KEYS directory)")
        else:
            why = ("the CURVE handshake with the root failed: the root key this process has does not "
                   "match the root's, or one side runs without CURVE")
        return [Joined(error=f"{why}; root {self.root_endpoint}")]

    # -- the registry -----------------------------------------------------------

    def update(self, source: str, update: RegistryUpdate) -> list[Effect]:
        if source != self.view.root_id:
            return [Refuse(source, NOT_FROM_ROOT)]
        return [Publish(update)]

    def root_exiting(self, source: str) -> list[Effect]:
        """A node says it exits; when it is the root, its names go down as exited."""
        if source != self.view.root_id:
            return []
        self.gone = True
        names = self.view.names_on(source)
        return [RootGone(None), Publish(RegistryUpdate(
            removed=names, reasons={n: DownReason.EXITED for n in names}, detail="the root exited cleanly"))]

    # -- the root's liveness --------------------------------------------------------

    def connection_up(self) -> list[Effect]:
        self.watch.up()
        return []

    def connection_down(self, now: float) -> list[Effect]:
        self.watch.down(now, self.timing)
        return self._gone_from_host()

    def check(self, now: float) -> list[Effect]:
        """The periodic verdict: a root whose connection stayed down past the grace is unreachable.
        A dying root closes its sockets before its pid is gone: its process is looked at each time."""
        if not self.joined or self.gone or self.watch.down_since is None:
            return []
        effects = self._gone_from_host()
        if not effects and self.watch.silent_for(now) is not None:
            effects = self._down(self.watch.why(now), DownReason.UNREACHABLE)
        return effects

    def _gone_from_host(self) -> list[Effect]:
        """The root runs on this host and its process no longer exists: it is dead."""
        root = self.view.nodes.get(self.view.root_id or "")
        if root is None or root.host != self.host or root.pid <= 0 or self._process_alive(root.pid):
            return []
        return self._down(f"its connection closed and process {root.pid} no longer exists", DownReason.DEAD)

    def _down(self, why: str, reason: DownReason) -> list[Effect]:
        effects: list[Effect] = []
        if not self.gone:
            self.gone = True
            effects.append(RootGone(why))
        names = self.view.names_on(self.view.root_id)
        if names:
            effects.append(Publish(RegistryUpdate(removed=names, reasons={n: reason for n in names},
                                                  detail=f"root node: {why}")))
        return effects
