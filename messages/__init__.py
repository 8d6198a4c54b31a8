"""actorwire.messages: what is said on the bus.

The typed message catalog (one tagged union of frozen msgspec structs), the
envelope, and the codec that turns them into msgpack frames and back, with
validation.  This package imports nothing else of actorwire.
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
from ._control import (
    Checkpoint,
    ControlMsg,
    CoordHeartbeat,
    DeclareDead,
    EpochAggregated,
    EpochPlan,
    EvalBroadcast,
    ExecuteEval,
    ExtendPartition,
    JoinAccepted,
    JoinRejected,
    NewNcclSession,
    RequestNewNcclId,
    RequestParams,
    SaveConsensusModel,
    SetEpochCallbackRole,
    SetGlobalStep,
    Shutdown,
    ShutdownWithSave,
    StageAdvisory,
    StageEpoch,
    StageSegment,
    StartEpoch,
    SyncNow,
    Throttle,
    Update,
)
from ._enums import DownReason, ErrorCode, IntentKind, Plane, RendezvousRole, SaveReason
from ._envelope import PROTOCOL_VERSION, Envelope
from ._errors import (
    ActorwireError,
    DecodeError,
    PeerError,
    UsageError,
    MalformedMessage,
    MessageTooLarge,
    ProtocolVersionMismatch,
    UnknownMessage,
)
from ._metrics import EpochMetrics, MetricsMsg, ResourceUsage, ScalarSum
from ._rendezvous import RendezvousAssign, RendezvousHello, RendezvousMsg, RendezvousUid
from ._runtime import (
    Ack,
    AckEntry,
    AskFailed,
    Down,
    ErrorReply,
    Hello,
    NodeExiting,
    NodeHeartbeat,
    NodeInfo,
    Refused,
    Register,
    RegistryUpdate,
    RuntimeMsg,
    Unregister,
    Unwatch,
    TimerFired,
    Watch,
    Welcome,
)
from ._schema import describe, example, json_schema
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
    ResourceSample,
    SessionFailed,
    SnapshotReady,
    SyncAck,
    TimingMsg,
)
from ._weights import (
    BeginSync,
    EndSync,
    FreeGroup,
    GroupsFreed,
    PublishGroup,
    PullReply,
    PullRequest,
    ReserveServeBuffer,
    ServeBufferReserved,
    SyncFailed,
    HeldNames,
    WeightMsg,
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
    "IntentKind", "SaveReason", "DownReason", "Plane", "RendezvousRole", "ErrorCode",
    # unions
    "ControlMsg", "TimingMsg", "WeightMsg", "RendezvousMsg", "RuntimeMsg",
    # control
    "EpochPlan", "StartEpoch", "ExtendPartition", "RequestParams", "Update", "SyncNow",
    "Throttle", "SetGlobalStep", "Checkpoint", "ExecuteEval", "SetEpochCallbackRole",
    "EpochAggregated", "EvalBroadcast", "DeclareDead", "RequestNewNcclId", "NewNcclSession",
    "SaveConsensusModel", "StageSegment", "StageEpoch", "StageAdvisory", "Shutdown",
    "ShutdownWithSave", "CoordHeartbeat", "JoinAccepted", "JoinRejected",
    # timing and metrics
    "Batch", "SyncAck", "Exiting", "LrUpdate", "Intent", "Heartbeat", "SnapshotReady",
    "EvalResult", "CheckpointResult", "NewNcclIdGenerated", "EpochFnElapsed", "ResourceSample",
    "JoinRequest", "SessionFailed", "MetricsMsg", "EpochMetrics", "ScalarSum", "ResourceUsage",
    # weights
    "BeginSync", "PublishGroup", "FreeGroup", "GroupsFreed", "EndSync", "SyncFailed", "HeldNames",
    "ReserveServeBuffer", "ServeBufferReserved", "PullRequest", "PullReply",
    # rendezvous
    "RendezvousHello", "RendezvousAssign", "RendezvousUid",
    # runtime
    "Hello", "Welcome", "Refused", "Register", "Unregister", "RegistryUpdate", "NodeHeartbeat",
    "NodeExiting", "Watch", "Unwatch", "Down", "ErrorReply", "NodeInfo", "Ack", "AckEntry",
    "AskFailed", "TimerFired",
]
