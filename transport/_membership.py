"""What one node knows of the system, as a sans-IO machine: peers, names, and who speaks for whom.

The root's :class:`~actorwire.transport._registry.Registry` decides membership;
every node (the root too) keeps a :class:`View` of it, built from the root's
``welcome`` and ``registry_update`` messages.  The view answers the questions
the node asks of every message it receives:

* may this peer talk at all (:meth:`View.hello`: it said a valid hello);
* may node N sign a message with actor name A (:meth:`View.speaks_for`: N
  holds A, held it until it was removed, or A is one of N's user threads,
  ``~N/...``);
* which node may answer an ask to A (:meth:`View.host_of`);

and :meth:`View.apply` turns an update into the changes the node must act on
(moved names, names gone down, nodes that left).  It reads no clock, touches no
socket and sends nothing: the node does what the returned values say.

Who touches what: the I/O thread writes; sending threads read ``routes``,
``nodes`` and ``gone`` (single dict reads, atomic under the GIL).
"""

from __future__ import annotations

import dataclasses

from actorwire.messages import PROTOCOL_VERSION, DownReason, PeerError
from actorwire.messages.runtime import Hello, NodeInfo, RegistryUpdate, Welcome


class HelloRefused(PeerError):
    """A hello that must be refused; the text names nothing the peer did not send."""


@dataclasses.dataclass(frozen=True, slots=True)
class Changes:
    """What an update changed that the node has to act on."""

    moved: list[tuple[str, str]]  # (name, its new node): unhandled messages follow it there
    down: list[tuple[str, DownReason, str]]  # (name, reason, detail): its streams and asks fail
    left: list[str]  # nodes gone from the system: their connections close


class View:
    """One node's view of the registry."""

    def __init__(self, own: NodeInfo, *, run_id: str, is_root: bool) -> None:
        self.node_id = own.node_id
        self.is_root = is_root
        self._run_id = run_id
        self.nodes: dict[str, NodeInfo] = {own.node_id: own}
        self.routes: dict[str, str] = {}  # actor name -> the node hosting it
        # Names removed, and why: a send to one fails with the reason instead of "unknown".
        self.gone: dict[str, tuple[DownReason, str]] = {}
        # The last holder of each removed name: what it sent before leaving is still its own.
        self.former: dict[str, str] = {}
        self.peers: set[str] = set()  # node ids that said a valid hello on this node's sockets
        self.root_id: str | None = own.node_id if is_root else None

    # -- admission ---------------------------------------------------------

    def hello(self, hello: Hello, source: str) -> bool:
        """Admit peer ``source`` on its ``hello``.  Raises :class:`HelloRefused` for a wrong run id
        or protocol version (the peer is told why); returns False, admitting nothing, when the
        hello's node id is not the connection's identity (a peer speaking for another)."""
        if hello.run_id != self._run_id:
            raise HelloRefused("wrong run id")  # never the id: it is a secret
        if hello.protocol_version != PROTOCOL_VERSION:
            raise HelloRefused(f"protocol version {hello.protocol_version} is not {PROTOCOL_VERSION}")
        if hello.node.node_id != source:
            return False
        self.peers.add(source)
        return True

    def welcomed(self, welcome: Welcome) -> None:
        """The root admitted this node: its registry as of that moment."""
        self.root_id = welcome.root_node_id
        self.peers.add(welcome.root_node_id)
        self.nodes.update(welcome.nodes)
        self.routes.update(welcome.names)

    def expel(self, peer: str) -> None:
        """Forget ``peer``'s hello: all it sends is refused until it says hello again."""
        self.peers.discard(peer)

    # -- questions -----------------------------------------------------------

    def speaks_for(self, source: str, sender: str) -> bool:
        """Whether node ``source`` may sign a message ``sender``.  A member may not have heard of a
        new name yet; it is not proven either (see :meth:`unheard_of`)."""
        if sender.startswith("~"):
            return sender.startswith(f"~{source}/")
        owner = self.routes.get(sender)
        if owner is None:
            owner = self.former.get(sender)
        return owner == source or (owner is None and not self.is_root)

    def host_of(self, name: str) -> str | None:
        """The node that hosts ``name`` now, or hosted it last."""
        return self.routes.get(name) or self.former.get(name)

    def names_on(self, node_id: str | None) -> list[str]:
        return [name for name, owner in self.routes.items() if owner == node_id]

    # -- changes -------------------------------------------------------------

    def apply(self, update: RegistryUpdate) -> Changes:
        """Take in the root's ``update``; what changed for the node to act on."""
        self.nodes.update(update.nodes)
        moved: list[tuple[str, str]] = []
        for name, node_id in update.added.items():
            old = self.routes.get(name)
            self.routes[name] = node_id
            self.gone.pop(name, None)
            if old is not None and old != node_id:
                moved.append((name, node_id))
        down: list[tuple[str, DownReason, str]] = []
        for name in update.removed:
            reason = update.reasons.get(name, DownReason.DEAD)
            former = self.routes.pop(name, None)
            if former is not None:
                self.former[name] = former
            self.gone[name] = (reason, update.detail)
            down.append((name, reason, update.detail))
        for node_id in update.left_nodes:
            self.nodes.pop(node_id, None)
            for name in [n for n, owner in self.former.items() if owner == node_id]:
                del self.former[name]
            self.peers.discard(node_id)
        return Changes(moved, down, list(update.left_nodes))
