"""ControlMsg: what the coordinator tells GPU workers (coordinator -> rank)."""

from __future__ import annotations

from typing import Annotated, Union

import msgspec

from .._base import Count, Message, Record
from ._enums import SaveReason
from ._metrics import EpochMetrics


class EpochPlan(Record, frozen=True):
    """One rank's slice of an epoch: ``partition_size`` samples from ``partition_offset``."""

    epoch: Count
    partition_offset: Count
    partition_size: Count


class StartEpoch(Message, frozen=True, tag="start_epoch"):
    """Start an epoch (or one chunk of it) on the receiving rank."""

    epoch: Count
    partition_offset: Count
    partition_size: Count


class ExtendPartition(Message, frozen=True, tag="extend_partition"):
    """Append a dead rank's unprocessed remainder to this rank's partition."""

    partition_offset: Count
    partition_size: Count
    epoch: Count = 0


class RequestParams(Message, frozen=True, tag="request_params"):
    """CPU averaging: ship a parameter snapshot on the data plane."""


class Update(Message, frozen=True, tag="update"):
    """CPU averaging: averaged parameters are ready (optionally with the next plan)."""

    version: Count
    next_plan: EpochPlan | None = None


class SyncNow(Message, frozen=True, tag="sync_now"):
    """Run the work-weighted all-reduce now, then answer ``SyncAck``.

    ``source``: no rank in the run holds the run's model yet (the first sync): this rank's
    initialisation becomes it; every other rank that has not been in a completed sync weighs 0 and
    takes the average, so every rank trains from the same parameters.
    """

    cycle: Count = 0
    source: Count | None = None


class Throttle(Message, frozen=True, tag="throttle"):
    """This rank trained its lead bound (twice its sync quota, at least quota + 4 batches) past its
    last completed sync: it takes no batch until its next sync completes.  Sent only while that
    sync's ``SyncNow`` is still to be sent, so it never outlives it."""


class SetGlobalStep(Message, frozen=True, tag="set_global_step"):
    """The global step after an averaging cycle (drives the LR schedule)."""

    global_step: Count


class Checkpoint(Message, frozen=True, tag="checkpoint"):
    """The target rank writes a checkpoint and answers ``CheckpointResult``."""

    version: Count
    target_rank: Count


class ExecuteEval(Message, frozen=True, tag="execute_eval"):
    """The target rank runs its eval function and answers ``EvalResult``."""

    schedule_id: Count
    epoch: Count
    target_rank: Count
    #: The single canonical eval at the end of the run.
    final: bool = False


class SetEpochCallbackRole(Message, frozen=True, tag="set_epoch_callback_role"):
    """The rank that runs the per-epoch callback from now on."""

    rank: Count


class EpochAggregated(Message, frozen=True, tag="epoch_aggregated"):
    """The aggregated metrics of one epoch, broadcast to every rank."""

    metrics: EpochMetrics


class EvalBroadcast(Message, frozen=True, tag="eval_broadcast"):
    """A successful eval result, broadcast so every rank can ``poll_eval()`` it."""

    epoch: Count
    metric: float


class DeclareDead(Message, frozen=True, tag="declare_dead"):
    """A rank is dead: abort the communicator that still includes it."""

    rank: Count


class RequestNewNcclId(Message, frozen=True, tag="request_new_nccl_id"):
    """The chosen survivor generates a fresh NCCL unique id."""

    attempt: Count = 0


class NewNcclSession(Message, frozen=True, tag="new_nccl_session"):
    """Re-initialise the communicator with this id, rank and world size."""

    uid: bytes
    new_rank: Count
    new_world_size: Count
    attempt: Count = 0


class SaveConsensusModel(Message, frozen=True, tag="save_consensus_model"):
    """The target rank writes the current consensus model (no shutdown)."""

    target_rank: Count


class StageSegment(Record, frozen=True, array_like=True):
    """One ``(offset, size)`` run of samples."""

    offset: Count
    size: Count


class StageEpoch(Record, frozen=True):
    epoch: Count
    segments: list[StageSegment]


class StageAdvisory(Message, frozen=True, tag="stage_advisory"):
    """Advisory for a background data stager: upcoming runs and batch counts."""

    counts: list[Count]
    epochs: list[StageEpoch]


class Shutdown(Message, frozen=True, tag="shutdown"):
    """Normal end of the run."""


class ShutdownWithSave(Message, frozen=True, tag="shutdown_with_save"):
    """The run cannot go on: write your bundle, then exit."""

    reason: SaveReason
    #: One line for people: what happened, naming the rank and the phase.
    detail: str = ""


class Evicted(Message, frozen=True, tag="evicted"):
    """You were counted dead (stopped or cut off past the runtime's timeout) and your share went to
    the others: leave without a result.  Your model is not the run's; the run goes on without you."""

    #: One line for people: when and why the rank was counted dead.
    detail: str = ""


class RankLost(Message, frozen=True, tag="rank_lost"):
    """To the run's owner (the metrics sink): a rank was lost, and the run goes on with
    ``world_size`` ranks (0 when it cannot go on)."""

    rank: Count
    #: The epoch it was lost in (-1: before the run started).
    epoch: int
    reason: str
    world_size: Count


class GroupFormed(Message, frozen=True, tag="group_formed"):
    """To the run's owner: after a loss (or a rejoin), the ranks in the run formed a new group and
    completed a sync on it, ``seconds`` after the loss."""

    ranks: list[Count]
    world_size: Count
    seconds: float


