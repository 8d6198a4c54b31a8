"""actorwire.messages.runtime: the node protocol's own kinds.

What nodes say to each other to join a system, keep its registry and
acknowledge delivery (docs/wire-protocol.md, "The node protocol").  Actor
code never sends these; a client in another language needs them to join.
The runtime kinds an actor does see (``Down``, ``AskFailed``,
``ErrorReply``, ``TimerFired``) are exported by :mod:`actorwire.messages`.
"""

from __future__ import annotations

from actorwire.messages._public import publish as _publish
from actorwire.messages.kinds._runtime import (
    Ack,
    AckEntry,
    Hello,
    NodeExiting,
    NodeHeartbeat,
    NodeInfo,
    Refused,
    Register,
    RegistryUpdate,
    RuntimeMsg,
    Unregister,
    Welcome,
)

__all__ = [
    "Hello", "Welcome", "Refused", "Register", "Unregister", "RegistryUpdate", "NodeInfo", "NodeHeartbeat",
    "NodeExiting", "Ack", "AckEntry", "RuntimeMsg",
]
_publish(globals(), __all__)
