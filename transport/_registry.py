"""The root's registry: which node hosts which actor, and which nodes are alive.

A sans-IO state machine: the root's I/O thread feeds it what arrives and the
time, and broadcasts the ``RegistryUpdate`` values it returns.  Tests drive it
with a virtual clock.

Liveness rules (the connection's state comes from libzmq, see :mod:`._liveness`):

* a node whose connection is up is alive, however long its Python is silent;
* a node whose connection dropped and did not come back within the grace, or
  whose first connection was not made within the staleness timeout of its
  join, is ``unreachable``;
* a node on the root's host whose connection dropped and whose process no
  longer exists is ``dead`` at once;
* a launched process that exited without saying ``NodeExiting`` is ``dead``;
* a node that said ``NodeExiting`` is latched as ``exited``: neither detector
  fires for it afterwards, so a clean exit is never counted as a death.

Names:

* a name is held by one node; another node may take it over (``takeover``)
  only once its holder is proven gone: latched as exiting, or, on the root's
  host, its process no longer exists (``process_alive`` says so).  While the
  holder may be alive the claim is refused with :data:`HELD_BY_A_LIVE_NODE`,
  and the claimant may ask again; the holder's death (its connection lost,
  exit detection) frees the name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from actorwire.messages import UsageError
from actorwire.messages.kinds import DownReason
from actorwire.messages.runtime import NodeInfo, RegistryUpdate
from actorwire.transport._liveness import Timing, Watch


class RegistryError(UsageError):
    """A request the registry refuses (the requester asked for what it may not have); the text goes back to it."""


#: The start of a refusal's reason when a takeover waits for the holder to be proven gone.
HELD_BY_A_LIVE_NODE = "held by a node that may be alive"
#: Removed nodes whose reason is kept (a bound on the root's memory).
DROPPED_KEPT = 65_536
#: The start of the reason a removed node is refused with when it is heard from again.
REMOVED = "this node was removed from the system"


@dataclasses.dataclass
class _Node:
    info: NodeInfo
    watch: Watch
    names: set[str] = dataclasses.field(default_factory=set)
    exiting: bool = False


class Registry:
    def __init__(self, *, root_node: NodeInfo, timing: Timing, now: float,
                 process_alive: Callable[[int], bool] | None = None) -> None:
        """``process_alive(pid)`` answers for processes on the root's host (default: never proven dead)."""
        self.timing = timing
        self._process_alive = process_alive or (lambda pid: True)
        self._host = root_node.host
        self.root_id = root_node.node_id
        self._nodes: dict[str, _Node] = {root_node.node_id: _Node(root_node, Watch(None, 0.0, True))}
        self._names: dict[str, str] = {}
        #: Why each node that left was removed (the last DROPPED_KEPT of them): a node that was cut
        #: off while it lived (stopped, overloaded past the grace, expelled) is told so when it is
        #: heard from again, instead of carrying on alone.
        self._dropped: dict[str, str] = {}

    # -- queries ----------------------------------------------------------

    @property
    def names(self) -> dict[str, str]:
        return dict(self._names)

    @property
    def nodes(self) -> dict[str, NodeInfo]:
        return {node_id: n.info for node_id, n in self._nodes.items()}

    def has_node(self, node_id: str) -> bool:
        return node_id in self._nodes

    def members(self, now: float) -> list[tuple[NodeInfo, str, list[str]]]:
        """Every node with its liveness (``up``, ``down 0.4 s``, ``joining 0.2 s``) and its names."""
        out = []
        for node_id, node in sorted(self._nodes.items()):
            watch = node.watch
            if node_id == self.root_id or watch.down_since is None:
                liveness = "exiting" if node.exiting else "up"
            else:
                liveness = f"{'down' if watch.was_up else 'joining'} {now - watch.down_since:.1f} s"
            out.append((node.info, liveness, sorted(node.names)))
        return out

    def removed(self, node_id: str) -> str | None:
        """Why ``node_id`` was removed from the system, if it was (and is not back)."""
        return self._dropped.get(node_id)

    # -- inputs -----------------------------------------------------------

    def join(self, info: NodeInfo, now: float) -> RegistryUpdate:
        if info.node_id in self._nodes:
            raise RegistryError(f"node id {info.node_id!r} is already in this system")
        self._nodes[info.node_id] = _Node(info, Watch.joined(now, self.timing))
        self._dropped.pop(info.node_id, None)
        return RegistryUpdate(nodes={info.node_id: info})

    def connected(self, node_id: str) -> None:
        """The root's connection to ``node_id`` completed its handshake."""
        node = self._nodes.get(node_id)
        if node is not None:
            node.watch.up()

    def disconnected(self, node_id: str, now: float) -> RegistryUpdate:
        """The root's connection to ``node_id`` dropped: dead at once if its process is proven
        gone, otherwise it has the grace to come back."""
        node = self._nodes.get(node_id)
        if node is None or node_id == self.root_id or node.exiting:
            return RegistryUpdate()
        if self._gone(node_id):
            return self._drop(node_id, DownReason.DEAD, self._closed_and_gone(node))
        node.watch.down(now, self.timing)
        return RegistryUpdate()

    @staticmethod
    def _closed_and_gone(node: _Node) -> str:
        return f"its connection closed and process {node.info.pid} no longer exists"

    def register(self, node_id: str, names: list[str], *, takeover: bool = False) -> RegistryUpdate:
        node = self._nodes.get(node_id)
        if node is None:
            raise RegistryError(f"node {node_id!r} has not joined")
        for name in names:
            holder = self._names.get(name)
            if holder is None or holder == node_id:
                continue
            if not takeover:
                raise RegistryError(f"actor name {name!r} is already taken by node {holder!r}")
            if not self._gone(holder):
                raise RegistryError(f"{HELD_BY_A_LIVE_NODE}: actor name {name!r} (node {holder!r}); "
                                    f"it can be taken over once that node is dead or exited")
        for name in names:
            holder = self._names.get(name)
            if holder is not None and holder != node_id:
                self._nodes[holder].names.discard(name)
            self._names[name] = node_id
            node.names.add(name)
        return RegistryUpdate(added={name: node_id for name in names})

    def _gone(self, node_id: str) -> bool:
        """Whether node ``node_id`` is proven gone: exiting, or a process of this host that no longer exists."""
        node = self._nodes[node_id]
        if node.exiting:
            return True
        info = node.info
        return node_id != self.root_id and info.host == self._host and info.pid > 0 \
            and not self._process_alive(info.pid)

    def unregister(self, node_id: str, names: list[str]) -> RegistryUpdate:
        node = self._nodes.get(node_id)
        removed = [n for n in names if node is not None and self._names.get(n) == node_id]
        for name in removed:
            del self._names[name]
            node.names.discard(name)  # type: ignore[union-attr]
        return RegistryUpdate(removed=removed, reasons={n: DownReason.EXITED for n in removed})

    def exiting(self, node_id: str) -> RegistryUpdate:
        """A clean exit: latch it, and remove the node's names as ``exited``."""
        node = self._nodes.get(node_id)
        if node is None:
            return RegistryUpdate()
        node.exiting = True
        return self._drop(node_id, DownReason.EXITED, "exited cleanly")

    def process_exited(self, node_id: str, returncode: int) -> RegistryUpdate:
        """Exit detection for a process the system launched."""
        node = self._nodes.get(node_id)
        if node is None or node.exiting:
            return RegistryUpdate()
        return self._drop(node_id, DownReason.DEAD, f"process exited with status {returncode}")

    def expel(self, node_id: str, why: str) -> RegistryUpdate:
        """A node that broke the protocol is disconnected: its names go down as ``dead``."""
        if node_id not in self._nodes or node_id == self.root_id:
            return RegistryUpdate()
        return self._drop(node_id, DownReason.DEAD, f"disconnected: {why}")

    def check(self, now: float) -> list[RegistryUpdate]:
        """Every node (but the root) whose connection stayed down past its allowance is unreachable."""
        updates = []
        for node_id, node in list(self._nodes.items()):
            if node_id == self.root_id or node.exiting or node.watch.down_since is None:
                continue
            # A dying process closes its sockets before its pid is gone: the drop may be seen first,
            # and the pid is looked at again on every check of the grace.
            if self._gone(node_id):
                updates.append(self._drop(node_id, DownReason.DEAD, self._closed_and_gone(node)))
            elif node.watch.silent_for(now) is not None:
                updates.append(self._drop(node_id, DownReason.UNREACHABLE, node.watch.why(now)))
        return updates

    def _drop(self, node_id: str, reason: DownReason, detail: str) -> RegistryUpdate:
        node = self._nodes.pop(node_id)
        if len(self._dropped) >= DROPPED_KEPT:
            del self._dropped[next(iter(self._dropped))]
        self._dropped[node_id] = f"{reason.value}: {detail}"
        names = sorted(node.names)
        for name in names:
            if self._names.get(name) == node_id:
                del self._names[name]
        return RegistryUpdate(
            removed=names, reasons={n: reason for n in names}, detail=f"node {node_id}: {detail}",
            left_nodes=[node_id],
        )
