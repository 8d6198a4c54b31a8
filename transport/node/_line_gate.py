"""The receiving side of lines, as a machine with no I/O: who may open a line, what waits, where
a reply goes.

A line (:mod:`actorwire.transport._lines`) is a peer's user thread's own connection to this node,
known by its identity ``<node id><LINE_MARK><n>``.  Its first message must be a hello from a member
node, as that node's own connection's would be; after it, the line carries that node's asks, one
batch frame per message, and each reply goes back on the line its ask came on.  A member may hear
a line before the root's update names its node: the line is then held (:class:`HeldLines`) until
the update comes (:meth:`LineGate.release`) or the staleness timeout passes
(:meth:`LineGate.expired`).  The root's view is the registry, so it refuses such a line at once.

:meth:`LineGate.receive` takes one message of a line and returns the effects: refusals
(:class:`Refuse` counts one, :class:`RefuseLine` also tells the line, whose asker then goes the
node's way), warnings, and :class:`Take`, the asks to read as records the node sent.  No I/O, no
threads, no clock reads: the driver passes ``now``.
"""

from __future__ import annotations

from actorwire.messages import Codec, DecodeError, Envelope, Message
from actorwire.messages.runtime import Hello
from actorwire.transport._lines import LINE_MARK, MAX_LINES_PER_NODE, HeldLines
from actorwire.transport._membership import HelloRefused, View
from actorwire.transport.node._effects import Effect, Refuse, RefuseLine, Take, Warn

#: Asks that came on lines and await a reply; past it the oldest route is dropped (that reply then
#: goes the node's own way, which its asker also reads).
REPLY_ROUTES = 65_536

NOT_A_MEMBER = "a line from a node that is not a member"
NO_HELLO = "a line that did not say hello"


class LineGate:
    """The lines this node takes asks on.  ``peers``: each admitted line's node; ``reply_via``: the
    line each ask that came on one is answered on, by (node, correlation id)."""

    def __init__(self, node_id: str, view: View, codec: Codec, *, is_root: bool, held: HeldLines | None = None,
                 reply_routes: int = REPLY_ROUTES) -> None:
        self.node_id = node_id
        self.view = view
        self.codec = codec
        self.is_root = is_root
        self.held = HeldLines() if held is None else held
        self.peers: dict[str, str] = {}
        self.reply_via: dict[tuple[str, int], str] = {}
        self.reply_routes = reply_routes

    def receive(self, identity: str, frames: list[bytes], now: float) -> list[Effect]:
        """One message of line ``identity``: a hello first, then batch frames of asks."""
        node = self.peers.get(identity)
        if node is None:
            claimed = identity.partition(LINE_MARK)[0]
            if not self.held.holds(identity):
                return self._admit(identity, claimed, frames, now)
            if not self.held.add(identity, frames):
                return [RefuseLine(identity, claimed, f"more than {self.held.depth} messages on a line, or "
                                   f"{self.held.max_bytes} bytes on all, held for their nodes' registration")]
            return []
        if len(frames) != 1:
            return [Refuse(node, "a line message that is not one batch frame")]
        pairs, errors = self.codec.decode_batch(frames[0])
        effects: list[Effect] = [Warn("dropped an undecodable message", {"source": identity, "reason": str(error)})
                                 for error in errors]
        asks: list[tuple[Envelope, Message]] = []
        for envelope, message in pairs:
            if envelope.target == "" or envelope.is_reply:  # "": a node message's target
                effects.append(Refuse(node, "a node message or a reply on a line (lines carry asks)"))
                continue
            if envelope.correlation_id:
                if len(self.reply_via) >= self.reply_routes:
                    del self.reply_via[next(iter(self.reply_via))]
                self.reply_via[(node, envelope.correlation_id)] = identity
            asks.append((envelope, message))
        if asks:
            effects.append(Take(node, asks))
        return effects

    def _admit(self, identity: str, claimed: str, frames: list[bytes], now: float) -> list[Effect]:
        """A line's first message must be a valid hello from a member node, other than this one."""
        if len(frames) != 2:
            return [Refuse(claimed, NO_HELLO)]
        try:
            _, hello = self.codec.decode(frames)
        except DecodeError as exc:
            return [Refuse(claimed, f"an undecodable hello on a line: {exc}")]
        if not isinstance(hello, Hello):
            return [Refuse(claimed, NO_HELLO)]
        try:
            admitted = self.view.hello(hello, claimed)
        except HelloRefused as exc:
            return [RefuseLine(identity, claimed, f"a hello: {exc}", told=str(exc))]
        if not admitted or claimed == self.node_id:
            return [Refuse(claimed, NOT_A_MEMBER)]
        if claimed not in self.view.nodes:
            if self.is_root:  # the root's view is the registry: nothing will name the node later
                return [Refuse(claimed, NOT_A_MEMBER)]
            if not self.held.hold(identity, claimed, now, frames):
                return [RefuseLine(identity, claimed, f"{NOT_A_MEMBER} ({self.held.limit} lines wait already)")]
            return []  # held: the root's update naming the node may still be on its way
        if sum(1 for n in self.peers.values() if n == claimed) >= MAX_LINES_PER_NODE:
            return [Refuse(claimed, f"more than {MAX_LINES_PER_NODE} lines")]
        self.peers[identity] = claimed
        return []

    def release(self, now: float) -> list[Effect]:
        """Read again, in order, what each held line whose node the view now knows sent."""
        effects: list[Effect] = []
        for identity, messages in self.held.release(self.view.nodes):
            for frames in messages:
                effects.extend(self.receive(identity, frames, now))
        return effects

    def expired(self, now: float, patience: float) -> list[Effect]:
        """Refuse each line held longer than ``patience``: no update named its node."""
        return [RefuseLine(identity, node, NOT_A_MEMBER) for identity, node in self.held.expired(now, patience)]

    def forget(self, node: str) -> list[str]:
        """Node ``node`` left: forget its lines, held or admitted, and the routes of its asks; the
        identities of its admitted lines are returned (the driver forgets their connections)."""
        self.held.drop(node)
        lines = [identity for identity, n in self.peers.items() if n == node]
        for identity in lines:
            del self.peers[identity]
        for route in [r for r in self.reply_via if r[0] == node]:
            del self.reply_via[route]
        return lines

    def reply_route(self, node: str, correlation_id: int) -> str:
        """Where the reply to ask ``correlation_id`` of ``node`` goes: the line it came on, else the
        node's own connection.  Any thread may call it (one dict operation)."""
        return self.reply_via.pop((node, correlation_id), node) if self.reply_via else node
