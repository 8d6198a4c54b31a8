"""TimingMsg: what GPU workers tell the coordinator (rank -> coordinator).

Any of these refreshes the sending rank's liveness stamp on the coordinator.
"""

from __future__ import annotations

from typing import Union

from .._base import Count, Message, NonNegFloat
from ._enums import IntentKind
from ._metrics import MetricsMsg, ResourceUsage


class Batch(Message, frozen=True, tag="batch"):
    """One training batch finished on ``rank``."""

    rank: Count
    batch_ms: NonNegFloat
    step_count: Count
    batch_loss: float
    data_ms: NonNegFloat = 0.0
    param_norm: float | None = None
    sync_divergence: float | None = None


class SyncAck(Message, frozen=True, tag="sync_ack"):
    """The all-reduce that ``SyncNow`` asked for is done on ``rank``."""

    rank: Count
    step_count: Count
    divergence: float | None = None
    post_norm: float | None = None
    pre_norm: float | None = None
    #: The steps the reduce averaged: every member's steps since its last completed sync, summed in
    #: the same collective (None: no collective ran, e.g. a rank without a group).
    covered: Count | None = None
    #: The ``SyncNow.cycle`` this answers (0: not said; taken as the cycle in progress).
    cycle: Count = 0


class Exiting(Message, frozen=True, tag="exiting"):
    """Clean completion only; an error path must never send it."""

    rank: Count


class LrUpdate(Message, frozen=True, tag="lr_update"):
    """The learning rate ``rank`` used for its last batch."""

    rank: Count
    lr: float


class Intent(Message, frozen=True, tag="intent"):
    """A cooperative request, folded in at the next epoch boundary on the elected rank."""

    rank: Count
    kind: IntentKind


class Heartbeat(Message, frozen=True, tag="heartbeat"):
    """Rank-level proof of life with the rank's step count."""

    rank: Count
    step_count: Count = 0


class SnapshotReady(Message, frozen=True, tag="snapshot_ready"):
    """CPU averaging: the snapshot is uploaded and the rank enters the barrier."""

    rank: Count


class EvalResult(Message, frozen=True, tag="eval_result"):
    """Result of ``ExecuteEval``; ``error`` set (and ``metric`` NaN) when it failed."""

    rank: Count
    schedule_id: Count
    epoch: Count
    metric: float
    elapsed_ms: NonNegFloat
    error: str | None = None


class CheckpointResult(Message, frozen=True, tag="checkpoint_result"):
    """Result of ``Checkpoint``; ``error`` set when it failed."""

    rank: Count
    version: Count
    elapsed_ms: NonNegFloat
    error: str | None = None
    path: str | None = None


class NewNcclIdGenerated(Message, frozen=True, tag="new_nccl_id_generated"):
    """The generator rank's fresh NCCL unique id (accepted only from that rank)."""

    rank: Count
    uid: bytes
    attempt: Count = 0


class SessionFailed(Message, frozen=True, tag="session_failed"):
    """A rank could not join the process group of ``NewNcclSession``; the coordinator re-runs the rendezvous."""

    rank: Count
    attempt: Count
    reason: str = ""


class EpochFnElapsed(Message, frozen=True, tag="epoch_fn_elapsed"):
    """How long the role rank's per-epoch callback took."""

    rank: Count
    epoch: Count
    elapsed_ms: NonNegFloat


class ResourceSample(Message, frozen=True, tag="resource_sample"):
    """A throttled host/device usage sample."""

    rank: Count
    sample: ResourceUsage


class JoinRequest(Message, frozen=True, tag="join_request"):
    """A worker asks to join the run; a mismatch is refused with ``JoinRejected``."""

    rank: Count
    world_size: Count
    run_id: str
    #: Digest of the model's parameter names, shapes and dtypes.
    model_signature: str = ""
    host: str = ""
    pid: Count = 0
    #: The samples this rank's data holds (0: not said); fewer than the run's dataset is refused.
    dataset_size: Count = 0
    #: The relay this rank's ``Batch`` and ``Heartbeat`` reports go through ("": straight to the
    #: coordinator).  The coordinator takes a relay's report for this rank from that name only.
    relay: str = ""
    #: Whether this rank can run an eval (it has an eval function); the coordinator asks only
    #: those, and none when no rank can.
    evaluates: bool = True


class RelayReport(Message, frozen=True, tag="relay_report"):
    """What a relay heard from the ranks behind it since its last report, in one message.

    Index ``i`` of ``ranks``, ``batch_ms``, ``data_ms``, ``step_counts`` and ``losses`` is the
    batches of rank ``ranks[i]`` since the last report: up to its step count ``step_counts[i]``,
    with their mean times and loss (one entry per rank; the columns have one length); ``beats`` are
    the ranks that sent a ``Heartbeat`` and no batch; ``acks`` and ``metrics`` are the ranks' ``SyncAck`` and
    ``MetricsMsg``, whole, in the order received.  Taken only for ranks that named this relay in
    their join.
    """

    ranks: list[Count] = []
    batch_ms: list[NonNegFloat] = []
    data_ms: list[NonNegFloat] = []
    step_counts: list[Count] = []
    losses: list[float] = []
    beats: list[Count] = []
    acks: list[SyncAck] = []
    metrics: list[MetricsMsg] = []


TimingMsg = Union[
    Batch,
    SyncAck,
    Exiting,
    LrUpdate,
    Intent,
    Heartbeat,
    SnapshotReady,
    EvalResult,
    CheckpointResult,
    NewNcclIdGenerated,
    EpochFnElapsed,
    ResourceSample,
    JoinRequest,
    SessionFailed,
    RelayReport,
]
