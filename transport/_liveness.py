"""Connection liveness, judged from what libzmq reports.

libzmq runs the ZMTP heartbeat (``ZMQ_HEARTBEAT_IVL`` / ``_TIMEOUT`` / ``_TTL``)
on its own C threads, which go on while Python is busy: a handler that spins,
a C call that holds the GIL for seconds, a training step in a CUDA kernel.  A
connection is dropped only when the peer's libzmq stops answering (the process
is stopped, the host or the network is gone) or its socket closes (the process
exited).  The socket monitor reports both as ``DISCONNECTED``; a completed
handshake (``HANDSHAKE_SUCCEEDED``) reports the connection up again.

This module turns those reports into a verdict, on a clock it is given: a peer
is unreachable once its connection has been down for longer than it is
allowed (the grace after a drop, or the staleness timeout after the join for
the first handshake).  It does no I/O; :class:`~._node.Node` feeds it.
"""

from __future__ import annotations

import dataclasses

import zmq


@dataclasses.dataclass(frozen=True)
class Timing:
    """The ZMTP heartbeat settings and the grace that follows a drop, from the runtime's two knobs.

    A stopped peer is judged unreachable ``timeout + grace`` = ``staleness`` after it stopped;
    a peer whose socket closed, ``grace`` after (at once when its pid is proven gone).
    """

    interval: float  # seconds between ZMTP PINGs
    timeout: float  # no traffic this long after a PING: libzmq drops the connection
    grace: float  # a dropped connection not back within this long: unreachable
    staleness: float  # first handshake after a join, and the whole budget of a stop
    tick: float  # how often the verdicts are taken

    @classmethod
    def of(cls, heartbeat_interval: float, staleness_timeout: float) -> Timing:
        timeout = staleness_timeout / 2
        interval = min(heartbeat_interval, timeout / 2)
        return cls(interval=interval, timeout=timeout, grace=staleness_timeout - timeout,
                   staleness=staleness_timeout, tick=min(heartbeat_interval, staleness_timeout / 6))

    def apply(self, sock: zmq.Socket) -> None:
        """Turn on libzmq's heartbeats for ``sock`` (before it binds or connects)."""
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(1, round(self.interval * 1000)))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(1, round(self.timeout * 1000)))
        # The peer is told to drop us after this (ZMTP carries it in deciseconds, at most 6553.5 s).
        sock.setsockopt(zmq.HEARTBEAT_TTL, min(6_553_500, max(100, round(self.timeout * 1000))))


#: The monitor events a watched connection reports.
EVENTS = int(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)


@dataclasses.dataclass
class Watch:
    """One peer's connection, as far as its monitor told: up, or down since a time."""

    down_since: float | None
    allowed: float
    was_up: bool = False
    drops: int = 0

    @classmethod
    def joined(cls, now: float, timing: Timing) -> Watch:
        """A peer that joined and whose connection is still being made."""
        return cls(down_since=now, allowed=timing.staleness)

    def up(self) -> None:
        self.down_since = None
        self.was_up = True

    def down(self, now: float, timing: Timing) -> None:
        if self.down_since is None:
            self.down_since = now
            self.allowed = timing.grace
            self.drops += 1

    def silent_for(self, now: float) -> float | None:
        """How long the connection has been down past what it is allowed; None while it may come back."""
        if self.down_since is None or now - self.down_since <= self.allowed:
            return None
        return now - self.down_since

    def why(self, now: float) -> str:
        down = 0.0 if self.down_since is None else now - self.down_since
        if self.was_up:
            return (f"no connection for {down:.1f} s (libzmq's heartbeats timed out, or the peer "
                    f"closed its socket, and it did not reconnect)")
        return f"no connection made within {down:.1f} s of its join"
