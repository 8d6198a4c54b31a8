"""actorwire.transport: how bytes move.

Nodes over ZeroMQ (addressing, delivery, liveness, security), the runtime's
limits, the delivery errors, and the subpackages :mod:`.planes` (bulk
tensors), :mod:`.comm` (collectives) and :mod:`.recording` (the on-disk
format).  Imports ``actorwire.messages``, never ``actorwire.actors``.  The
node itself is internal: actors reach it through ``actorwire.actors``.
"""

from __future__ import annotations

from actorwire.messages._public import publish as _publish
from actorwire.transport._config import RuntimeConfig
from actorwire.transport._errors import (
    ActorDead,
    AskTimeout,
    BackpressureTimeout,
    ConfigError,
    DeliveryError,
    JoinRefused,
    RemoteError,
    SystemClosed,
    UnknownActor,
    WouldBlock,
)
from actorwire.transport._log import configure_logging
from actorwire.transport._security import Security, SecurityError, keygen
from actorwire.transport._settings import Settings

__all__ = [
    "RuntimeConfig", "Settings", "Security", "keygen", "configure_logging",
    "DeliveryError", "UnknownActor", "ActorDead", "AskTimeout", "BackpressureTimeout", "WouldBlock",
    "RemoteError", "SystemClosed", "JoinRefused", "ConfigError", "SecurityError",
]
_publish(globals(), __all__)
