"""Timeouts and limits of the runtime, in one place.

Every deadline is multiplied by ``timeout_scale`` (``$ACTORWIRE_TIMEOUT_SCALE``),
so a slow CI machine or a debugger session stretches all of them together.
"""

from __future__ import annotations

import msgspec

from actorwire.messages import DEFAULT_MAX_MESSAGE_SIZE
from actorwire.transport._errors import InvalidArgument
from actorwire.transport._settings import settings


def _env_scale() -> float:
    return settings().timeout_scale


class RuntimeConfig(msgspec.Struct, frozen=True, kw_only=True):
    #: Seconds between heartbeats (sent by the I/O thread).
    heartbeat_interval: float = 1.0
    #: A node silent for this long is unreachable; its actors are Down.
    staleness_timeout: float = 3.0
    #: Default deadline of ``ask``.
    ask_timeout: float = 30.0
    #: How long a send may wait for a full target before ``BackpressureTimeout``.
    send_timeout: float = 30.0
    #: Unhandled messages allowed in flight from one sender to one remote target.
    window: int = 8192
    #: Messages an in-process mailbox holds before senders block.
    mailbox_capacity: int = 65536
    #: Re-send unacknowledged messages after this long without progress.
    retransmit_after: float = 2.0
    #: Largest message accepted from the wire.
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    #: Multiplies every deadline above.
    timeout_scale: float = msgspec.field(default_factory=_env_scale)

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "staleness_timeout", "ask_timeout", "send_timeout",
                     "retransmit_after", "timeout_scale"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"{name} must be positive, got {getattr(self, name)}")
        if self.staleness_timeout <= self.heartbeat_interval:
            raise InvalidArgument(
                f"staleness_timeout ({self.staleness_timeout} s) must exceed "
                f"heartbeat_interval ({self.heartbeat_interval} s)"
            )
        if self.window < 2 or self.mailbox_capacity < 1:
            raise InvalidArgument("window must be >= 2 and mailbox_capacity >= 1")

    def scaled(self, seconds: float) -> float:
        return seconds * self.timeout_scale
