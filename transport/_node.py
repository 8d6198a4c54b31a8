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
* The I/O thread's parts: ``IOLoop`` (transport/node/_loop.py) runs the loop,
  reads the clock and carries out effects; ``Wires`` (_wires.py) holds the
  sockets and sends on them, ``Incoming`` (_receive.py) takes what arrives
  record by record, ``Settlement`` (_settle.py) settles asks and streams and
  owes acks, and the roles (_root.py, _member.py) keep the node protocol.
  This module composes them and is the any-thread side: start, leave, close,
  names and status.
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
import os
import socket
import threading
import time
from collections.abc import Callable

import zmq

from actorwire.messages import Codec, Envelope, Message
from actorwire.messages.kinds import ActorStatus, MemberStatus, NodeStatus
from actorwire.messages.runtime import NodeInfo, Register
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
from actorwire.transport._errors import InvalidArgument, JoinRefused, SystemClosed, WaitTimeout
from actorwire.transport._lines import LINE_MARK, Lines
from actorwire.transport._liveness import Timing
from actorwire.transport._log import get_logger
from actorwire.transport._membership import Parking, View
from actorwire.transport._process import process_alive
from actorwire.transport._registry import HELD_BY_A_LIVE_NODE
from actorwire.transport._security import Security
from actorwire.transport._settings import settings
from actorwire.transport.node import MemberRole, RootRole
from actorwire.transport.node._line_gate import LineGate
from actorwire.transport.node._loop import Command, DownCallback, Exiting, IOLoop, ProcessExit, Refusal, Unregister
from actorwire.transport.node._outbound import Outbound
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._receive import DeliverMany
from actorwire.transport.node._rundir import RunDir
from actorwire.transport.node._send import Deliver, Outgoing
from actorwire.transport.node._sockets import SocketFactory, signal, wake_pipe
from actorwire.transport.node._wires import Wires

