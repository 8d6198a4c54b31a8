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
* or must the message wait (:meth:`View.unheard_of`): a member can hear from
  a name before the root's update naming its holder reaches it, so what is
  signed with a name its view never held waits in :class:`Parking` (in order
  per sender, bounded per source) until an update proves the name or the
  staleness timeout passes;

and :meth:`View.apply` turns an update into the changes the node must act on
(moved names, names gone down, nodes that left).  It reads no clock, touches no
socket and sends nothing: the node does what the returned values say.

Who touches what: the I/O thread writes; sending threads read ``routes``,
``nodes`` and ``gone`` (single dict reads, atomic under the GIL).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from actorwire.messages import PROTOCOL_VERSION, PeerError
from actorwire.messages.kinds import DownReason
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

    def speaks_for(self, source: str, sender: str, parking: Parking | None = None) -> bool:
        """Whether node ``source`` may sign a message ``sender`` now.  A name that has messages
        from ``source`` waiting in ``parking`` is not, until they ran: they keep their order."""
        if sender.startswith("~"):
            return sender.startswith(f"~{source}/")
        owner = self.routes.get(sender)
        if owner is None:
            owner = self.former.get(sender)
        return owner == source and not (parking and parking.waits(source, sender))

    def unheard_of(self, source: str, sender: str, parking: Parking | None = None) -> bool:
        """Whether a message signed ``sender`` from ``source`` that is not proven should wait rather
        than be refused: on a member, for a name its view has never held (the root's update may be
        on its way), or one whose earlier messages from ``source`` wait.  The root's view is the
        registry itself: nothing waits there."""
        if self.is_root or sender.startswith("~"):
            return False
        return (sender not in self.routes and sender not in self.former) or bool(
            parking and parking.waits(source, sender))

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


class Parking:
    """Messages that wait for the registry to prove their sender, per source node, in order.

    Each entry is ``(since, envelope, message)``: ``since`` is when it first
    waited, kept when it is parked again after a release.  At most ``limit``
    wait per source; the node refuses the rest (the sender re-sends them).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parked: dict[str, collections.deque[tuple[float, Any, Any]]] = {}
        self._waiting: collections.Counter[tuple[str, str]] = collections.Counter()

    def __bool__(self) -> bool:
        return bool(self._parked)

    def waits(self, source: str, sender: str) -> bool:
        """Whether messages signed ``sender`` from ``source`` wait here."""
        return (source, sender) in self._waiting

    def park(self, source: str, sender: str, entry: tuple[float, Any, Any]) -> bool:
        """Let ``entry`` wait; False (nothing kept) if ``source`` already has ``limit`` waiting."""
        parked = self._parked.setdefault(source, collections.deque())
        if len(parked) >= self.limit:
            return False
        parked.append(entry)
        self._waiting[(source, sender)] += 1
        return True

    def release(self) -> dict[str, list[tuple[float, Any, Any]]]:
        """Everything that waits, per source in order, to be tried again (what still cannot be
        proven is parked again, keeping its ``since``)."""
        out = {source: list(parked) for source, parked in self._parked.items()}
        self._parked.clear()
        self._waiting.clear()
        return out

    def drop(self, source: str) -> list[tuple[float, Any, Any]]:
        """What ``source`` parked (it left the system: it is refused)."""
        parked = self._parked.pop(source, ())
        for _, envelope, _ in parked:
            self._waiting[(source, envelope.sender)] -= 1
        self._waiting = +self._waiting  # drop the zeros
        return list(parked)
