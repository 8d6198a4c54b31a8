"""actorwire.actors: who does what.

The actor base, the runtime, the built-in actors, the embedded Worker API,
launch, replay and the command line.
"""

from __future__ import annotations

from actorwire.actors.control._coordinator import Coordinator, CoordinatorConfig
from actorwire.actors.control._gpu_worker import GpuWorker
from actorwire.actors.control._worker import Plan, Worker, WorkerError
from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.runtime._launch import ActorSpec, ChildProcess, attach
from actorwire.actors.runtime._replay import ReplayReport, replay
from actorwire.actors.runtime._system import (
    ActorSystem,
    Inbox,
    Received,
    UnexpectedReply,
)
from actorwire.actors.testing import ActorHarness, FakeContext, Sent
from actorwire.actors.weights._consumer import ModelConsumer, WeightConsumer
from actorwire.actors.weights._plan import (
    ModuleSource,
    ParamMeta,
    WeightPlan,
    WeightSource,
    WeightSyncError,
    build_plan,
    state_digest,
)
from actorwire.actors.weights._producer import WeightProducer
from actorwire.actors.weights._sender import SyncReport, WeightSender
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
from actorwire.transport.comm import CommError, Communicator, GlooCommunicator

__all__ = [
    "Actor", "handler", "Context", "ActorSystem", "Inbox", "Received", "RuntimeConfig", "ActorSpec",
    "ChildProcess", "attach", "ActorHarness", "FakeContext", "Sent", "Coordinator", "CoordinatorConfig",
    "Worker", "WorkerError", "Plan", "GpuWorker", "Communicator", "GlooCommunicator", "CommError", "replay",
    "ReplayReport", "WeightSender", "SyncReport", "WeightProducer", "WeightConsumer", "ModelConsumer",
    "ModuleSource", "WeightSource", "ParamMeta", "WeightPlan", "WeightSyncError", "build_plan", "state_digest",
    "UnexpectedReply", "ActorDead", "AskTimeout", "BackpressureTimeout", "JoinRefused", "RemoteError",
    "SystemClosed", "UnknownActor", "WouldBlock",
]