_JOIN_NEWS_EVERY = 10.0  # a join that waits says so this often
_ACK_EVERY = 512  # handled messages that trigger an ack flush at once
_ACK_DELAY = 0.002  # otherwise acks leave within 2 ms


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
        self._codec = Codec(max_message_size=self.config.max_message_size, from_peers=True)
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
        beat, staleness = self.config.scaled(self.config.heartbeat_interval), self.config.scaled(self.config.staleness_timeout)
        timing = Timing.of(beat, staleness)
        self._sockets = SocketFactory(zmq.Context(), frame_cap=self.config.max_message_size + 64, timing=timing)
        #: The sockets and what is sent on them (transport/node/_wires.py): only the I/O thread's.
        self._wires = wires = Wires(node_id=self.node_id, host=self.host, codec=self._codec, security=self._security,
                                    factory=self._sockets, max_message_size=self.config.max_message_size,
                                    bind_tcp=bind_tcp, watch_links=self.is_root, prefer_tcp=settings().prefer_tcp,
                                    log=self._log)
        self._run_dir = RunDir(run_id, self.node_id)
        endpoints = [self._run_dir.endpoint, *wires.tcp_endpoints]
        self._run_dir.bind(wires.router)
        public = self._security.public.decode() if self._security.curve and self._security.public else None
        self.info = NodeInfo(node_id=self.node_id, endpoints=endpoints, host=self.host, pid=os.getpid(),
                             curve_key=public if bind_tcp is not None else None, window=self.config.window)
        self.root_endpoint = root_endpoint or next((e for e in endpoints if is_tcp(e)), endpoints[0])

        # Routing state.  Written by the I/O thread; read by sending threads
        # (dict reads are atomic under the GIL).
        self._view = View(self.info, run_id=run_id, is_root=self.is_root)
        self._routes = self._view.routes  # actor name -> node_id
        wires.meet(self.info, run_id, self._view.nodes)
        self._local: dict[str, Deliver] = {}
        self._bulk: dict[str, DeliverMany] = {}
        #: The root's half of the node protocol (the registry's keeper); None on a member.
        self._root_role: RootRole | None = (
            RootRole(self.info, run_id=run_id, timing=timing, now=time.monotonic(), heartbeat_interval=beat,
                     staleness_timeout=staleness, process_alive=process_alive)
            if self.is_root else None
        )
        #: A member's half of the node protocol (its join, its root's liveness); None on the root.
        self._member_role: MemberRole | None = (
            None if self.is_root else
            MemberRole(self._view, timing=timing, host=self.host, root_endpoint=self.root_endpoint,
                       process_alive=process_alive))

        # Sending.
        self._outbound = Outbound(self.config.window)
        self._asks = Asks()
        # User threads' own sockets for the asks they wait on (see _lines).
        self._lines = Lines(self.node_id, wires.connect_line)
        # The receiving side: the lines admitted here, held, and the lines replies go back on.
        self._line_gate = LineGate(self.node_id, self._view, self._codec, is_root=self.is_root)
        # Inbound streams are keyed by the sending node (one incarnation of a process), the sender
        # name and the target: a restarted process under a reused name starts fresh streams.
        self._streams = InStreams(self.config.window)
        self._notes: collections.deque[str] = collections.deque(maxlen=32)  # recent errors, for status

        # The I/O thread and its wake-up.
        self._wake_r, self._wake_w = wake_pipe()
        #: What threads hand the I/O thread (records, replies, commands, acks owed) and its sleep.
        self._outbox = Outbox(self._wake, ack_every=_ACK_EVERY, ack_delay=_ACK_DELAY)
        self._closed = False
        #: Notified by the I/O thread when what a caller may wait for changed: the routes (a name
        #: registered, moved or gone), a stream re-homed, and, while closing, an ack.  The waits
        #: (``Outgoing.wait_until``) are on it with deadlines, never polls.
        self._changed = threading.Condition()
        #: The I/O thread's work (transport/node/_loop.py): what arrives, the effects, the settling.
        self._loop = loop = IOLoop(
            node_id=self.node_id, config=self.config, codec=self._codec, log=self._log, view=self._view,
            wires=wires, sockets=self._sockets, timing=timing, outbox=self._outbox, outbound=self._outbound,
            asks=self._asks, streams=self._streams, parking=Parking(self.config.window), lines=self._lines,
            line_gate=self._line_gate, local=self._local, bulk=self._bulk, root_role=self._root_role,
            member_role=self._member_role, wake_r=self._wake_r, on_down=on_down or (lambda name, reason, detail: None),
            changed=self._notify_changed, closing=self._closing, note=self.note,
            # Outgoing (below) needs the loop's parts; its reply is looked up when an error reply is due.
            reply=lambda target, envelope, source, message: self.reply(target, envelope, source, message))
        self._settle = settle = loop.settle
        #: Set when the root is gone (exited or unreachable): a member node is headless.
        self.root_gone = loop.root_gone
        #: The any-thread send, ask and reply paths; its methods are the node's own (bound below:
        #: a delegating method would cost every send a Python call).
        self._out = Outgoing(self.node_id, self.config, self._codec, self._view, self._local, self._outbound,
                             self._outbox, self._asks, self._lines, self._line_gate, changed=self._changed,
                             log=self._log, resolve=settle.resolve, send_reply=loop.send_reply,
                             answerer=settle.answerer, refuse=self._refuse_any_thread)
        out = self._out
        self.send, self.send_record, self.ask, self.ask_and_wait = out.send, out.send_record, out.ask, out.ask_and_wait
        self.reply, self.handled, self.handled_many = out.reply, out.handled, out.handled_many
        self.next_seq, self.last_seq, self.lookup = out.next_seq, out.last_seq, out.lookup
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
            self._loop.joined.set()
            return
        limit = self.config.scaled(timeout)
        deadline = time.monotonic() + limit
        while not self._loop.joined.wait(min(_JOIN_NEWS_EVERY, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self.close()
                raise WaitTimeout(f"no answer from the root at {self.root_endpoint} within {limit:g} s")
            self._log.warning("no answer from the root yet; still trying", root=self.root_endpoint,
                              waited_s=round(limit - (deadline - time.monotonic())), limit_s=limit)
        if self._loop.join_error is not None:
            self.close()
            raise self._loop.join_error

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
        if self._closed or self._loop.left:
            return
        self._loop.left = True
        self._out.closing = True
        if not self._thread.is_alive():
            return
        if self._root_id is not None:
            self._command(Exiting())
        self._out.wait_until(lambda: not self._outbound.unacked(), self.config.scaled(timeout))
        left = self._outbound.unacked()
        if left:
            self._log.error("closing with unhandled messages", count=left)
        role = self._root_role
        if role is not None:
            # Members leave when they hear the root leave: their last messages and hang-ups come
            # while its sockets are open (the libzmq abort of decision 0015's "Later"), for at most
            # the liveness grace (what a member that outlives its root costs the root's exit).
            self._out.wait_until(lambda: not role.up, self._loop.timing.grace)

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
            self._loop.stop.set()
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
                self._changed.wait(min(0.1, self._loop.staleness / 10))

    def remove_local(self, name: str) -> None:
        """Actor ``name`` stopped cleanly: watchers get ``Down(exited)``."""
        self._bulk.pop(name, None)
        if self._local.pop(name, None) is not None and not self._closed:
            self._command(Unregister(name))



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
        self._command(ProcessExit(node_id, returncode))

    # ------------------------------------------------------------------
    # Sending (any thread): the paths are Outgoing's (transport/node/_send.py), bound in __init__
    # ------------------------------------------------------------------

    def _command(self, cmd: Command) -> None:
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
        try:
            self._loop.run()
        except Exception:
            self._log.exception("I/O thread crashed; the node is going down")
            self._out.closing = True
            self._settle.fail_all(SystemClosed("the I/O thread crashed"))
        finally:
            self._loop.flush()

    def _refuse_any_thread(self, peer: str, what: str) -> None:
        """The loop's ``refuse`` from any thread: what the root does about a refusal may send on a
        socket, so off the I/O thread it is handed to it (a user thread refusing a reply on its line)."""
        if threading.get_ident() == self._out.io_ident:
            self._loop.refuse(peer, what)
        else:
            self._command(Refusal(peer, what))

    def refusals(self) -> dict[tuple[str, str], int]:
        """How often each (peer, reason) was refused since the node started."""
        return dict(self._loop.refusals)

    def status(self, actors: list[ActorStatus], errors: list[str]) -> NodeStatus:
        """This node's :class:`NodeStatus` around ``actors`` (any thread; each count is read once, so
        the record is a snapshot of counters, not one instant)."""
        members = []
        if self._root_role is not None:
            members = [MemberStatus(node_id=info.node_id, host=info.host, pid=info.pid, liveness=liveness,
                                    actors=[n for n in names if not n.startswith(".")])
                       for info, liveness, names in self._root_role.registry.members(time.monotonic())]
        pairs = list(self._outbound.streams.values())
        return NodeStatus(
            node_id=self.node_id, host=self.host, pid=os.getpid(), is_root=self.is_root,
            started_ns=self._started_ns, wall_ns=time.time_ns(), actors=actors, members=members,
            pending_asks=len(self._asks), unacked=sum(p.sent - p.handled for p in pairs),
            peers=len(self._view.peers), refused=sum(self._loop.refusals.values()), gaps=self._streams.gaps,
            errors=errors)
