"""actorwire.transport: how bytes move.

ZeroMQ sockets, addressing, liveness, security, recording taps and bulk
tensor planes.  Imports ``actorwire.messages``, never ``actorwire.actors``.
"""

from __future__ import annotations

from actorwire.transport._config import RuntimeConfig
from actorwire.transport._errors import (
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
from actorwire.transport._log import configure_logging, get_logger
from actorwire.transport._mailbox import Mailbox
from actorwire.transport._node import BlockingReply, Node
from actorwire.transport._registry import Registry, RegistryError

__all__ = [
    "configure_logging", "get_logger", "RuntimeConfig", "Mailbox", "Node", "BlockingReply", "Registry", "RegistryError",
    "DeliveryError", "UnknownActor", "ActorDead", "AskTimeout", "BackpressureTimeout", "WouldBlock",
    "RemoteError", "SystemClosed", "JoinRefused",
]
