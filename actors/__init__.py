"""actorwire.actors: who does what.

The actor model and its runtime: :class:`Actor` and :func:`handler`, the
:class:`Context` a handler sees, the :class:`ActorSystem` hosting actors in a
process, launch and attach, replay, and the errors a caller handles.  The
built-in actors live in :mod:`actorwire.actors.control` (training control
plane) and :mod:`actorwire.actors.weights` (weight transfer); the test kit in
:mod:`actorwire.actors.testing`.
"""

from __future__ import annotations

from actorwire.actors._builtin import replay
from actorwire.actors.runtime._actor import Actor, EffectsAdapter, effects_name, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.runtime._inbox import Inbox, Received
from actorwire.actors.runtime._launch import ActorSpec, ChildProcess, attach
from actorwire.actors.runtime._replay import ReplayReport
from actorwire.actors.runtime._system import ActorSystem, UnexpectedReply
from actorwire.messages import ActorwireError
from actorwire.messages._public import publish as _publish
from actorwire.transport import (
    ActorDead,
    AskTimeout,
    BackpressureTimeout,
    DeliveryError,
    JoinRefused,
    RemoteError,
    RuntimeConfig,
    SystemClosed,
    UnknownActor,
    WouldBlock,
)

__all__ = [
    "Actor", "handler", "Context", "ActorSystem", "Inbox", "Received", "RuntimeConfig", "ActorSpec",
    "ChildProcess", "attach", "replay", "ReplayReport", "EffectsAdapter", "effects_name",
    "ActorwireError", "DeliveryError", "UnknownActor", "ActorDead", "AskTimeout", "BackpressureTimeout",
    "WouldBlock", "RemoteError", "UnexpectedReply", "SystemClosed", "JoinRefused",
]
_publish(globals(), __all__)
