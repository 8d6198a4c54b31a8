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
from ._comm import CommError, Communicator, GlooCommunicator
from ._consumer import ModelConsumer, WeightConsumer
from ._context import Context
from ._coordinator import Coordinator, CoordinatorConfig
from ._gpu_worker import GpuWorker
from ._launch import ActorSpec, ChildProcess, attach
from ._system import ActorSystem, Inbox, Received, UnexpectedReply
from ._replay import ReplayReport, replay
from ._producer import WeightProducer
from ._sender import SyncReport, WeightSender
from ._testkit import ActorHarness, FakeContext, Sent
from ._weights import ModuleSource, ParamMeta, WeightPlan, WeightSource, WeightSyncError, build_plan, state_digest
from ._worker import Plan, Worker, WorkerError

__all__ = [
    "Actor", "handler", "Context", "ActorSystem", "Inbox", "Received", "RuntimeConfig", "ActorSpec",
    "ChildProcess", "attach", "ActorHarness", "FakeContext", "Sent", "Coordinator", "CoordinatorConfig",
    "Worker", "WorkerError", "Plan", "GpuWorker", "Communicator", "GlooCommunicator", "CommError", "replay",
    "ReplayReport", "WeightSender", "SyncReport", "WeightProducer", "WeightConsumer", "ModelConsumer",
    "ModuleSource", "WeightSource", "ParamMeta", "WeightPlan", "WeightSyncError", "build_plan", "state_digest",
    "UnexpectedReply", "ActorDead", "AskTimeout", "BackpressureTimeout", "JoinRefused", "RemoteError",
    "SystemClosed", "UnknownActor", "WouldBlock",
]
