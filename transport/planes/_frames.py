"""The frames plane: tensors fetched over a ZeroMQ socket, for peers without shared memory.

The exporter registers each tensor's own bytes (a contiguous CPU tensor is
not copied; anything else is made contiguous on the CPU first) and keeps the
tensor alive until the export is released; a small server thread answers
fetches from its own ROUTER socket: ``[key, offset, nbytes]`` in, one frame
of the bytes out.  Above ``ZERO_COPY_BYTES`` the reply is sent with
``copy=False`` (ZeroMQ reads the tensor in place) and the importer builds its
view straight on the received frame, so a fetch costs the network copy and
nothing else.

The server's socket is the plane's, not the bus's: bulk bytes never queue
behind control messages.  On one host it listens on a private ipc endpoint;
on tcp it follows the bus's rules (CURVE with the keys of ``ACTORWIRE_KEYS``,
its public key travelling in the handle; plain text only on loopback with
``ACTORWIRE_INSECURE_TCP=1``).  Over CURVE the server admits only the keys
of the node's allow-list: it runs on a ZeroMQ context of its own with its
own ZAP handler (a context without one lets every key in).  A buffer's key is
16 random bytes, so holding a handle is the only way to name a buffer; the
server serves only keys that are currently exported, and anything else gets
an error frame, never a hang.
"""

from __future__ import annotations

import pathlib
import secrets
import struct
import threading
import warnings
from typing import Any

import msgspec
import zmq

from actorwire.messages.kinds import Plane, TensorRef
from actorwire.transport._endpoints import is_tcp, tcp_host, user_dir
from actorwire.transport._errors import BadHandle, WaitTimeout
from actorwire.transport._log import get_logger
from actorwire.transport._security import ZAP_ENDPOINT, Security, SecurityError
from actorwire.transport.planes._layout import packed_refs

ZERO_COPY_BYTES = 64 * 1024
_log = get_logger(plane="frames")
_REQ = struct.Struct("<16sQQ")  # key, offset, nbytes
KEY_BYTES = 16  # 128 random bits: a key cannot be guessed, only handed over
_OK, _ERR = b"\x00", b"\x01"


class FramesServer:
    """Serves registered CPU buffers to remote importers from one thread."""

    def __init__(self, endpoint: str | None = None, *, context: zmq.Context | None = None,
                 security: Security | None = None) -> None:
        # A context of its own: its ZAP handler (below) is the only one that can answer for it.
        self._own_ctx = context is None
        self._ctx = context or zmq.Context()
        self._buffers: dict[bytes, Any] = {}
        self._lock = threading.Lock()
        endpoint = endpoint or _private_ipc()
        self.curve_key: str | None = None
        self._security: Security | None = None
        self._zap: zmq.Socket | None = None
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, 4096)  # a fetch request is a few dozen bytes
        if is_tcp(endpoint):  # the same rules as the bus: CURVE, or plain text on loopback by explicit flag
            security = security or Security()
            try:
                security.check_tcp(tcp_host(endpoint), f"the frames plane's {endpoint}")
            except Exception:
                self._close_sockets()
                raise
            if security.curve:
                self._security = security
                self._zap = self._ctx.socket(zmq.REP)
                self._zap.setsockopt(zmq.LINGER, 0)
                self._zap.bind(ZAP_ENDPOINT)
            security.serve(self._sock)
            self.curve_key = security.public.decode() if security.curve and security.public else None
        self._sock.bind(endpoint)
        self.endpoint: str = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="actorwire-frames", daemon=True)
        self._thread.start()

    def _close_sockets(self) -> None:
        for sock in (self._sock, self._zap):
            if sock is not None:
                sock.close(0)
        if self._own_ctx:
            self._ctx.term()
        # libzmq leaves an ipc endpoint's file behind when the socket closes: the server removes
        # its own (every test of this module left one in the runtime directory).
        bound = getattr(self, "endpoint", "")
        if bound.startswith("ipc://"):
            pathlib.Path(bound[len("ipc://"):]).unlink(missing_ok=True)

    def register(self, buffer: Any) -> bytes:
        """Serve ``buffer`` under a new random key, which is returned."""
        key = secrets.token_bytes(KEY_BYTES)
        with self._lock:
            self._buffers[key] = buffer
        return key

    def unregister(self, key: bytes) -> None:
        with self._lock:
            self._buffers.pop(key, None)

    def _answer(self, request: bytes) -> list[Any]:
        if len(request) != _REQ.size:
            return [_ERR, b"malformed fetch request"]
        key, offset, nbytes = _REQ.unpack(request)
        with self._lock:
            buffer = self._buffers.get(key)
        if buffer is None:
            return [_ERR, b"buffer not exported (released, or never was)"]
        if offset + nbytes > buffer.numel():
            return [_ERR, f"fetch [{offset}, {offset + nbytes}) beyond the buffer of {buffer.numel()} bytes".encode()]
        return [_OK, memoryview(buffer.numpy())[offset:offset + nbytes]]

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        if self._zap is not None:
            poller.register(self._zap, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll(100))
            if self._zap is not None and self._zap in ready:
                assert self._security is not None
                self._zap.send_multipart(self._security.answer_zap(self._zap.recv_multipart(), _log))
            if self._sock not in ready:
                continue
            frames = self._sock.recv_multipart()
            # The routing envelope (identity, REQ's request id, the empty delimiter) goes back as it came.
            cut = frames.index(b"") + 1 if b"" in frames else 1
            status, payload = self._answer(frames[-1] if len(frames) > cut else b"")
            big = isinstance(payload, memoryview) and payload.nbytes >= ZERO_COPY_BYTES
            self._sock.send_multipart([*frames[:cut], status, payload], copy=not big)
        self._close_sockets()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            self._buffers.clear()


