"""Each package's public names, pinned: a change to the surface is a deliberate edit here."""

from __future__ import annotations

import importlib
import types

import msgspec
import pytest

PUBLIC = {
    "actorwire": {
        "__version__",
    },
    "actorwire.messages": {
        "PROTOCOL_VERSION", "DEFAULT_MAX_MESSAGE_SIZE", "Codec", "encode", "decode", "encode_message",
        "decode_message", "Message", "Record", "Envelope", "AnyMessage", "MESSAGE_TYPES", "FAMILIES", "BY_KIND",
        "message_type", "describe", "example", "json_schema", "ActorwireError", "UsageError", "PeerError",
        "DecodeError", "MalformedMessage", "UnknownMessage", "MessageTooLarge", "ProtocolVersionMismatch",
    },
    "actorwire.messages.kinds": {
        "AskFailed", "Batch", "BeginSync", "Checkpoint",
        "CheckpointResult", "ControlMsg", "CoordHeartbeat", "DeclareDead",
        "Down", "DownReason", "EndSync", "Evicted", "RankLost", "GroupFormed", "EpochAggregated", "EpochFnElapsed",
        "EpochMetrics", "ErrorCode", "ErrorReply", "EvalBroadcast", "EvalResult", "ExecuteEval", "Exiting",
        "ExtendPartition", "FreeGroup", "GroupsFreed", "Heartbeat", "HeldNames", "Intent",
        "IntentKind", "JoinAccepted", "JoinRejected", "JoinRequest", "LrUpdate",
        "MetricsMsg", "NewNcclIdGenerated", "NewNcclSession",
        "Plane", "PublishGroup", "PullReply",
        "PullRequest", "RankExited", "RequestNewNcclId", "ReserveServeBuffer", "ResourceUsage", "SaveReason",
        "RelayReport", "Fanout", "ScalarSum", "ServeBufferReserved", "SessionFailed", "SetEpochCallbackRole", "SetGlobalStep",
        "Shutdown", "ShutdownWithSave", "StartEpoch", "SyncAck", "SyncFailed", "SyncNow", "TensorRef",
        "Throttle", "TimerFired", "TimingMsg", "WeightMsg",
        # effects: what an actor tells its adapter, and what it hears back (decision 0017)
        "ReserveRing", "RingReserved", "PackPull", "PullPacked", "WritePull", "PullWritten", "DigestState",
        "StateDigest", "WriteMeta", "TrainBatch", "BatchTrained", "AllReduceParams", "ParamsReduced", "JoinGroup",
        "GroupJoined", "NewGroupId", "GroupIdMade", "AbortComm",
        # what a running system says of itself (actorwire status)
        "StatusRequest", "NodeStatus", "ActorStatus", "MemberStatus", "StatusMsg", "ActorDetail", "RankStatus",
    },
    "actorwire.messages.runtime": {
        "Ack", "AckEntry", "Hello", "NodeExiting", "NodeHeartbeat", "NodeInfo", "Refused", "Register",
        "RegistryUpdate", "RuntimeMsg", "Unregister", "Welcome",
    },
    "actorwire.messages.reserved": {
        "EpochPlan", "RendezvousAssign", "RendezvousHello", "RendezvousMsg", "RendezvousRole", "RendezvousUid",
        "RequestParams", "ResourceSample", "SaveConsensusModel", "SnapshotReady", "StageAdvisory",
        "StageEpoch", "StageSegment", "Unwatch", "Update", "Watch",
    },
    "actorwire.transport": {
        "ActorDead", "AskTimeout", "BackpressureTimeout", "ConfigError", "DeliveryError", "JoinRefused",
        "RemoteError", "RuntimeConfig", "Security", "SecurityError", "Settings", "SystemClosed",
        "UnknownActor", "WouldBlock", "configure_logging", "keygen",
    },
    "actorwire.transport.planes": {
        "CudaIpcExporter", "CudaIpcImporter", "FramesExporter", "FramesImporter", "ServeRing", "ShmExporter",
        "ShmImporter", "TensorImporter", "choose_plane",
    },
    "actorwire.transport.comm": {
        "CommError", "CommTimeout", "CommUnhealthy", "Communicator", "GlooCommunicator", "NcclCommunicator",
        "find_nccl",
    },
    "actorwire.actors": {
        "Actor", "ActorDead", "ActorSpec", "ActorSystem", "ActorwireError", "AskTimeout",
        "BackpressureTimeout", "ChildProcess", "Context", "DeliveryError", "Inbox", "JoinRefused", "Received",
        "RemoteError", "ReplayReport", "RuntimeConfig", "SystemClosed", "UnexpectedReply", "UnknownActor",
        "WouldBlock", "attach", "handler", "replay", "EffectsAdapter", "effects_name",
    },
    "actorwire.actors.control": {
        "Coordinator", "CoordinatorConfig", "GpuWorker", "LocalRun", "Plan", "Relay", "RunOutcome", "Worker",
        "WorkerError", "run_local",
    },
    "actorwire.actors.weights": {
        "ModelConsumer", "ModuleSource", "ParamMeta", "SyncReport", "WeightConsumer", "WeightPlan",
        "WeightProducer", "WeightSender", "WeightSource", "WeightSyncError", "build_plan", "state_digest",
    },
    "actorwire.actors.testing": {
        "ActorHarness", "FakeContext", "Sent",
    },
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == PUBLIC[package]
    assert len(module.__all__) == len(set(module.__all__))
    undeclared = [n for n in dir(module) if not n.startswith("_") and n not in module.__all__
                  and not isinstance(getattr(module, n), types.ModuleType) and n != "annotations"]
    assert undeclared == []


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_a_public_class_or_function_says_where_it_is_public(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
            continue  # msgspec resolves a struct's annotations in its defining module (see _public.publish)
        if isinstance(obj, type) or isinstance(obj, types.FunctionType):
            assert not any(part.startswith("_") for part in obj.__module__.split(".")), (name, obj.__module__)
            assert getattr(importlib.import_module(obj.__module__), name) is obj


def test_the_actors_surface_is_what_a_user_writes_code_against() -> None:
    assert 15 <= len(PUBLIC["actorwire.actors"]) <= 25
    internals = {"Node", "BlockingReply", "Registry", "Mailbox", "get_logger", "Hello", "Welcome", "Ack"}
    assert not internals & (PUBLIC["actorwire.transport"] | PUBLIC["actorwire.messages"] | PUBLIC["actorwire.actors"])


def test_the_kinds_old_path_still_imports_and_is_the_same_class() -> None:
    """Code written before the kinds moved to ``actorwire.messages.kinds`` keeps working: each kind,
    enum and record is still importable from ``actorwire.messages``, and is the same object."""
    import actorwire.messages as messages
    from actorwire.messages import DownReason, StartEpoch, kinds  # two kinds by the old path

    assert StartEpoch is kinds.StartEpoch and DownReason is kinds.DownReason
    for name in kinds.__all__:
        assert getattr(messages, name) is getattr(kinds, name), name
    with pytest.raises(AttributeError, match="no attribute 'NoSuchKind'"):
        messages.NoSuchKind  # noqa: B018
    with pytest.raises(ImportError):
        exec("from actorwire.messages import NoSuchKind", {})


def test_the_messages_core_is_small_and_holds_no_kind() -> None:
    """``actorwire.messages`` is the codec, the envelope, the catalog and the errors; the kinds have
    their own namespace (issue 35: it exported 111 names, 76 of them kinds)."""
    from actorwire.messages import MESSAGE_TYPES

    assert len(PUBLIC["actorwire.messages"]) <= 30
    assert not {cls.__name__ for cls in MESSAGE_TYPES} & PUBLIC["actorwire.messages"]


def test_every_package_folder_is_in_the_distribution() -> None:
    """pyproject.toml lists the packages one by one: a new folder missing there works in a checkout
    (the editable install maps the roots) and is absent from the wheel (the simulator's, once)."""
    import pathlib

    import tomllib

    root = pathlib.Path(__file__).resolve().parents[1]
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {(root / folder).resolve(): package for package, folder in tool["package-dir"].items()}
    found = set()
    for init in root.rglob("__init__.py"):
        folder = init.parent.resolve()
        # the package of the nearest mapped folder above (or at) this one
        for above in [folder, *folder.parents]:
            if above in mapped:
                found.add(".".join([mapped[above], *folder.relative_to(above).parts]))
                break
    missing = found - set(tool["packages"])
    assert not missing, f"package folders missing from pyproject.toml's packages: {sorted(missing)}"
