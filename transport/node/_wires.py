"""The node's sockets and what is sent on them: its routers, its links to peers, the root's link.

A node binds one ROUTER on ipc (its run directory's socket) and, with a tcp address, a second one
(CURVE is per socket; ipc needs none) with the ZAP responder and the handshake monitor that CURVE
brings.  It reaches a peer through a :class:`~.node._sockets.Link` (a DEALER with this node's
identity), a member reaches its root through the link it joined on, and a user thread waiting on an
ask through a line of its own.  Replies to what arrived on a router go back on the router it came
in on.

:class:`Wires` holds them all.  It decides nothing: the driver (:class:`actorwire.transport._node.Node`)
says what to ship where, and reads what arrives.  Only the I/O thread uses it once the node started
(the constructor's connects come before ``Thread.start``, the memory barrier ZeroMQ asks for); a
line's socket is made by the thread that will own it.
"""

from __future__ import annotations

import time
from typing import Any, cast

import zmq

from actorwire.messages import PROTOCOL_VERSION, Codec, Envelope, Message
from actorwire.messages.runtime import Hello, NodeInfo
from actorwire.transport._endpoints import is_tcp, pick_endpoint
from actorwire.transport._errors import ConfigError
from actorwire.transport._lines import LINE_MARK
from actorwire.transport._liveness import EVENTS as _WATCHED
from actorwire.transport._security import ZAP_ENDPOINT, Security
from actorwire.transport.node._member import ROOT_LINK
from actorwire.transport.node._sockets import Link, SocketFactory

NODE = ""  # envelope target of node-level messages
_NOBLOCK = int(zmq.NOBLOCK)  # a plain int: pyzmq's enum arithmetic showed up in profiles
_SNDMORE = int(zmq.SNDMORE)
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_BATCH_RECORDS = 1024  # most messages in one batch frame
_BATCH_BYTES = 1 << 20  # and at most this many bytes (never above the size cap)
_LINE_SLICE_MS = 20  # a thread waiting on its line looks at its ask's outcome this often


