"""actorwire.transport: how bytes move.

ZeroMQ sockets, addressing, liveness, security, recording taps and bulk
tensor planes.  Imports ``actorwire.messages``, never ``actorwire.actors``.
"""

from __future__ import annotations

from ._config import RuntimeConfig
from ._errors import (
    ActorDead,
    AskTimeout,
    BackpressureTimeout,
    DeliveryError,
    JoinRefused,
    RemoteError,
    SystemClosed,
    UnknownActor,
    WouldBlock,
)
from ._log import configure_logging, get_logger
from ._mailbox import Mailbox
from ._node import BlockingReply, Node
from ._registry import Registry, RegistryError

__all__ = [
    "configure_logging", "get_logger", "RuntimeConfig", "Mailbox", "Node", "BlockingReply", "Registry", "RegistryError",
    "DeliveryError", "UnknownActor", "ActorDead", "AskTimeout", "BackpressureTimeout", "WouldBlock",
    "RemoteError", "SystemClosed", "JoinRefused",
]