class FramesExporter:
    """Serves groups of tensors, each from its own bytes, until released."""

    def __init__(self, endpoint: str | None = None, *, security: Security | None = None) -> None:
        self.server = FramesServer(endpoint, security=security)
        self._exports: dict[bytes, list[bytes]] = {}

    def export(self, tensors: dict[str, Any]) -> tuple[bytes, dict[str, TensorRef]]:
        """Refs to ``tensors``, served until ``release(key)``; nothing is copied for contiguous CPU
        tensors (the bench measured the pack copy at a tenth of a fetch; zero-copy sends cost none)."""
        import torch

        refs: dict[str, TensorRef] = {}
        keys: list[bytes] = []
        for name, t in tensors.items():
            flat = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            key = self.server.register(flat)  # holds the tensor (or its CPU copy) until released
            keys.append(key)
            layout = {name: 0}
            refs.update(packed_refs(Plane.FRAMES, handle_for(self.server.endpoint, key, self.server.curve_key),
                                    layout, {name: t}, device="cpu"))
        export = keys[0] if keys else secrets.token_bytes(KEY_BYTES)
        self._exports[export] = keys
        return export, refs

    def release(self, key: bytes) -> None:
        for registered in self._exports.pop(key, [key]):
            self.server.unregister(registered)

    def close(self) -> None:
        self.server.close()


def handle_for(endpoint: str, key: bytes, curve_key: str | None = None) -> bytes:
    """``[endpoint, key]``, plus the server's z85 CURVE key when it has one."""
    return msgspec.msgpack.encode([endpoint, key] if curve_key is None else [endpoint, key, curve_key])


def _private_ipc() -> str:
    """An ipc endpoint in a private (0700) directory: same-host peers need no tcp at all."""
    import os

    return f"ipc://{user_dir()}/frames-{os.getpid()}-{secrets.token_hex(4)}.sock"


class FramesImporter:
    """Fetches tensors from exporters' servers; one socket per endpoint, used from one thread."""

    def __init__(self, *, timeout: float = 30.0, context: zmq.Context | None = None,
                 security: Security | None = None) -> None:
        self._ctx = context or zmq.Context.instance()
        self._security = security
        self._timeout_ms = int(timeout * 1000)
        self._socks: dict[str, zmq.Socket] = {}

    def _socket(self, endpoint: str, curve_key: str | None) -> zmq.Socket:
        sock = self._socks.get(endpoint)
        if sock is None:
            sock = self._ctx.socket(zmq.REQ)
            if curve_key is not None:
                if self._security is None:
                    self._security = Security()
                if not self._security.curve:
                    sock.close(0)
                    raise SecurityError(f"the frames server at {endpoint} uses CURVE; this process has no keys "
                                        f"(set ACTORWIRE_KEYS)")
                self._security.client(sock, curve_key, endpoint)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, self._timeout_ms)
            sock.setsockopt(zmq.REQ_RELAXED, 1)
            sock.setsockopt(zmq.REQ_CORRELATE, 1)
            sock.connect(endpoint)
            self._socks[endpoint] = sock
        return sock

    def open(self, ref: TensorRef) -> Any:
        import torch

        if ref.plane is not Plane.FRAMES:
            raise BadHandle(f"not a frames tensor: plane {ref.plane.value}")
        try:
            fields = msgspec.msgpack.decode(ref.handle, type=list[Any])
            if len(fields) < 2:
                raise msgspec.ValidationError("expected [endpoint, key] or [endpoint, key, curve_key]")
            endpoint, key, *rest = fields
            if not isinstance(endpoint, str) or not isinstance(key, bytes) or len(key) != KEY_BYTES \
                    or len(rest) > 1:
                raise msgspec.ValidationError("expected [endpoint, key] or [endpoint, key, curve_key]")
        except msgspec.DecodeError as exc:
            raise BadHandle(f"malformed frames handle: {exc}") from None
        curve_key = rest[0] if rest and isinstance(rest[0], str) else None
        dtype = getattr(torch, ref.dtype)
        if not ref.nbytes:
            return torch.empty(ref.shape, dtype=dtype)
        sock = self._socket(endpoint, curve_key)
        sock.send(_REQ.pack(key, ref.offset, ref.nbytes))
        try:
            status, frame = sock.recv_multipart(copy=False)
        except zmq.Again:
            raise WaitTimeout(f"no answer from the frames server at {endpoint} within "
                               f"{self._timeout_ms / 1000:g} s") from None
        if status.bytes != _OK:
            raise BadHandle(f"frames server {endpoint}: {frame.bytes.decode(errors='replace')}")
        with warnings.catch_warnings():  # the frame is read-only; the view is only read
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(frame.buffer, dtype=dtype)
        return flat.as_strided(ref.shape, ref.stride, 0)

    def drop(self) -> None:
        for sock in self._socks.values():
            sock.close(0)
        self._socks.clear()

    close = drop