class Wires:
    """One node's sockets.  ``bind_tcp`` adds the tcp router (with CURVE when ``security`` has keys);
    ``watch_links``: this is the root, which judges a member by the connection it opened to it.

    After the node's identity is known (it names these endpoints), :meth:`meet` gives the hello this
    node says on every connection it opens and the view's table of the nodes it may open one to.
    """

    def __init__(self, *, node_id: str, host: str, codec: Codec, security: Security, factory: SocketFactory,
                 max_message_size: int, bind_tcp: str | None, watch_links: bool, prefer_tcp: bool,
                 log: Any) -> None:
        self.node_id = node_id
        self.host = host
        self.factory = factory
        self._codec = codec
        self._security = security
        self._log = log
        self._prefer_tcp = prefer_tcp
        self._watch_links = watch_links
        self._ship_limit = min(_BATCH_BYTES, max_message_size)
        self.router = factory.router()
        # tcp gets a ROUTER of its own: CURVE is per socket, and ipc needs none.
        self.tcp_router: zmq.Socket | None = None
        self.zap: zmq.Socket | None = None
        self.monitor: zmq.Socket | None = None
        # The root link's handshake over tcp: a refused key is told to the user, not waited out.
        self.root_monitor: zmq.Socket | None = None
        #: The router a peer's connection arrived on (replies go back the same way).
        self.router_of: dict[str, zmq.Socket] = {}
        self.links: dict[str, Link] = {}
        self.watched: dict[zmq.Socket, Link] = {}  # the root's monitors of its links, to their links
        self.poller: zmq.Poller | None = None  # the I/O thread's, once it runs
        self.nodes: dict[str, NodeInfo] = {}  # the view's table (see meet)
        self._hello: Hello | None = None
        self.tcp_endpoints: list[str] = []  # the tcp router's, once bound (the ipc one is the run dir's)
        if bind_tcp is not None:
            if security.curve:
                self.zap = factory.context.socket(zmq.REP)
                self.zap.setsockopt(zmq.LINGER, 0)
                self.zap.bind(ZAP_ENDPOINT)
            self.tcp_router = factory.router()
            security.serve(self.tcp_router)
            try:
                self.tcp_router.bind(bind_tcp)
            except zmq.ZMQError as exc:
                self.close()
                raise ConfigError(f"cannot bind {bind_tcp}: {exc}") from None
            self.tcp_endpoints.append(self.tcp_router.getsockopt_string(zmq.LAST_ENDPOINT))
            if security.curve:
                self.monitor = self.tcp_router.get_monitor_socket(
                    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_AUTH)

    def meet(self, info: NodeInfo, run_id: str, nodes: dict[str, NodeInfo]) -> None:
        """This node's hello (``info`` in run ``run_id``) and the table of nodes links go to."""
        self._hello = Hello(protocol_version=PROTOCOL_VERSION, run_id=run_id, node=info)
        self.nodes = nodes

    def watch(self, wake_r: int) -> zmq.Poller:
        """The I/O thread's poller: both routers, the ZAP and monitors, the wake-up pipe, the links."""
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        for extra in (self.tcp_router, self.zap, self.monitor, self.root_monitor):
            if extra is not None:
                poller.register(extra, zmq.POLLIN)
        poller.register(wake_r, zmq.POLLIN)
        root = self.links.get(ROOT_LINK)
        if root is not None:
            poller.register(root.socket, zmq.POLLIN)
        for monitor in self.watched:
            poller.register(monitor, zmq.POLLIN)
        self.poller = poller
        return poller

    def close(self) -> None:
        """Close every socket and end the context (after the I/O thread left its poll)."""
        for link in {id(lk): lk for lk in self.links.values()}.values():
            if link.node_id != ROOT_LINK:
                link.close()
        root_link = self.links.get(ROOT_LINK)
        if root_link is not None and self.root_monitor is not None:
            try:
                root_link.socket.disable_monitor()
            except zmq.ZMQError:
                pass
        if root_link is not None:
            root_link.socket.close(linger=0)
        if self.tcp_router is not None and self.monitor is not None:
            try:
                self.tcp_router.disable_monitor()
            except zmq.ZMQError:
                pass
        for sock in (self.router, self.tcp_router, self.zap, self.monitor, self.root_monitor):
            if sock is not None:
                sock.close(linger=0)
        self.factory.context.term()

    # -- sending ----------------------------------------------------------

    def ship(self, node_id: str, records: list[bytes]) -> None:
        """``records`` to ``node_id`` in order, as batch frames within the record and byte bounds."""
        limit = self._ship_limit
        for start in range(0, len(records), _BATCH_RECORDS):
            chunk = records[start:start + _BATCH_RECORDS]
            if sum(map(len, chunk)) <= limit:
                self.send_link(node_id, chunk)
            else:
                self._ship_by_size(node_id, chunk, limit)

    def _ship_by_size(self, node_id: str, records: list[bytes], limit: int) -> None:
        batch: list[bytes] = []
        size = 0
        for record in records:
            if batch and (len(batch) >= _BATCH_RECORDS or size + len(record) > limit):
                self.send_link(node_id, batch)
                batch, size = [], 0
            batch.append(record)
            size += len(record)
        if batch:
            self.send_link(node_id, batch)

    def send_link(self, node_id: str | None, records: list[bytes]) -> None:
        link = self.links.get(node_id) if node_id else None
        if link is None:
            link = self.open_link(node_id) if node_id is not None and node_id in self.nodes else None
        if link is None:
            # The node left while the batch waited; the pairs' unacked copies
            # are failed by the removal, so nothing is lost without a report.
            return
        try:  # copy=False would cost pyzmq a GC thread hand-off
            link.socket.send(self._codec.join_records(records), zmq.DONTWAIT)
        except zmq.Again:
            # No connection right now (a handshake failed or is being redone): the I/O thread
            # must never block.  The pairs keep these records unacknowledged and retransmit them.
            self._log.debug("no connection to the peer; records wait for retransmission", peer=node_id,
                            count=len(records))

    def send_router(self, node_id: str, frames: list[bytes]) -> bool:
        """Send to the connection that says ``node_id``; False when it is not connected."""
        sock = self.router_of.get(node_id, self.router)
        try:
            # Frame by frame with int flags: pyzmq's send_multipart does enum arithmetic per frame
            # (a profile of bench bus's asks: 7.6 against 3.6 us for a two-frame message and its read).
            sock.send(node_id.encode(), _SNDMORE)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self._log.debug("peer not connected; dropped a node-level frame", peer=node_id)
            return False
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            sock.send(frame, _SNDMORE if i < last else 0)
        return True

    def send_reply(self, node_id: str, record: bytes) -> None:
        """A reply record to the connection ``node_id`` (a line, or a node); a line that closed: to
        the asker's node, which resolves it."""
        frame = self._codec.join_records([record])
        if not self.send_router(node_id, [frame]):
            node = node_id.partition(LINE_MARK)[0]
            if node != node_id:
                self.send_router(node, [frame])

    def node_record(self, message: Message, correlation_id: int = 0, is_reply: bool = False) -> bytes:
        envelope = Envelope(sender=self.node_id, target=NODE, seq=0, correlation_id=correlation_id,
                            is_reply=is_reply, mono_ns=time.monotonic_ns(), wall_ns=time.time_ns())
        return self._codec.encode_record(envelope, message)

    def send_node(self, node_id: str, message: Message, *, correlation_id: int = 0, is_reply: bool = False,
                  via_router: bool = True) -> None:
        record = self.node_record(message, correlation_id, is_reply)
        if via_router:
            self.send_router(node_id, [self._codec.join_records([record])])
        else:
            self.send_link(node_id, [record])

    def to_root(self, message: Message, correlation_id: int = 0) -> None:
        """A node message on a member's link to its root (nothing on the root, which has none)."""
        link = self.links.get(ROOT_LINK)
        if link is None:
            return
        envelope = Envelope(sender=self.node_id, target=NODE, seq=0, correlation_id=correlation_id)
        try:
            link.socket.send(self._codec.join_records([self._codec.encode_record(envelope, message)]),
                             zmq.DONTWAIT)
        except zmq.Again:  # not connected (yet, or refused): node messages are periodic or re-asked
            self._log.debug("no connection to the root; node message dropped", kind=type(message).wire_tag())

    # -- connections --------------------------------------------------------

    def open_link(self, node_id: str) -> Link:
        info = self.nodes[node_id]
        endpoint = pick_endpoint(info.endpoints, info.host, self.host, prefer_tcp=self._prefer_tcp)
        sock = self.factory.make(zmq.DEALER, identity=self.node_id)
        if is_tcp(endpoint):
            self._security.client(sock, info.curve_key, node_id)
        # The root judges a member by this connection: libzmq's heartbeats keep it while the member's
        # Python is busy, and drop it when the member stops, dies or is cut off.
        monitor = sock.get_monitor_socket(_WATCHED) if self._watch_links else None
        sock.connect(endpoint)
        link = Link(node_id, sock, endpoint, monitor)
        self.links[node_id] = link
        self.say_hello(sock)
        poller = self.poller
        if poller is not None:
            poller.register(sock, zmq.POLLIN)
        if monitor is not None:
            self.watched[monitor] = link
            if poller is not None:
                poller.register(monitor, zmq.POLLIN)
        return link

    def drop_link(self, node_id: str, *, keep_socket: bool) -> None:
        """Forget the link to ``node_id`` (it left); ``keep_socket``: it is the root's, which this
        member's join connection also is, so it stays open."""
        link = self.links.pop(node_id, None)
        if link is None or keep_socket:
            return
        if self.poller is not None:
            self.poller.unregister(link.socket)
        if link.monitor is not None:
            if self.poller is not None:
                self.poller.unregister(link.monitor)
            self.watched.pop(link.monitor, None)
        link.close()

    def connect_line(self, node_id: str, identity: str) -> zmq.Socket:
        """A new line's socket (made by the thread that will own it): connected, its hello sent."""
        info = self.nodes[node_id]
        endpoint = pick_endpoint(info.endpoints, info.host, self.host, prefer_tcp=self._prefer_tcp)
        # RCVTIMEO: the waiting thread looks at its ask this often.  No heartbeats of its own: the
        # node's connection is the one the peer judges it by.
        sock = self.factory.make(zmq.DEALER, identity=identity, heartbeats=False, RCVTIMEO=_LINE_SLICE_MS)
        if is_tcp(endpoint):
            self._security.client(sock, info.curve_key, node_id)
        sock.connect(endpoint)
        self.say_hello(sock)
        return sock

    def connect_root(self, root_endpoint: str) -> None:
        """A member's link to its root (before the I/O thread starts; a bad endpoint raises here)."""
        # A root not up yet: retries back off to 2 s.
        sock = self.factory.make(zmq.DEALER, identity=self.node_id, RECONNECT_IVL_MAX=2000)
        events = _WATCHED
        if is_tcp(root_endpoint):
            self._security.client(sock, self._security.root_key, "the root")
            events |= (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                       | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
        # A member judges the root by this connection (and, over tcp, learns of a refused handshake).
        self.root_monitor = sock.get_monitor_socket(events)
        try:
            sock.connect(root_endpoint)
        except zmq.ZMQError:
            sock.close(linger=0)
            raise
        self.links[ROOT_LINK] = Link(ROOT_LINK, sock, root_endpoint)
        self.say_hello(sock)

    def say_hello(self, sock: zmq.Socket) -> bool:
        """Queue the hello on a DEALER that was just connected; never wait.

        connect() makes the socket's pipe at once, so the hello only finds none when the peer already
        refused the connection (a CURVE key it does not allow tore the pipe down): nothing sent there
        would be taken, and the refusal reaches the user through the socket's monitor.  A blocking send
        waited for a pipe that never came (a join hung 120 s in a test run beside other load)."""
        assert self._hello is not None, "meet() first"
        envelope = Envelope(sender=self.node_id, target=NODE, seq=0)
        try:
            sock.send(self._codec.encode_envelope(envelope), _SNDMORE | _NOBLOCK)
        except zmq.Again:
            self._log.debug("no connection to say hello on: the peer refused it")
            return False
        sock.send(self._codec.encode_message(self._hello), _NOBLOCK)  # the rest of a message never waits
        return True

    # -- reading --------------------------------------------------------------

    def routers_readable(self) -> bool:
        """Whether a router holds a message not read yet (a member's last ones before it closed)."""
        return any(sock is not None and cast(int, sock.get(_EVENTS)) & _POLLIN
                   for sock in (self.router, self.tcp_router))

    def serve_zap(self) -> None:
        """Answer the CURVE handshake's ZAP request: is the peer's key on the allow-list?"""
        assert self.zap is not None
        try:
            frames = self.zap.recv_multipart(_NOBLOCK)
        except zmq.Again:
            return
        self.zap.send_multipart(self._security.answer_zap(frames, self._log))

    def on_monitor(self) -> None:
        """A peer failed the tcp router's CURVE handshake: said in the log (libzmq says no more)."""
        from zmq.utils.monitor import recv_monitor_message

        assert self.monitor is not None
        try:
            event = recv_monitor_message(self.monitor, _NOBLOCK)
        except zmq.Again:
            return
        endpoint = event.get("endpoint")
        self._log.warning("a peer failed the CURVE handshake (no key, a wrong server key, or plain text)",
                          endpoint=endpoint.decode(errors="replace") if isinstance(endpoint, bytes) else endpoint,
                          zmq_event=str(event.get("event")))
