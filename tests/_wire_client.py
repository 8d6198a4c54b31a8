"""A peer written from docs/wire-protocol.md alone: pyzmq and msgpack-python, no actorwire import.

It proves the page is enough to write a client from, and it is the peer that
lies in the attack tests: every field it sends is the caller's to choose.

    client = WireClient("ipc:///...", run_id)       # DEALER to the root, ROUTER of its own
    client.hello()                                 # -> the welcome's body
    client.register(["client/1"])                  # -> the registry update that answers it
    client.tell("client/1", "echo", {"type": "sync_now"})
    client.ask("client/1", "echo", {"type": "sync_now"})   # -> the reply's body
    client.receive()                               # a tell the system sent us (acked for us)
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from typing import Any

import msgpack
import zmq

PROTOCOL_VERSION = 1
NODE = ""  # the target of node-level messages


def envelope(sender: str, target: str, seq: int, correlation_id: int = 0, is_reply: bool = False) -> list[Any]:
    return [PROTOCOL_VERSION, sender, target, seq, correlation_id, is_reply, time.monotonic_ns(), time.time_ns(), None]


def batch(*records: tuple[list[Any], dict[str, Any]]) -> bytes:
    """One batch frame: a msgpack array of ``[envelope, body]`` pairs."""
    return msgpack.packb([[env, body] for env, body in records])


class WireClient:
    """One node of an actorwire system, by hand.

    ``curve`` is ``(server_public, client_public, client_secret)`` as z85 bytes
    for a tcp root; the client's own ROUTER then listens on loopback tcp as a
    CURVE server with the same key pair.
    """

    def __init__(self, root: str, run_id: str, *, node_id: str | None = None,
                 curve: tuple[bytes, bytes, bytes] | None = None, run_dir: str | None = None,
                 allow: str | None = None) -> None:
        self.run_id = run_id
        self.node_id = node_id or f"wire-{uuid.uuid4().hex[:8]}"
        self.ctx = zmq.Context()
        self.curve = curve
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.setsockopt(zmq.IDENTITY, self.node_id.encode())  # must equal the hello's node id
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        if curve is not None:
            server, public, secret = curve
            for sock in (self.dealer,):
                sock.setsockopt(zmq.CURVE_SERVERKEY, server)
                sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
                sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
            if allow is not None:  # our tcp ROUTER admits only the run's keys (ZAP: pyzmq's authenticator)
                from zmq.auth.thread import ThreadAuthenticator

                self.auth: Any = ThreadAuthenticator(self.ctx)
                self.auth.start()
                self.auth.configure_curve(domain="*", location=allow)
            self.router.setsockopt(zmq.CURVE_SERVER, 1)
            self.router.setsockopt(zmq.CURVE_PUBLICKEY, public)
            self.router.setsockopt(zmq.CURVE_SECRETKEY, secret)
            self.router.bind("tcp://127.0.0.1:0")
        else:
            self._dir = tempfile.TemporaryDirectory(prefix="wire-client-", dir=run_dir)
            self.router.bind(f"ipc://{self._dir.name}/router")
        self.endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.dealer.connect(root)
        self.seq: dict[tuple[str, str], int] = {}  # per stream (sender, target): 1, 2, 3, ...
        self.corr = 0
        self.received: dict[tuple[str, str, str], int] = {}  # (peer node, sender, target) -> last seq
        self.peers: set[bytes] = set()  # router identities that said hello
        self.inbox: list[tuple[bytes, list[Any], dict[str, Any]]] = []
        self.replies: dict[int, tuple[list[Any], dict[str, Any]]] = {}
        self.own_seq: dict[str, int] = {}  # per sender: the counter of messages outside the streams (replies)
        self.node_messages: list[tuple[list[Any], dict[str, Any]]] = []

    def close(self) -> None:
        if getattr(self, "auth", None) is not None:
            self.auth.stop()
        self.ctx.destroy(linger=0)
        if self._dir is not None:
            self._dir.cleanup()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ----------------------------------------------------------

    def node_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"node_id": self.node_id, "endpoints": [self.endpoint], "host": socket.gethostname(),
                                "pid": os.getpid()}
        if self.curve is not None:
            info["curve_key"] = self.curve[1].decode()
        return info

    def send_frames(self, frames: list[bytes]) -> None:
        self.dealer.send_multipart(frames)

    def send(self, *records: tuple[list[Any], dict[str, Any]]) -> None:
        self.dealer.send(batch(*records))

    def link(self, endpoint: str) -> zmq.Socket:
        """A DEALER to another node (not the root), opened with our hello: send batches on it."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, self.node_id.encode())
        sock.connect(endpoint)
        body = {"type": "hello", "protocol_version": PROTOCOL_VERSION, "run_id": self.run_id,
                "node": self.node_info()}
        sock.send_multipart([msgpack.packb(envelope(self.node_id, NODE, 0)), msgpack.packb(body)])
        return sock

    def line(self, endpoint: str, number: int = 1, *, hello_as: str | None = None) -> zmq.Socket:
        """A line to the node at ``endpoint``: a DEALER whose identity is our node id, the byte 0x1f and
        ``number``, opened with our hello (``hello_as`` names another node in it).  Asks go out on it
        as batches, and their replies come back on it."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, f"{self.node_id}\x1f{number}".encode())
        sock.connect(endpoint)
        info = {**self.node_info(), "node_id": hello_as or self.node_id}
        body = {"type": "hello", "protocol_version": PROTOCOL_VERSION, "run_id": self.run_id, "node": info}
        sock.send_multipart([msgpack.packb(envelope(self.node_id, NODE, 0)), msgpack.packb(body)])
        return sock

    def line_ask(self, line: zmq.Socket, sender: str, target: str, body: dict[str, Any],
                 timeout: float = 10.0) -> dict[str, Any]:
        """An ask on ``line``; the reply's body, read from the line."""
        self.corr += 1
        corr = self.corr
        line.send(batch((envelope(sender, target, self.next_seq(sender, target), corr), body)))
        if not line.poll(int(timeout * 1000)):
            raise TimeoutError(f"no reply to correlation id {corr} on the line within {timeout} s")
        for env, reply in msgpack.unpackb(line.recv()):
            if env[5] and env[4] == corr:
                return reply
        raise AssertionError("the line answered something else")

    def next_seq(self, sender: str, target: str) -> int:
        key = (sender, target)
        self.seq[key] = self.seq.get(key, 0) + 1
        return self.seq[key]

    def hello(self, run_id: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        """Say hello to the root; the answer's body (``welcome`` or ``refused``)."""
        body = {"type": "hello", "protocol_version": PROTOCOL_VERSION, "run_id": run_id or self.run_id,
                "node": self.node_info()}
        self.dealer.send_multipart([msgpack.packb(envelope(self.node_id, NODE, 0)), msgpack.packb(body)])
        return self.wait_node(lambda env, b: b["type"] in ("welcome", "refused"), timeout)[1]

    def request(self, body: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """A node-level request to the root (register, unregister); the reply's body."""
        self.corr += 1
        corr = self.corr
        self.send((envelope(self.node_id, NODE, 0, corr), body))
        return self.wait_reply(corr, timeout)[1]

    def register(self, names: list[str], takeover: bool = False) -> dict[str, Any]:
        return self.request({"type": "register", "names": names, "takeover": takeover})

    def tell(self, sender: str, target: str, body: dict[str, Any], *, seq: int | None = None) -> int:
        seq = self.next_seq(sender, target) if seq is None else seq
        self.send((envelope(sender, target, seq), body))
        return seq

    def ask(self, sender: str, target: str, body: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        self.corr += 1
        corr = self.corr
        self.send((envelope(sender, target, self.next_seq(sender, target), corr), body))
        return self.wait_reply(corr, timeout)[1]

    def beat(self) -> None:
        self.send((envelope(self.node_id, NODE, 0), {"type": "node_heartbeat", "node_id": self.node_id}))

    # -- receiving --------------------------------------------------------

    def pump(self, timeout: float) -> None:
        """Read what arrives within ``timeout`` s on both sockets; ack every tell received."""
        poller = zmq.Poller()
        poller.register(self.dealer, zmq.POLLIN)
        poller.register(self.router, zmq.POLLIN)
        for sock, _ in poller.poll(int(timeout * 1000)):
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                peer = b""
                if sock is self.router:
                    peer, frames = frames[0], frames[1:]
                self._on_frames(peer, frames)

    def _on_frames(self, peer: bytes, frames: list[bytes]) -> None:
        if len(frames) == 2:
            records = [[msgpack.unpackb(frames[0]), msgpack.unpackb(frames[1])]]
        else:
            records = msgpack.unpackb(frames[0])
        acks: list[list[Any]] = []
        for env, body in records:
            target, correlation_id, is_reply = env[2], env[4], env[5]
            if target == NODE:
                if body["type"] == "hello" and body.get("run_id") == self.run_id:
                    self.peers.add(peer)
                elif is_reply:
                    self.replies[correlation_id] = (env, body)
                else:
                    self.node_messages.append((env, body))
            elif is_reply:
                self.replies[correlation_id] = (env, body)
            else:
                self.inbox.append((peer, env, body))
                # Handled at once: ack [sender, target, received, handled] back on that connection.
                acks.append([env[1], target, env[3], env[3]])
        if acks:
            ack = batch((envelope(self.node_id, NODE, 0), {"type": "ack", "entries": acks}))
            if peer:
                self.router.send_multipart([peer, ack])
            else:
                self.dealer.send(ack)

    def wait_reply(self, corr: int, timeout: float) -> tuple[list[Any], dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while corr not in self.replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to correlation id {corr} within {timeout} s")
            self.pump(min(left, 0.1))
        return self.replies.pop(corr)

    def wait_node(self, match: Any, timeout: float) -> tuple[list[Any], dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            for i, (env, body) in enumerate(self.node_messages):
                if match(env, body):
                    return self.node_messages.pop(i)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching node message within {timeout} s")
            self.pump(min(left, 0.1))

    def receive(self, timeout: float = 10.0) -> tuple[list[Any], dict[str, Any]]:
        """The next tell (or ask) for one of our actors: (envelope, body)."""
        deadline = time.monotonic() + timeout
        while not self.inbox:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no tell within {timeout} s")
            self.pump(min(left, 0.1))
            self.beat()
        peer, env, body = self.inbox.pop(0)
        self.last_peer = peer
        return env, body

    def reply(self, ask: list[Any], body: dict[str, Any]) -> None:
        """Answer the ask whose envelope is ``ask`` (the last one received), as the page says:
        ``is_reply``, the ask's correlation id, our own counter (outside the streams) for ``seq``,
        on the connection the ask came in on."""
        sender = ask[2]
        self.own_seq[sender] = self.own_seq.get(sender, 0) + 1
        frame = batch((envelope(sender, ask[1], self.own_seq[sender], ask[4], True), body))
        if self.last_peer:
            self.router.send_multipart([self.last_peer, frame])
        else:
            self.dealer.send(frame)
