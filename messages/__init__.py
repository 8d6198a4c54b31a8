"""actorwire.messages: what is said on the bus.

The typed message catalog (one tagged union of frozen msgspec structs), the
envelope, and the codec that turns them into msgpack frames and back, with
validation.  This package imports nothing else of actorwire.  The node protocol's own kinds are in
:mod:`actorwire.messages.runtime`; kinds kept only for their tags, in
:mod:`actorwire.messages.reserved`.
"""

from __future__ import annotations

from ._base import Message, Record
from ._catalog import BY_KIND, FAMILIES, MESSAGE_TYPES, AnyMessage, message_type
from ._codec import (
    DEFAULT_MAX_MESSAGE_SIZE,
    Codec,
    decode,
    decode_message,
    encode,
    encode_message,
)
from ._envelope import PROTOCOL_VERSION, Envelope
from ._errors import (
    ActorwireError,
    DecodeError,
    MalformedMessage,
    MessageTooLarge,
    PeerError,
    ProtocolVersionMismatch,
    UnknownMessage,
    UsageError,
)
from ._public import publish as _publish
from ._schema import describe, example, json_schema
from .kinds._control import (
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
from .kinds._enums import DownReason, ErrorCode, IntentKind, Plane, SaveReason
from .kinds._metrics import EpochMetrics, MetricsMsg, ResourceUsage, ScalarSum
from .kinds._runtime import (
    AskFailed,
    Down,
    ErrorReply,
    RankExited,
    TimerFired,
)
from .kinds._status import ActorDetail, ActorStatus, MemberStatus, NodeStatus, RankStatus, StatusMsg, StatusRequest
from .kinds._tensor import TensorRef
from .kinds._timing import (
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
from .kinds._weights import (
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
    "PROTOCOL_VERSION", "DEFAULT_MAX_MESSAGE_SIZE",
    # codec
    "Codec", "encode", "decode", "encode_message", "decode_message",
    # base and catalog
    "Message", "Record", "Envelope", "TensorRef", "AnyMessage", "MESSAGE_TYPES", "FAMILIES",
    "BY_KIND", "message_type", "describe", "example", "json_schema",
    # errors
    "ActorwireError", "UsageError", "PeerError", "DecodeError", "MalformedMessage", "UnknownMessage", "MessageTooLarge",
    "ProtocolVersionMismatch",
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
