"""The node's sockets, made one way, and the few calls that read them.

Every socket a node opens comes from :class:`SocketFactory`: no linger, no high-water mark (the
credit window bounds the queues instead), the message-size cap enforced by libzmq before Python
sees a frame, and libzmq's heartbeats with the node's liveness timing.  :class:`Link` is a DEALER to
one peer node.  The wake-up pipe is how sending threads rouse the sleeping I/O thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import zmq

from actorwire.transport._liveness import Timing

_NOBLOCK = int(zmq.NOBLOCK)  # a plain int: pyzmq's enum arithmetic showed up in profiles


class SocketFactory:
    """Makes every socket of one node on ``context``; ``timing`` changes when a member is welcomed."""

    def __init__(self, context: zmq.Context, *, frame_cap: int, timing: Timing) -> None:
        self.context = context
        self.frame_cap = frame_cap
        self.timing = timing

    def make(self, kind: int, *, identity: str | None = None, heartbeats: bool = True,
             **options: int) -> zmq.Socket:
        """No linger, no high-water mark, the message cap, ``identity`` (a DEALER's), libzmq's
        heartbeats unless ``heartbeats`` is off, then ``options`` by ZMQ name (``RCVTIMEO=...``)."""
        sock = self.context.socket(kind)
        for opt, val in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0), (zmq.MAXMSGSIZE, self.frame_cap)):
            sock.setsockopt(opt, val)
        if identity is not None:
            sock.setsockopt(zmq.IDENTITY, identity.encode())
        for name, val in options.items():
            sock.setsockopt(getattr(zmq, name), val)
        if heartbeats:
            self.timing.apply(sock)
        return sock

    def router(self) -> zmq.Socket:
        return self.make(zmq.ROUTER, ROUTER_MANDATORY=1)


class Link:
    """A DEALER connected to one peer node's ROUTER (``monitor``: its events, where liveness is judged)."""

    __slots__ = ("node_id", "socket", "endpoint", "monitor")

    def __init__(self, node_id: str, sock: zmq.Socket, endpoint: str, monitor: zmq.Socket | None = None) -> None:
        self.node_id = node_id
        self.socket = sock
        self.endpoint = endpoint
        self.monitor = monitor

    def close(self) -> None:
        if self.monitor is not None:
            try:
                self.socket.disable_monitor()
            except zmq.ZMQError:
                pass
            self.monitor.close(linger=0)
        self.socket.close(linger=0)



def recv_frames(sock: zmq.Socket, flags: int = _NOBLOCK) -> list[bytes]:
    """One whole ZeroMQ message, frame by frame (pyzmq's recv_multipart does enum arithmetic per frame)."""
    frame = sock.recv(flags, copy=False)
    frames = [frame.bytes]
    while frame.more:
        frame = sock.recv(flags, copy=False)
        frames.append(frame.bytes)
    return frames


def monitor_event(monitor: zmq.Socket) -> int | None:
    """The kind of the next event a socket monitor has ready (None: nothing is)."""
    from zmq.utils.monitor import recv_monitor_message

    try:
        return int(recv_monitor_message(monitor, _NOBLOCK)["event"])
    except zmq.Again:
        return None


def wake_pipe() -> tuple[int, int]:
    if hasattr(os, "eventfd"):
        fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return fd, fd
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def _make_signal() -> Callable[[int], None]:
    """A wake-up write that keeps the GIL.

    ``os.eventfd_write`` releases the GIL around its syscall, which hands the
    GIL to the I/O thread on *every* send: it then wakes, ships one message and
    sleeps again (py-spy: 36 k msg/s, a third of the sender's time in the
    wake-up).  Written through ``ctypes.PyDLL`` the syscall keeps the GIL, the
    sender goes on queueing, and the I/O thread takes the GIL at the next
    switch interval or when the sender blocks, shipping hundreds of messages
    in one batch.  Latency does not suffer: a sender that then waits (an ask)
    releases the GIL at once.
    """
    if not hasattr(os, "eventfd"):
        def write(fd: int) -> None:
            os.write(fd, b"\x01")

        return write
    try:
        import ctypes

        libc = ctypes.PyDLL(None)
        raw = libc.eventfd_write
        raw.argtypes = [ctypes.c_int, ctypes.c_uint64]
        raw.restype = ctypes.c_int
    except (OSError, AttributeError):
        return lambda fd: os.eventfd_write(fd, 1)

    def signal(fd: int) -> None:
        if raw(fd, 1) != 0:
            os.eventfd_write(fd, 1)  # let the os module raise the proper OSError

    return signal


signal = _make_signal()


def drain_pipe(fd: int) -> None:
    try:
        if hasattr(os, "eventfd"):
            os.eventfd_read(fd)
        else:
            os.read(fd, 4096)
    except BlockingIOError:
        pass
