"""actorwire.messages.kinds: every kind a user's actors send and receive, with the enums and records
they carry.

    from actorwire.messages.kinds import StartEpoch, MetricsMsg

One module per family (control, timing, metrics, weights, status, runtime,
tensor); this package is their one public home.  The node protocol's own kinds
are in :mod:`actorwire.messages.runtime`, kinds kept only for their tags in
:mod:`actorwire.messages.reserved`, and the codec, the envelope and the catalog
in :mod:`actorwire.messages`.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._control import (
    AbortComm,
    AllReduceParams,
    BatchTrained,
    Checkpoint,
    ControlMsg,
    CoordHeartbeat,
    DeclareDead,
    EpochAggregated,
    EvalBroadcast,
    Evicted,
    ExecuteEval,
    ExtendPartition,
    Fanout,
    GroupFormed,
    GroupIdMade,
    GroupJoined,
    JoinAccepted,
    JoinGroup,
    JoinRejected,
    NewGroupId,
    NewNcclSession,
    ParamsReduced,
    RankLost,
    RequestNewNcclId,
    SetEpochCallbackRole,
    SetGlobalStep,
    Shutdown,
    ShutdownWithSave,
    StartEpoch,
    SyncNow,
    Throttle,
    TrainBatch,
    WriteMeta,
)
from ._enums import DownReason, ErrorCode, IntentKind, Plane, SaveReason
from ._metrics import EpochMetrics, MetricsMsg, ResourceUsage, ScalarSum
from ._runtime import (
    AskFailed,
    Down,
    ErrorReply,
    RankExited,
    TimerFired,
)
from ._status import ActorDetail, ActorStatus, MemberStatus, NodeStatus, RankStatus, StatusMsg, StatusRequest
from ._tensor import TensorRef
from ._timing import (
    Batch,
    CheckpointResult,
    EpochFnElapsed,
    EvalResult,
    Exiting,
    Heartbeat,
    Intent,
    JoinRequest,
    LrUpdate,
    NewNcclIdGenerated,
    RelayReport,
    SessionFailed,
    SyncAck,
    TimingMsg,
)
from ._weights import (
    BeginSync,
    DigestState,
    EndSync,
    FreeGroup,
    GroupsFreed,
    HeldNames,
    PackPull,
    PublishGroup,
    PullPacked,
    PullReply,
    PullRequest,
    PullWritten,
    ReserveRing,
    ReserveServeBuffer,
    RingReserved,
    ServeBufferReserved,
    StateDigest,
    SyncFailed,
    WeightMsg,
    WritePull,
)

__all__ = [
    # a tensor moved outside the bus, by reference
    "TensorRef",
    # enums
    "IntentKind", "SaveReason", "DownReason", "Plane", "ErrorCode",
    # unions
    "ControlMsg", "TimingMsg", "WeightMsg",
    # control
    "StartEpoch", "ExtendPartition", "SyncNow",
    "Throttle", "SetGlobalStep", "Checkpoint", "ExecuteEval", "SetEpochCallbackRole",
    "EpochAggregated", "EvalBroadcast", "DeclareDead", "RequestNewNcclId", "NewNcclSession",
    "Shutdown", "ShutdownWithSave", "Evicted", "RankLost", "GroupFormed", "CoordHeartbeat", "JoinAccepted", "JoinRejected", "WriteMeta",
    "TrainBatch", "BatchTrained", "AllReduceParams", "ParamsReduced", "JoinGroup", "GroupJoined", "NewGroupId",
    "GroupIdMade", "AbortComm",
    # timing and metrics
    "Batch", "SyncAck", "Exiting", "LrUpdate", "Intent", "Heartbeat",
    "EvalResult", "CheckpointResult", "NewNcclIdGenerated", "EpochFnElapsed",
    "JoinRequest", "SessionFailed", "RelayReport", "Fanout", "MetricsMsg", "EpochMetrics", "ScalarSum", "ResourceUsage",
    # weights
    "BeginSync", "PublishGroup", "FreeGroup", "GroupsFreed", "EndSync", "SyncFailed", "HeldNames",
    "ReserveServeBuffer", "ServeBufferReserved", "PullRequest", "PullReply",
    "ReserveRing", "RingReserved", "PackPull", "PullPacked", "WritePull", "PullWritten", "DigestState", "StateDigest",
    # what the runtime tells an actor
    "Down", "ErrorReply", "AskFailed", "TimerFired", "RankExited",
    # what a running system says of itself (actorwire status, ActorSystem.statistics())
    "StatusRequest", "NodeStatus", "ActorStatus", "MemberStatus", "StatusMsg", "ActorDetail", "RankStatus",
]
_publish(globals(), __all__)
