"""The node's I/O thread: the loop, what arrives on each socket, and the effects carried out.

Everything here runs on the one thread that owns the sockets (the right column of the diagram at the
top of ``transport/_node.py``).  :class:`IOLoop` polls the sockets and the wake-up pipe, reads the
clock, hands what arrives to the parts that judge it (``Incoming`` record by record, the line gate,
the node's role) and does what they return: the effects of :mod:`._effects`, in order.  The
any-thread side (``Node``'s lifecycle and names, ``Outgoing``'s send and ask paths) reaches this
thread only through the :class:`~._outbox.Outbox` and its commands below.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, TypeAlias, cast

import zmq

from actorwire.messages import Codec, Envelope, Message
from actorwire.messages.kinds import DownReason
from actorwire.messages.runtime import Ack, Hello, NodeHeartbeat, Refused, RegistryUpdate
from actorwire.transport._asks import Asks
from actorwire.transport._config import RuntimeConfig
from actorwire.transport._delivery import InStreams
from actorwire.transport._errors import JoinRefused
from actorwire.transport._lines import LINE_MARK, Lines
from actorwire.transport._liveness import Timing
from actorwire.transport._membership import HelloRefused, Parking, View
from actorwire.transport.node._effects import (
    Answer,
    Effect,
    Joined,
    OpenLink,
    Publish,
    Refuse,
    RefuseLine,
    RootGone,
    Send,
    SendRaw,
    Take,
    ToRoot,
    Warn,
)
from actorwire.transport.node._line_gate import LineGate
from actorwire.transport.node._member import ROOT_LINK, MemberRole
from actorwire.transport.node._outbound import Outbound
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._receive import DeliverMany, Incoming
from actorwire.transport.node._role import NodeRole
from actorwire.transport.node._root import RootRole
from actorwire.transport.node._send import Deliver, Rehome, Reply, RootRequest
from actorwire.transport.node._settle import Settlement
from actorwire.transport.node._sockets import Link, SocketFactory, drain_pipe, monitor_event, recv_frames
from actorwire.transport.node._wires import Wires

NODE = ""  # envelope target of node-level messages
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # plain ints: pyzmq's enum arithmetic showed up in profiles

#: on_down(name, reason, detail)
DownCallback = Callable[[str, DownReason, str], None]


# -- what other threads hand the I/O thread --------------------------------------
#
# Records, replies and commands reach it through the node's Outbox (_outbox.py); replies and
# commands keep their order there, one class per command (the sending side's own, Reply,
# RootRequest and Rehome, are in _send.py).


@dataclasses.dataclass(frozen=True, slots=True)
class Unregister:
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class Exiting:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessExit:
    node_id: str
    returncode: int


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """What a peer sent was refused on another thread (a reply on a user thread's line)."""

    peer: str
    what: str


Command: TypeAlias = RootRequest | Unregister | Exiting | ProcessExit | Rehome | Refusal


class IOLoop:
    """The I/O thread's work, over the node's tables (shared with the sending side, which reads
    them; only this thread writes them)."""

    def __init__(self, *, node_id: str, config: RuntimeConfig, codec: Codec, log: Any, view: View, wires: Wires,
                 sockets: SocketFactory, timing: Timing, outbox: Outbox, outbound: Outbound, asks: Asks,
                 streams: InStreams, parking: Parking, lines: Lines, line_gate: LineGate,
                 local: dict[str, Deliver], bulk: dict[str, DeliverMany], root_role: RootRole | None,
                 member_role: MemberRole | None, wake_r: int, on_down: DownCallback,
                 changed: Callable[[], None], closing: Callable[[], bool], note: Callable[[str], None],
                 reply: Callable[[str, Envelope, str | None, Message], None]) -> None:
        self._node_id = node_id
        self._config = config
        self._codec = codec
        self._log = log
        self._view = view
        self._known_peers = view.peers  # identities that said a valid Hello
        self._wires = wires
        self._send_router, self._send_node = wires.send_router, wires.send_node
        self._sockets = sockets
        self._timing = timing
        self._staleness = config.scaled(config.staleness_timeout)
        self._outbox = outbox
        self._outbound = outbound
        self._asks = asks
        self._streams = streams
        self._parking = parking
        self._lines = lines
        self._line_gate = line_gate
        self._local = local
        self._root_role = root_role
        self._member_role = member_role
        #: The one of them this node is, through the interface both share (_role.py): what arrives
        #: and what this process asks go to it without asking which it is.
        self._role: NodeRole = root_role if root_role is not None else cast(MemberRole, member_role)
        self._wake_r = wake_r
        self._on_down = on_down
        self._notify_changed = changed
        self._note = note
        #: What was refused, counted per (peer, reason) and logged once each (never once per record).
        self.refusals: collections.Counter[tuple[str, str]] = collections.Counter()
        #: What sends and asks come to (replies, deadlines, acks, re-sends, re-homing, a target down)
        #: and the acks owed for what was handled (_settle.py).
        self.settle = settle = Settlement(
            node_id=node_id, codec=codec, view=view, asks=asks, outbound=outbound, outbox=outbox,
            streams=streams, log=log, refuse=self.refuse, send_node=self._send_node, changed=changed,
            closing=closing)
        #: What arrives from peers, record by record (_receive.py).
        self.incoming = Incoming(codec=codec, view=view, streams=streams, parking=parking, outbox=outbox,
                                 local=local, bulk=bulk, log=log, clock=time.monotonic,
                                 node_message=self._on_node_message, resolve=settle.resolve,
                                 refuse=self.refuse, expel=self._expel, reply=reply)
        self.stop = threading.Event()
        #: Set when the root is gone (exited or unreachable): a member node is headless.
        self.root_gone = threading.Event()
        #: Set when a member's join was answered (``join_error`` says if it was refused).
        self.joined = threading.Event()
        self.join_error: Exception | None = None
        self.left = False  # the node announced its exit (Node.leave): a link that drops is waited for

    @property
    def timing(self) -> Timing:
        """The liveness timing in force (a member takes its root's at the join)."""
        return self._timing

    @property
    def staleness(self) -> float:
        return self._staleness

    def run(self) -> None:
        """Serve until :attr:`stop` is set (on the I/O thread; an exception ends it, see ``Node._run``)."""
        wires = self._wires
        poller = wires.watch(self._wake_r)
        router, tcp_router, zap, monitor, root_monitor = (
            wires.router, wires.tcp_router, wires.zap, wires.monitor, wires.root_monitor)
        watched = wires.watched
        next_beat = time.monotonic()
        outbox, settle = self._outbox, self.settle
        role = self._role
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_beat:
                self._beat(now)
                next_beat = now + self._timing.tick
            settle.expire(now)
            if outbox.acks_due(now):
                settle.flush_acks()
            self._flush_out()
            wake_at = next_beat
            first = self._asks.next_deadline()
            if first is not None:
                wake_at = min(wake_at, first)
            verdict = role.next_verdict() if role.pending else None
            if verdict is not None:
                wake_at = min(wake_at, verdict)
            timeout = outbox.go_idle(now, wake_at, self._asks.next_deadline)
            events = poller.poll(max(0, int(timeout * 1000) + (1 if timeout > 0 else 0)))
            outbox.awake()
            for sock, _ in events:
                if sock == self._wake_r:
                    drain_pipe(self._wake_r)
                elif sock is router or sock is tcp_router:
                    self._recv_router(sock)
                elif sock is zap:
                    wires.serve_zap()
                elif sock is monitor:
                    wires.on_monitor()
                elif sock is root_monitor:
                    self._on_root_event()
                elif sock in watched:
                    self._on_link_event(watched[sock])
                else:
                    self._recv_link(sock)
            if role.pending and not wires.routers_readable():
                self._carry_out(role.drained(time.monotonic()))

    def flush(self) -> None:
        """Ship what is queued and the acks owed (the I/O thread's last act)."""
        self._flush_out()
        self.settle.flush_acks()

    # -- outbound -------------------------------------------------------

    def _flush_out(self) -> None:
        """Ship everything queued: each peer's records in batch frames, then replies and commands."""
        ship = self._wires.ship
        for node_id, records in self._outbox.take_records():
            ship(node_id, records)
        for item in self._outbox.take_items():
            if isinstance(item, Reply):
                self.send_reply(item)
            else:
                self._run_command(item)

    def send_reply(self, reply: Reply) -> None:
        self._wires.send_reply(reply.node_id, reply.record)

    def _run_command(self, cmd: Command) -> None:
        if isinstance(cmd, RootRequest):
            self._carry_out(self._role.own_request(cmd.correlation_id, cmd.message))
        elif isinstance(cmd, Unregister):
            self._carry_out(self._role.unregister_own(cmd.name))
        elif isinstance(cmd, Exiting):
            self._carry_out(self._role.exiting_own(sorted(self._local), list(self._known_peers)))
        elif isinstance(cmd, ProcessExit):
            self._carry_out(self._role.process_exited(cmd.node_id, cmd.returncode, time.monotonic()))
        elif isinstance(cmd, Refusal):
            self.refuse(cmd.peer, cmd.what)
        else:
            self.settle.rehome(cmd.sender, cmd.target, cmd.node_id)

    # -- inbound --------------------------------------------------------

    def _recv_router(self, sock: zmq.Socket) -> None:
        router_of, take = self._wires.router_of, self.incoming.frames
        for _ in range(256):
            try:
                frames = recv_frames(sock)
            except zmq.Again:
                return
            peer = frames[0].decode(errors="replace")
            router_of[peer] = sock
            if LINE_MARK in peer:
                self._on_line_safely(peer, frames[1:])
            else:
                take(peer, frames[1:], from_router=True)
            if self._outbox.full():
                # Credit goes back while the burst is still being read: held to the end of a burst
                # of 256 frames, it stalled a fast sender on an empty window (bench bus: both
                # processes at 0.65-0.7 of a core, taking turns).
                self.settle.flush_acks()
            if not cast(int, sock.get(_EVENTS)) & _POLLIN:
                return  # nothing more: asking costs 2 us, a failed read 5 us (pyzmq builds an exception)

    def _on_line_safely(self, identity: str, frames: list[bytes]) -> None:
        """What a peer's user thread sent on its line (see :mod:`.node._line_gate`)."""
        try:
            self._carry_out(self._line_gate.receive(identity, frames, time.monotonic()))
        except Exception:
            self._log.exception("failed to process a message from a line; dropped it", source=identity)

    def _refuse_line(self, identity: str, claimed: str, what: str, *, told: str | None = None) -> None:
        """Refuse the line ``identity`` (counted as ``what``) and tell it so (``told``, else ``what``):
        its asks then go the node's way at once."""
        self.refuse(claimed, what)
        refused = Refused(reason=what if told is None else told)
        self._send_node(identity, refused)
        self._wires.router_of.pop(identity, None)

    def _release_lines(self) -> None:
        """Read again what held lines sent, for each whose node the view now knows."""
        for effect in self._line_gate.release(time.monotonic()):
            try:
                self._carry_out([effect])
            except Exception:
                self._log.exception("failed to process a message from a line; dropped it",
                                    source=getattr(effect, "node", None))

    def _on_root_event(self) -> None:
        """The connection to the root went up or down, or its tcp handshake failed.

        A failed handshake before the join is the answer: libzmq would retry for ever, and the user
        waited out the join timeout to read "no answer"."""
        assert self._wires.root_monitor is not None and self._member_role is not None
        kind = monitor_event(self._wires.root_monitor)
        if kind is None:
            return
        if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._carry_out(self._member_role.connection_up())
        elif kind == zmq.EVENT_DISCONNECTED:
            self._carry_out(self._member_role.connection_down(time.monotonic()))
        else:
            self._carry_out(self._member_role.handshake_failed(kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH))

    def _on_link_event(self, link: Link) -> None:
        """The root's connection to a member went up or down (its monitor said so)."""
        assert link.monitor is not None and self._root_role is not None
        kind = monitor_event(link.monitor)
        if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._carry_out(self._root_role.link_up(link.node_id))
        elif kind == zmq.EVENT_DISCONNECTED:
            self._log.info("the connection to a member dropped", peer=link.node_id)
            self._carry_out(self._root_role.link_down(link.node_id, time.monotonic()))
            if self.left:
                self._notify_changed()  # leave() waits for the members' connections to drop

    def _recv_link(self, sock: zmq.Socket) -> None:
        link = next((lk for lk in self._wires.links.values() if lk.socket is sock), None)
        if link is None:
            return
        for _ in range(256):
            try:
                frames = recv_frames(sock)
            except zmq.Again:
                return
            # Per message: the welcome that names the root may be the one just taken in.
            source = self._view.root_id or ROOT_LINK if link.node_id == ROOT_LINK else link.node_id
            self.incoming.frames(source, frames, from_router=False)
            if not cast(int, sock.get(_EVENTS)) & _POLLIN:
                return

    def _on_node_message(self, source: str, envelope: Envelope, message: Message, from_router: bool) -> None:
        if isinstance(message, Hello):
            try:
                admitted = self._view.hello(message, source)
            except HelloRefused as exc:
                self.refuse(source, f"a hello: {exc}")
                self._send_node(source, Refused(reason=str(exc)))
                return
            if not admitted:
                self._log.warning("refused a peer whose identity does not match its hello", peer=source)
                return
            self._carry_out(self._role.admit(source, message, time.monotonic()))
            return
        if source not in self._known_peers and from_router:
            self.refuse(source, "a node message from a peer that did not say hello")
            return
        if envelope.is_reply:
            self.settle.resolve(envelope, message, source)
        elif isinstance(message, Ack):
            self.settle.acked(message, source, time.monotonic())
        elif isinstance(message, NodeHeartbeat):
            pass  # the stamp was refreshed on arrival
        else:
            self._carry_out(self._role.node_message(source, envelope.correlation_id, message))

    def _carry_out(self, effects: list[Effect]) -> None:
        """Do what the node's role asked, in order."""
        for effect in effects:
            if isinstance(effect, Publish):
                self._apply_update(effect.update, skip=effect.skip)
            elif isinstance(effect, Send):
                self._send_node(effect.node, effect.message)
            elif isinstance(effect, Answer):
                self._answer(effect.node, effect.correlation_id, effect.message)
            elif isinstance(effect, SendRaw):
                self._send_router(effect.peer, [self._codec.join_records([self._wires.node_record(effect.message)])])
            elif isinstance(effect, OpenLink):
                if effect.node not in self._wires.links:
                    self._wires.open_link(effect.node)
            elif isinstance(effect, Warn):
                self._log.warning(effect.event, **effect.fields)
            elif isinstance(effect, Refuse):
                self.refuse(effect.peer, effect.what)
            elif isinstance(effect, Take):
                self.incoming.records(effect.node, effect.pairs, from_router=True)
            elif isinstance(effect, RefuseLine):
                self._refuse_line(effect.identity, effect.node, effect.what, told=effect.told)
            elif isinstance(effect, ToRoot):
                self._wires.to_root(effect.message, effect.correlation_id)
            elif isinstance(effect, Joined):
                self._on_joined(effect)
            elif isinstance(effect, RootGone):
                if not self.root_gone.is_set():
                    self.root_gone.set()
                    if effect.why is not None:
                        self._log.error("the root is unreachable", detail=effect.why)

    def _on_joined(self, joined: Joined) -> None:
        welcome = joined.welcome
        if welcome is None:
            self.join_error = JoinRefused(joined.error or "the root refused this process")
            self.joined.set()
            return
        assert self._member_role is not None
        self._notify_changed()
        if self._parking:
            self.incoming.unpark()
        if self._line_gate.held:
            self._release_lines()
        # Traffic to the root's actors shares the join connection: a second
        # DEALER with our identity would be refused by the root's ROUTER.
        self._wires.links[welcome.root_node_id] = self._wires.links[ROOT_LINK]
        self._staleness = welcome.staleness_timeout
        self._timing = self._sockets.timing = self._member_role.timing
        self.joined.set()

    def _answer(self, node_id: str, corr: int, message: Message) -> None:
        if node_id == self._node_id:
            self.settle.resolve(Envelope(sender=self._node_id, target=NODE, seq=0, correlation_id=corr, is_reply=True),
                          message)
        else:
            self._send_node(node_id, message, correlation_id=corr, is_reply=True)

    def _apply_update(self, update: RegistryUpdate, *, broadcast: bool = True, skip: str | None = None) -> None:
        if not (update.nodes or update.added or update.removed):
            return
        if broadcast:
            for node_id in self._role.members_but(skip):
                self._send_node(node_id, update)
        changes = self._view.apply(update)
        self._notify_changed()
        if self._parking and update.added:
            self.incoming.unpark()
        if self._line_gate.held and update.nodes:
            self._release_lines()
        for name, node_id in changes.moved:
            for sender in self._outbound.senders_of(name):
                self.settle.rehome(sender, name, node_id)
        for name, reason, detail in changes.down:
            self._streams.forget_target(name)
            self.settle.target_down(name, reason, detail)
            self._on_down(name, reason, detail)
        wires = self._wires
        for node_id in changes.left:
            for _, envelope, _ in self._parking.drop(node_id):
                self.refuse(node_id, f"a message signed {envelope.sender!r}, a name never given by "
                                      f"the registry to that node (it left)")
            self._streams.forget(node_id)
            wires.router_of.pop(node_id, None)
            self._lines.drop(node_id)
            for identity in self._line_gate.forget(node_id):
                wires.router_of.pop(identity, None)
            wires.drop_link(node_id, keep_socket=node_id == self._view.root_id)

    def refuse(self, peer: str, what: str) -> None:
        """Drop what ``peer`` sent: logged the first time per (peer, reason), counted after that."""
        key = (peer, what)
        self.refusals[key] += 1
        if self.refusals[key] == 1:
            self._log.warning("refused what a peer sent; further ones are counted, not logged",
                              peer=peer, what=what)
            self._note(f"refused from {peer}: {what}")
        self._carry_out(self._role.heard_from_refused(peer, time.monotonic()))

    def _expel(self, peer: str, why: str) -> None:
        """Disconnect ``peer`` for breaking the protocol: its hello is forgotten (all it sends is
        refused until it says hello again) and the root declares its node dead."""
        self.refuse(peer, f"disconnected: {why}")
        self._view.expel(peer)
        self._streams.forget(peer)
        self._carry_out(self._role.expel(peer, why))

    # -- liveness -------------------------------------------------------

    def _beat(self, now: float) -> None:
        """The periodic work: liveness verdicts, parked messages, re-sends.  Nothing is sent to
        prove this process alive: libzmq's heartbeats do that, outside the GIL."""
        self._carry_out(self._role.check(now))
        if self._parking:
            self.incoming.unpark(now, self._staleness)
        if self._line_gate.held:
            self._carry_out(self._line_gate.expired(now, self._staleness))
        self.settle.retransmit(now, self._config.scaled(self._config.retransmit_after))

