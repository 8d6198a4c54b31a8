"""A node: one process's share of an actor system, and the I/O thread that runs it.

Threads and sockets
-------------------
One I/O thread owns every ZeroMQ socket of the process::

      actor / user threads                      I/O thread
      --------------------                      ----------
      send() --encode--> outbox per peer -----wake--> DEALER per peer node --> peer ROUTER
                                                  ROUTER (bound once) <-- peer DEALERs
      mailbox <--------- deliver() <---decode---- (tells and asks from peers)
      handled() -------> ack table ------------> Ack back over the same connection

* Sending threads never touch a socket: they encode, take send credit, append
  to the peer's outbox and wake the I/O thread through an eventfd only when it
  sleeps (``Outgoing``, transport/node/_send.py: the left column above).
* The I/O thread's parts: ``Wires`` (transport/node/_wires.py) holds the sockets
  and sends on them, ``Incoming`` (_receive.py) takes what arrives record by
  record, ``Settlement`` (_settle.py) settles asks and streams and owes acks,
  and the roles (_root.py, _member.py) keep the node protocol.  This module
  composes them: it runs the loop, reads the clock and carries out effects.
* Several messages for one peer leave as one ZeroMQ message of 2N frames.
* Actors of the same process never touch a socket either: ``send`` hands the
  message straight to the target's mailbox (the "inproc" route).

Delivery guarantees
-------------------
* Per-stream FIFO, a stream being (sending node, sender, target): a sender is
  one thread, its messages take one deque, one connection, one mailbox.
* Credit: at most ``window`` messages from one sender to one remote target
  may be unhandled; a further send blocks up to ``send_timeout`` and then
  raises ``BackpressureTimeout``.  Nothing is ever dropped at a high-water
  mark (HWMs are off; the credit window bounds memory instead).
* Every message is kept until the receiving node acknowledges it as handled.
  Lost in transit (no "received" ack within ``retransmit_after``), it is sent
  again; the receiver takes each stream's numbers exactly once, in order
  (:mod:`._delivery` holds those rules).  When a name moves to a new
  incarnation (a restarted process taking it over) everything not yet handled
  is renumbered and re-sent there.  When a target dies, its unhandled messages are
  reported (log, failed asks), never silently discarded.

Liveness
--------
The root node holds the registry (:mod:`._registry`).  Liveness is libzmq's:
every socket runs ZMTP heartbeats on libzmq's C threads, the root watches its
connection to each member and each member its connection to the root through
socket monitors (:mod:`._liveness`).  A process whose Python is saturated, or
whose handler holds the GIL for minutes, keeps its connections and is not
declared dead; a stopped, killed or cut-off one loses them and is.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeAlias, cast

import zmq

from actorwire.messages import Codec, Envelope, Message
from actorwire.messages.kinds import ActorStatus, DownReason, MemberStatus, NodeStatus
from actorwire.messages.runtime import (
    Ack,
    Hello,
    NodeHeartbeat,
    NodeInfo,
    Refused,
    Register,
    RegistryUpdate,
)
from actorwire.transport._asks import Asks
from actorwire.transport._config import RuntimeConfig
from actorwire.transport._delivery import InStreams
from actorwire.transport._endpoints import (
    check_tcp_port,
    is_tcp,
    local_address_towards,
    new_node_id,
    tcp_host,
    write_run_file,
)
from actorwire.transport._errors import (
    InvalidArgument,
    JoinRefused,
    SystemClosed,
    WaitTimeout,
)
from actorwire.transport._lines import LINE_MARK, Lines
from actorwire.transport._liveness import Timing
from actorwire.transport._log import get_logger
from actorwire.transport._membership import HelloRefused, Parking, View
from actorwire.transport._process import process_alive
from actorwire.transport._registry import HELD_BY_A_LIVE_NODE
from actorwire.transport._security import Security
from actorwire.transport._settings import settings
from actorwire.transport.node import (
    ROOT_LINK,
    Answer,
    Effect,
    Joined,
    MemberRole,
    OpenLink,
    Publish,
    Refuse,
    RootGone,
    RootRole,
    Send,
    SendRaw,
    Warn,
)
from actorwire.transport.node._effects import RefuseLine, Take, ToRoot
from actorwire.transport.node._line_gate import LineGate
from actorwire.transport.node._outbound import Outbound
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._receive import DeliverMany, Incoming
from actorwire.transport.node._role import NodeRole
from actorwire.transport.node._rundir import RunDir
from actorwire.transport.node._send import Deliver, Outgoing, Rehome, Reply, RootRequest
from actorwire.transport.node._settle import Settlement
from actorwire.transport.node._sockets import (
    Link,
    SocketFactory,
    drain_pipe,
    monitor_event,
    recv_frames,
    signal,
    wake_pipe,
)
from actorwire.transport.node._wires import Wires

#: on_down(name, reason, detail)
DownCallback = Callable[[str, DownReason, str], None]

NODE = ""  # envelope target of node-level messages
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # plain ints: pyzmq's enum arithmetic showed up in profiles
_JOIN_NEWS_EVERY = 10.0  # a join that waits says so this often
_ACK_EVERY = 512  # handled messages that trigger an ack flush at once
_ACK_DELAY = 0.002  # otherwise acks leave within 2 ms




# -- the I/O thread's queues ---------------------------------------------------
#
# Records, replies and commands reach the I/O thread through the node's Outbox
# (transport/node/_outbox.py); replies and commands keep their order there, one
# class per command (the sending side's own, Reply, RootRequest and Rehome, are in
# transport/node/_send.py).


@dataclasses.dataclass(frozen=True, slots=True)
class _Unregister:
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Exiting:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class _ProcessExit:
    node_id: str
    returncode: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Refusal:
    """What a peer sent was refused on another thread (a reply on a user thread's line)."""

    peer: str
    what: str


_Command: TypeAlias = RootRequest | _Unregister | _Exiting | _ProcessExit | Rehome | _Refusal


class Node:
    """One process's runtime: sockets, routing, credit, acks, liveness.

    ``root_endpoint=None`` makes this node the root (it holds the registry
    and binds ``bind``); otherwise it joins the root at ``root_endpoint``.

    The sending side (any thread) is :class:`Outgoing`'s: these are its methods, bound to this
    node's tables in ``__init__``.
    """

    send: Callable[..., int]
    send_record: Callable[..., tuple[int, bytes | Envelope]]
    ask: Callable[..., int]
    ask_and_wait: Callable[[str, str, Message, float | None], Message]
    reply: Callable[[str, Envelope, str | None, Message], None]
    handled: Callable[[str | None, Envelope], None]
    handled_many: Callable[[dict[tuple[str, str, str], int], int], None]
    next_seq: Callable[[str], int]
    last_seq: Callable[[str], int]
    lookup: Callable[[str], str]

    def __init__(
        self,
        *,
        run_id: str,
        root_endpoint: str | None = None,
        bind_tcp: str | None = None,
        config: RuntimeConfig | None = None,
        on_down: DownCallback | None = None,
        node_id: str | None = None,
        takeover: bool = False,
        security: Security | None = None,
    ) -> None:
        self.run_id = run_id
        self.config = config or RuntimeConfig()
        self.node_id = node_id or new_node_id()
        if LINE_MARK in self.node_id:
            raise InvalidArgument(f"a node id may not contain {LINE_MARK!r}: {self.node_id!r}")
        self.is_root = root_endpoint is None
        self.host = socket.gethostname()
        self._takeover = takeover
        self._started_ns = time.time_ns()
        self._on_down = on_down or (lambda name, reason, detail: None)
        self._codec = Codec(max_message_size=self.config.max_message_size)
        self._log = get_logger(node=self.node_id, run_id=run_id)

        self._security = security if security is not None else Security()
        if root_endpoint is not None and is_tcp(root_endpoint):
            check_tcp_port(root_endpoint, f"the root endpoint {root_endpoint}")
            self._security.check_tcp(tcp_host(root_endpoint), f"the root endpoint {root_endpoint}")
        if bind_tcp is None and root_endpoint is not None and is_tcp(root_endpoint):
            bind_tcp = f"tcp://{local_address_towards(tcp_host(root_endpoint))}:0"
        if bind_tcp is not None:
            check_tcp_port(bind_tcp, f"the bind address {bind_tcp}")
            self._security.check_tcp(tcp_host(bind_tcp), f"the bind address {bind_tcp}")

        # libzmq drops a connection whose frame exceeds this, before Python allocates it.
        self._frame_cap = self.config.max_message_size + 64
        self._timing = Timing.of(self.config.scaled(self.config.heartbeat_interval),
                                 self.config.scaled(self.config.staleness_timeout))
        self._sockets = SocketFactory(zmq.Context(), frame_cap=self._frame_cap, timing=self._timing)
        #: The sockets and what is sent on them (transport/node/_wires.py): only the I/O thread's.
        self._wires = wires = Wires(node_id=self.node_id, host=self.host, codec=self._codec, security=self._security,
                                    factory=self._sockets, max_message_size=self.config.max_message_size,
                                    bind_tcp=bind_tcp, watch_links=self.is_root, prefer_tcp=settings().prefer_tcp,
                                    log=self._log)
        self._run_dir = RunDir(run_id, self.node_id)
        endpoints = [self._run_dir.endpoint, *wires.tcp_endpoints]
        self._run_dir.bind(wires.router)
        self._send_router, self._send_node = wires.send_router, wires.send_node
        public = self._security.public.decode() if self._security.curve and self._security.public else None
        self.info = NodeInfo(node_id=self.node_id, endpoints=endpoints, host=self.host, pid=os.getpid(),
                             curve_key=public if bind_tcp is not None else None, window=self.config.window)
        self.root_endpoint = root_endpoint or next((e for e in endpoints if is_tcp(e)), endpoints[0])

        # Routing state.  Written by the I/O thread; read by sending threads
        # (dict reads are atomic under the GIL).
        self._view = View(self.info, run_id=run_id, is_root=self.is_root)
        # Aliases of the view's tables: the I/O thread reads them per record, one attribute lookup fewer
        self._nodes = self._view.nodes
        self._routes = self._view.routes  # actor name -> node_id
        self._gone = self._view.gone
        self._known_peers = self._view.peers  # identities that said a valid Hello
        # Former owners of names that were removed: messages they sent before leaving are still theirs.
        self._former = self._view.former
        wires.meet(self.info, run_id, self._view.nodes)
        self._local: dict[str, Deliver] = {}
        self._bulk: dict[str, DeliverMany] = {}
        self._beat_interval = self.config.scaled(self.config.heartbeat_interval)
        self._staleness = self.config.scaled(self.config.staleness_timeout)
        #: The root's half of the node protocol (the registry's keeper); None on a member.
        self._root_role: RootRole | None = (
            RootRole(self.info, run_id=run_id, timing=self._timing, now=time.monotonic(),
                     heartbeat_interval=self._beat_interval, staleness_timeout=self._staleness,
                     process_alive=process_alive)
            if self.is_root else None
        )
        #: A member's half of the node protocol (its join, its root's liveness); None on the root.
        self._member_role: MemberRole | None = (
            None if self.is_root else
            MemberRole(self._view, timing=self._timing, host=self.host, root_endpoint=self.root_endpoint,
                       process_alive=process_alive))
        #: The one of them this node is, through the interface both share (transport/node/_role.py):
        #: what arrives and what this process asks go to it without asking which it is.
        self._role: NodeRole = self._root_role if self._root_role is not None else cast(MemberRole, self._member_role)

        # Sending.
        self._outbound = Outbound(self.config.window)
        self._out_streams = self._outbound.streams
        self._asks = Asks()
        # User threads' own sockets for the asks they wait on (see _lines).
        self._lines = Lines(self.node_id, wires.connect_line)
        # The receiving side: the lines admitted here, held, and the lines replies go back on.
        self._line_gate = LineGate(self.node_id, self._view, self._codec, is_root=self.is_root)

        # Receiving.
        # Inbound streams are keyed by the sending node (one incarnation of a process), the sender
        # name and the target: a restarted process under a reused name starts fresh streams.
        self._streams = InStreams(self.config.window)
        # Messages signed with names a member has not yet seen the root register (see _membership).
        self._parking = Parking(self.config.window)
        # What was refused, counted per (peer, reason) and logged once each (never once per record).
        self._refusals: collections.Counter[tuple[str, str]] = collections.Counter()
        self._notes: collections.deque[str] = collections.deque(maxlen=32)  # recent errors, for status

        # The I/O thread and its wake-up.
        self._wake_r, self._wake_w = wake_pipe()
        #: What threads hand the I/O thread (records, replies, commands, acks owed) and its sleep.
        self._outbox = Outbox(self._wake, ack_every=_ACK_EVERY, ack_delay=_ACK_DELAY)
        self._closed = False
        self._left = False  # leave() ran: the exit was announced
        #: Notified by the I/O thread when what a caller may wait for changed: the routes (a name
        #: registered, moved or gone), a stream re-homed, and, while closing, an ack.  The waits
        #: (``Outgoing.wait_until``) are on it with deadlines, never polls.
        self._changed = threading.Condition()
        #: What sends and asks come to (replies, deadlines, acks, re-sends, re-homing, a target down)
        #: and the acks owed for what was handled (transport/node/_settle.py).
        self._settle = settle = Settlement(
            node_id=self.node_id, codec=self._codec, view=self._view, asks=self._asks, outbound=self._outbound,
            outbox=self._outbox, streams=self._streams, log=self._log, refuse=self._refuse,
            send_node=self._send_node, changed=self._notify_changed, closing=self._closing)
        #: The any-thread send, ask and reply paths; its methods are the node's own (bound below:
        #: a delegating method would cost every send a Python call).
        self._out = Outgoing(self.node_id, self.config, self._codec, self._view, self._local, self._outbound,
                             self._outbox, self._asks, self._lines, self._line_gate, changed=self._changed,
                             log=self._log, resolve=settle.resolve, send_reply=self._send_reply,
                             answerer=settle.answerer, refuse=self._refuse_any_thread)
        out = self._out
        self.send, self.send_record, self.ask, self.ask_and_wait = out.send, out.send_record, out.ask, out.ask_and_wait
        self.reply, self.handled, self.handled_many = out.reply, out.handled, out.handled_many
        self.next_seq, self.last_seq, self.lookup = out.next_seq, out.last_seq, out.lookup
        #: What arrives from peers, record by record (transport/node/_receive.py): the I/O thread's.
        self._incoming = Incoming(codec=self._codec, view=self._view, streams=self._streams, parking=self._parking,
                                  outbox=self._outbox, local=self._local, bulk=self._bulk, log=self._log,
                                  clock=time.monotonic, node_message=self._on_node_message, resolve=settle.resolve,
                                  refuse=self._refuse, expel=self._expel, reply=self.reply)
        self._stop = threading.Event()
        #: Set when the root is gone (exited or unreachable): a member node is headless.
        self.root_gone = threading.Event()
        self._joined = threading.Event()
        self._join_error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=f"actorwire-io-{self.node_id}", daemon=True)
        self._run_file = write_run_file(run_id, self.root_endpoint, endpoints[0]) if self.is_root else None
        if not self.is_root:
            # Connect here, not in the I/O thread, so a bad endpoint fails the
            # constructor with its name (the socket moves to the I/O thread at
            # start(); Thread.start is the memory barrier ZeroMQ asks for).
            try:
                wires.connect_root(self.root_endpoint)
            except zmq.ZMQError as exc:
                wires.close()
                self._run_dir.unlink_own()
                self._run_dir.remove(is_root=self.is_root)
                raise InvalidArgument(f"cannot connect to the root at {root_endpoint!r}: {exc}") from None

    @property
    def _root_id(self) -> str | None:
        return self._view.root_id

    # ------------------------------------------------------------------
    # Lifecycle (any thread)
    # ------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> None:
        """Start the I/O thread; a non-root node also joins the root (raising ``JoinRefused``)."""
        self._thread.start()
        if self.is_root:
            self._joined.set()
            return
        limit = self.config.scaled(timeout)
        deadline = time.monotonic() + limit
        while not self._joined.wait(min(_JOIN_NEWS_EVERY, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self.close()
                raise WaitTimeout(f"no answer from the root at {self.root_endpoint} within {limit:g} s")
            self._log.warning("no answer from the root yet; still trying", root=self.root_endpoint,
                              waited_s=round(limit - (deadline - time.monotonic())), limit_s=limit)
        if self._join_error is not None:
            self.close()
            raise self._join_error

    def leave(self, timeout: float = 5.0) -> None:
        """Announce the exit and give queued messages ``timeout`` s to be handled, sockets still open
        (once; :meth:`close` does it unless it was done).

        Whoever must hear this node leave before its sockets close goes between the two: the
        processes it launched (``ActorSystem.shutdown``) exit on this announcement, and the messages
        they send as they go are read here.  A socket closed under them could abort the process:
        libzmq 4.3.5 refuses a message that arrives while a connection's session is ending, and
        when that peer then hangs up, the connection's next ZMTP heartbeat asserts
        (``!_io_error``, stream_engine_base.cpp:310; decision 0015, "Later").
        """
        if self._closed or self._left:
            return
        self._left = True
        self._out.closing = True
        if not self._thread.is_alive():
            return
        if self._root_id is not None:
            self._command(_Exiting())
        self._out.wait_until(lambda: not self._outbound.unacked(), self.config.scaled(timeout))
        left = self._outbound.unacked()
        if left:
            self._log.error("closing with unhandled messages", count=left)
        role = self._root_role
        if role is not None:
            # Members leave when they hear the root leave: their last messages and hang-ups come
            # while its sockets are open (the libzmq abort of decision 0015's "Later"), for at most
            # the liveness grace (what a member that outlives its root costs the root's exit).
            self._out.wait_until(lambda: not role.up, self._timing.grace)

    def close(self, timeout: float = 5.0, *, announce: bool = True) -> None:
        """Leave: announce the exit, give queued messages ``timeout`` s to be handled.

        ``announce=False`` leaves as a crash does: no NodeExiting, no wait for
        acknowledgements, so peers see a death rather than a clean exit.
        """
        if self._closed:
            return
        if announce:
            self.leave(timeout)
        self._out.closing = True
        if self._thread.is_alive():
            self._stop.set()
            self._wake()
            # The sockets close below: the I/O thread must be out of its poll first.
            self._thread.join(timeout=self.config.scaled(max(timeout, 2.0)))
        self._closed = True
        self._settle.fail_all(SystemClosed("the actor system was shut down"))
        self._lines.close()
        self._wires.close()
        for fd in {self._wake_r, self._wake_w}:
            os.close(fd)
        self._run_dir.unlink_own()
        if self._run_file is not None:
            self._run_file.unlink(missing_ok=True)
        self.remove_run_dir()

    def remove_run_dir(self) -> None:
        """Remove the run's socket directory unless a live node's socket keeps it (see RunDir.remove)."""
        self._run_dir.remove(is_root=self.is_root)

    # ------------------------------------------------------------------
    # Names (any thread)
    # ------------------------------------------------------------------

    def add_local(self, name: str, deliver: Deliver, timeout: float = 10.0,
                  deliver_many: DeliverMany | None = None) -> None:
        """Host actor ``name`` here and register it with the root.

        ``deliver_many`` (optional) takes a run of messages from other
        processes at once; the I/O thread then hands over a whole batch with
        one call instead of one call per message.
        """
        if self._out.closing:
            raise SystemClosed("the actor system is closing")
        if name in self._local:
            raise InvalidArgument(f"an actor named {name!r} already runs in this process")
        self._local[name] = deliver
        if deliver_many is not None:
            self._bulk[name] = deliver_many
        try:
            self._register(name, timeout)
        except BaseException:
            self._local.pop(name, None)
            self._bulk.pop(name, None)
            raise
        self._notify_changed()  # wait_for(name) in another thread

    def _register(self, name: str, timeout: float) -> None:
        """Register ``name``; a takeover waits (up to ``timeout``) for the holder to be proven gone."""
        deadline = time.monotonic() + self.config.scaled(timeout)
        while True:
            try:
                self._out.request_root(Register(names=[name], takeover=self._takeover),
                                   max(0.05, deadline - time.monotonic()))
                return
            except JoinRefused as exc:
                if not (self._takeover and HELD_BY_A_LIVE_NODE in str(exc)) or time.monotonic() > deadline:
                    raise
            # Retried when the registry changes (the holder proven gone), or after a while.
            with self._changed:
                self._changed.wait(min(0.1, self._staleness / 10))

    def remove_local(self, name: str) -> None:
        """Actor ``name`` stopped cleanly: watchers get ``Down(exited)``."""
        self._bulk.pop(name, None)
        if self._local.pop(name, None) is not None and not self._closed:
            self._command(_Unregister(name))



    def names(self, runtime: bool = False) -> list[str]:
        """Every registered actor name; the runtime's own (starting with ``.``) only when ``runtime``."""
        names = set(self._routes) | set(self._local)
        return sorted(names if runtime else (n for n in names if not n.startswith(".")))

    def note(self, text: str) -> None:
        """Keep ``text`` among the recent errors ``status`` shows (the last 32; any thread)."""
        self._notes.append(f"{time.strftime('%H:%M:%S')} {text}")

    def notes(self) -> list[str]:
        return list(self._notes)

    def wait_for(self, name: str, timeout: float = 10.0) -> None:
        """Block until ``name`` is registered (``TimeoutError`` naming it otherwise)."""
        if not self._out.wait_until(lambda: name in self._routes or name in self._local, self.config.scaled(timeout)):
            raise WaitTimeout(f"actor {name!r} did not appear within {timeout:g} s")


    def _closing(self) -> bool:
        return self._out.closing

    def _notify_changed(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def report_process_exit(self, node_id: str, returncode: int) -> None:
        """Exit detection for a launched process (root only)."""
        self._command(_ProcessExit(node_id, returncode))

    # ------------------------------------------------------------------
    # Sending (any thread): the paths are Outgoing's (transport/node/_send.py), bound in __init__
    # ------------------------------------------------------------------

    def _command(self, cmd: _Command) -> None:
        self._outbox.command(cmd)

    def _wake(self) -> None:
        try:
            signal(self._wake_w)
        except BlockingIOError:
            pass  # a wake-up is already pending
        except OSError:
            if not self._closed:
                raise

    # ------------------------------------------------------------------
    # The I/O thread
    # ------------------------------------------------------------------

    def _run(self) -> None:
        self._out.io_ident = threading.get_ident()
        log = self._log
        wires = self._wires
        poller = wires.watch(self._wake_r)
        router, tcp_router, zap, monitor, root_monitor = (
            wires.router, wires.tcp_router, wires.zap, wires.monitor, wires.root_monitor)
        watched = wires.watched
        next_beat = time.monotonic()
        outbox, settle = self._outbox, self._settle
        role = self._role
        try:
            while not self._stop.is_set():
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
        except Exception:
            log.exception("I/O thread crashed; the node is going down")
            self._out.closing = True
            self._settle.fail_all(SystemClosed("the I/O thread crashed"))
        finally:
            self._flush_out()
            settle.flush_acks()

    # -- outbound -------------------------------------------------------

    def _flush_out(self) -> None:
        """Ship everything queued: each peer's records in batch frames, then replies and commands."""
        ship = self._wires.ship
        for node_id, records in self._outbox.take_records():
            ship(node_id, records)
        for item in self._outbox.take_items():
            if isinstance(item, Reply):
                self._send_reply(item)
            else:
                self._run_command(item)

    def _send_reply(self, reply: Reply) -> None:
        self._wires.send_reply(reply.node_id, reply.record)

    def _run_command(self, cmd: _Command) -> None:
        if isinstance(cmd, RootRequest):
            self._carry_out(self._role.own_request(cmd.correlation_id, cmd.message))
        elif isinstance(cmd, _Unregister):
            self._carry_out(self._role.unregister_own(cmd.name))
        elif isinstance(cmd, _Exiting):
            self._carry_out(self._role.exiting_own(sorted(self._local), list(self._known_peers)))
        elif isinstance(cmd, _ProcessExit):
            self._carry_out(self._role.process_exited(cmd.node_id, cmd.returncode, time.monotonic()))
        elif isinstance(cmd, _Refusal):
            self._refuse(cmd.peer, cmd.what)
        else:
            self._settle.rehome(cmd.sender, cmd.target, cmd.node_id)

    # -- inbound --------------------------------------------------------

    def _recv_router(self, sock: zmq.Socket) -> None:
        router_of, take = self._wires.router_of, self._incoming.frames
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
                self._settle.flush_acks()
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
        self._refuse(claimed, what)
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
            if self._left:
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
            source = self._root_id or ROOT_LINK if link.node_id == ROOT_LINK else link.node_id
            self._incoming.frames(source, frames, from_router=False)
            if not cast(int, sock.get(_EVENTS)) & _POLLIN:
                return

    def _on_node_message(self, source: str, envelope: Envelope, message: Message, from_router: bool) -> None:
        if isinstance(message, Hello):
            try:
                admitted = self._view.hello(message, source)
            except HelloRefused as exc:
                self._refuse(source, f"a hello: {exc}")
                self._send_node(source, Refused(reason=str(exc)))
                return
            if not admitted:
                self._log.warning("refused a peer whose identity does not match its hello", peer=source)
                return
            self._carry_out(self._role.admit(source, message, time.monotonic()))
            return
        if source not in self._known_peers and from_router:
            self._refuse(source, "a node message from a peer that did not say hello")
            return
        if envelope.is_reply:
            self._settle.resolve(envelope, message, source)
        elif isinstance(message, Ack):
            self._settle.acked(message, source, time.monotonic())
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
                self._refuse(effect.peer, effect.what)
            elif isinstance(effect, Take):
                self._incoming.records(effect.node, effect.pairs, from_router=True)
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
            self._join_error = JoinRefused(joined.error or "the root refused this process")
            self._joined.set()
            return
        assert self._member_role is not None
        self._notify_changed()
        if self._parking:
            self._incoming.unpark()
        if self._line_gate.held:
            self._release_lines()
        # Traffic to the root's actors shares the join connection: a second
        # DEALER with our identity would be refused by the root's ROUTER.
        self._wires.links[welcome.root_node_id] = self._wires.links[ROOT_LINK]
        self._beat_interval = welcome.heartbeat_interval
        self._staleness = welcome.staleness_timeout
        self._timing = self._sockets.timing = self._member_role.timing
        self._joined.set()

    def _answer(self, node_id: str, corr: int, message: Message) -> None:
        if node_id == self.node_id:
            self._settle.resolve(Envelope(sender=self.node_id, target=NODE, seq=0, correlation_id=corr, is_reply=True),
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
            self._incoming.unpark()
        if self._line_gate.held and update.nodes:
            self._release_lines()
        for name, node_id in changes.moved:
            for sender in self._outbound.senders_of(name):
                self._settle.rehome(sender, name, node_id)
        for name, reason, detail in changes.down:
            self._streams.forget_target(name)
            self._settle.target_down(name, reason, detail)
            self._on_down(name, reason, detail)
        wires = self._wires
        for node_id in changes.left:
            for _, envelope, _ in self._parking.drop(node_id):
                self._refuse(node_id, f"a message signed {envelope.sender!r}, a name never given by "
                                      f"the registry to that node (it left)")
            self._streams.forget(node_id)
            wires.router_of.pop(node_id, None)
            self._lines.drop(node_id)
            for identity in self._line_gate.forget(node_id):
                wires.router_of.pop(identity, None)
            wires.drop_link(node_id, keep_socket=node_id == self._root_id)

    def _refuse(self, peer: str, what: str) -> None:
        """Drop what ``peer`` sent: logged the first time per (peer, reason), counted after that."""
        key = (peer, what)
        self._refusals[key] += 1
        if self._refusals[key] == 1:
            self._log.warning("refused what a peer sent; further ones are counted, not logged",
                              peer=peer, what=what)
            self.note(f"refused from {peer}: {what}")
        self._carry_out(self._role.heard_from_refused(peer, time.monotonic()))

    def _refuse_any_thread(self, peer: str, what: str) -> None:
        """:meth:`_refuse` from any thread: what the root does about a refusal may send on a socket,
        so off the I/O thread it is handed to it (a user thread refusing a reply on its line)."""
        if threading.get_ident() == self._out.io_ident:
            self._refuse(peer, what)
        else:
            self._command(_Refusal(peer, what))

    def _expel(self, peer: str, why: str) -> None:
        """Disconnect ``peer`` for breaking the protocol: its hello is forgotten (all it sends is
        refused until it says hello again) and the root declares its node dead."""
        self._refuse(peer, f"disconnected: {why}")
        self._view.expel(peer)
        self._streams.forget(peer)
        self._carry_out(self._role.expel(peer, why))

    def refusals(self) -> dict[tuple[str, str], int]:
        """How often each (peer, reason) was refused since the node started."""
        return dict(self._refusals)

    def status(self, actors: list[ActorStatus], errors: list[str]) -> NodeStatus:
        """This node's :class:`NodeStatus` around ``actors`` (any thread; each count is read once, so
        the record is a snapshot of counters, not one instant)."""
        members = []
        if self._root_role is not None:
            members = [MemberStatus(node_id=info.node_id, host=info.host, pid=info.pid, liveness=liveness,
                                    actors=[n for n in names if not n.startswith(".")])
                       for info, liveness, names in self._root_role.registry.members(time.monotonic())]
        pairs = list(self._out_streams.values())
        return NodeStatus(
            node_id=self.node_id, host=self.host, pid=os.getpid(), is_root=self.is_root,
            started_ns=self._started_ns, wall_ns=time.time_ns(), actors=actors, members=members,
            pending_asks=len(self._asks), unacked=sum(p.sent - p.handled for p in pairs),
            peers=len(self._known_peers), refused=sum(self._refusals.values()), gaps=self._streams.gaps,
            errors=errors)

    # -- liveness -------------------------------------------------------

    def _beat(self, now: float) -> None:
        """The periodic work: liveness verdicts, parked messages, re-sends.  Nothing is sent to
        prove this process alive: libzmq's heartbeats do that, outside the GIL."""
        self._carry_out(self._role.check(now))
        if self._parking:
            self._incoming.unpark(now, self._staleness)
        if self._line_gate.held:
            self._carry_out(self._line_gate.expired(now, self._staleness))
        self._settle.retransmit(now, self.config.scaled(self.config.retransmit_after))