class CoordHeartbeat(Message, frozen=True, tag="coord_heartbeat"):
    """Coordinator liveness beacon (about once a second)."""

    seq: Count = 0


class JoinAccepted(Message, frozen=True, tag="join_accepted"):
    """Answer to ``JoinRequest``: the rank is part of the run.

    ``resume_from`` is set when every rank was lost and the run resumes: the path of the last
    checkpoint, which the rank loads before it trains; ``resume_epoch`` the epoch it resumes at."""

    rank: Count
    world_size: Count
    resume_from: str | None = None
    resume_epoch: Count = 0


class JoinRejected(Message, frozen=True, tag="join_rejected"):
    """Answer to ``JoinRequest``: the rank may not join, and why."""

    reason: str


class WriteMeta(Message, frozen=True, tag="write_meta"):
    """Coordinator -> its effects adapter (``coordinator/io``): write ``text`` to ``path``.

    The run's save metadata (``<save_stem>.meta.json``) is written there, not in a handler, so
    a replay of the coordinator writes no file; the adapter takes it from its owner only.
    """

    path: str
    text: str


# -- a GpuWorker's effects: what the actor asks its adapter (``worker/<rank>/io``) to do ------
#
# Training steps and collectives are effects; the actor hands them over and sees the outcomes as
# these replies (an eval and a checkpoint reuse ExecuteEval/EvalResult and Checkpoint/
# CheckpointResult), so a recording of the rank replays without a model or a process group.


class TrainBatch(Message, frozen=True, tag="train_batch"):
    """Train one batch on sample indices ``start`` to ``stop`` (exclusive)."""

    start: Count
    stop: Count


class BatchTrained(Message, frozen=True, tag="batch_trained"):
    """The batch ``TrainBatch`` asked for: its loss and how long it took, or ``error``."""

    start: Count
    stop: Count
    loss: float = 0.0
    batch_ms: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    error: str | None = None


class AllReduceParams(Message, frozen=True, tag="all_reduce_params"):
    """Average the parameters over the group (sync ``cycle``); ``steps``: this rank's steps since its
    last completed sync, ``weight``: what its parameters weigh (``reduce_weight``)."""

    cycle: Count
    steps: Count
    #: Its weight in the average, when it differs from ``steps`` (a rank taking the others' model: 0).
    weight: Count | None = None


class ParamsReduced(Message, frozen=True, tag="params_reduced"):
    """Sync ``cycle``'s all-reduce is done, or failed with ``error``; ``covered``: the steps it averaged."""

    cycle: Count
    error: str | None = None
    covered: Count | None = None


class JoinGroup(Message, frozen=True, tag="join_group"):
    """Form the process group ``session`` describes; ``asked_at``: when the session came to the rank
    (its ``ctx.now()``; 0: not known), so that one that waited too long is refused, not joined."""

    session: NewNcclSession
    asked_at: float = 0.0


class GroupJoined(Message, frozen=True, tag="group_joined"):
    """The group of attempt ``attempt`` is formed, or ``error`` says why not."""

    attempt: Count
    error: str | None = None


class NewGroupId(Message, frozen=True, tag="new_group_id"):
    """Make the id of a new group (attempt ``attempt``)."""

    attempt: Count


class GroupIdMade(Message, frozen=True, tag="group_id_made"):
    """The id ``NewGroupId`` asked for (``uid``), or ``error``."""

    attempt: Count
    uid: bytes | None = None
    error: str | None = None


class AbortComm(Message, frozen=True, tag="abort_comm"):
    """Abort the communicator: a collective waiting on a dead peer returns at once."""


ControlMsg = Union[
    StartEpoch,
    ExtendPartition,
    RequestParams,
    Update,
    SyncNow,
    Throttle,
    SetGlobalStep,
    Checkpoint,
    ExecuteEval,
    SetEpochCallbackRole,
    EpochAggregated,
    EvalBroadcast,
    DeclareDead,
    RequestNewNcclId,
    NewNcclSession,
    SaveConsensusModel,
    StageAdvisory,
    Shutdown,
    ShutdownWithSave,
    Evicted,
    RankLost,
    GroupFormed,
    CoordHeartbeat,
    JoinAccepted,
    JoinRejected,
    WriteMeta,
    TrainBatch,
    BatchTrained,
    AllReduceParams,
    ParamsReduced,
    JoinGroup,
    GroupJoined,
    NewGroupId,
    GroupIdMade,
    AbortComm,
]


#: What the coordinator tells a rank, and so what a ``Fanout`` carries.
ToRank = Union[
    StartEpoch,
    ExtendPartition,
    SyncNow,
    Throttle,
    SetGlobalStep,
    Checkpoint,
    ExecuteEval,
    SetEpochCallbackRole,
    EpochAggregated,
    EvalBroadcast,
    DeclareDead,
    RequestNewNcclId,
    NewNcclSession,
    Shutdown,
    ShutdownWithSave,
    Evicted,
    CoordHeartbeat,
]


class Fanout(Message, frozen=True, tag="fanout"):
    """From the coordinator to a relay: tell ``messages`` to ranks behind it (``worker/R`` for each R
    of ``ranks``).  One message is told to every rank; with one per rank, ``messages[i]`` goes to
    ``ranks[i]``.  A rank that named a relay hears the coordinator only through it, so what the
    coordinator tells one rank reaches it in the order told.  Taken only from the relay's coordinator."""

    ranks: list[Count]
    messages: list[ToRank]
