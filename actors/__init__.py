"""actorwire.actors: who does what.

The actor base, the runtime, the built-in actors, the embedded Worker API,
launch, replay and the command line.
"""

from __future__ import annotations

from actorwire.transport import (
    ActorDead,
    AskTimeout,
    BackpressureTimeout,
    JoinRefused,
    RemoteError,
    RuntimeConfig,
    SystemClosed,
    UnknownActor,
    WouldBlock,
)

from ._actor import Actor, handler
from ._context import Context
from ._launch import ActorSpec, ChildProcess, attach
from ._system import ActorSystem, Inbox, Received, UnexpectedReply
from ._testkit import ActorHarness, FakeContext, Sent

__all__ = [
    "Actor", "handler", "Context", "ActorSystem", "Inbox", "Received", "RuntimeConfig", "ActorSpec",
    "ChildProcess", "attach", "ActorHarness", "FakeContext", "Sent",
    "UnexpectedReply", "ActorDead", "AskTimeout", "BackpressureTimeout", "JoinRefused", "RemoteError",
    "SystemClosed", "UnknownActor", "WouldBlock",
]
