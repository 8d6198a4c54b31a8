"""Per-rank epoch metrics and the coordinator's aggregate of them."""

from __future__ import annotations

from .._base import Count, Message, NonNegFloat, Record


class ScalarSum(Record, frozen=True, array_like=True):
    """A ``record_scalar`` accumulator: ``[sum, count]`` on the wire."""

    sum: float
    count: Count


class ResourceUsage(Record, frozen=True):
    """A throttled sample of a rank's host and device usage."""

    cpu_percent: NonNegFloat = 0.0
    ram_bytes: Count = 0
    gpu_util_percent: NonNegFloat | None = None
    vram_used_bytes: Count | None = None
    vram_total_bytes: Count | None = None


class MetricsMsg(Message, frozen=True, tag="metrics"):
    """What one rank did in one epoch (or one chunk of it)."""

    rank: Count
    epoch: Count
    avg_loss: float
    batches_processed: Count
    epoch_ms: NonNegFloat
    samples_processed: Count
    #: Epoch start to the end of the rank's last batch: the balancer's denominator.
    share_complete_ms: NonNegFloat = 0.0
    compute_only_ms: NonNegFloat = 0.0
    data_starve_ms: NonNegFloat = 0.0
    scalars: dict[str, ScalarSum] = {}
    resources: ResourceUsage | None = None
    #: How many ``ExtendPartition`` slices this report covers (the coordinator
    #: waits for every slice it handed out before aggregating the epoch).
    extensions: Count = 0
    #: The rank's step count (its batches since it joined) when it reported; 0: not said.  The
    #: coordinator counts the batches up to it that a relay has not reported yet.
    step_count: Count = 0
    #: This rank's report number (1, 2, ... per incarnation; 0: not said): a report sent again after
    #: its relay died is counted once.
    seq: Count = 0


class EpochMetrics(Message, frozen=True, tag="epoch_metrics"):
    """One epoch aggregated over ranks by the coordinator.

    Per-rank lists are indexed by rank; a rank that reported nothing has
    zeros (and ``None`` in ``per_rank_loss``).
    """

    epoch: Count
    avg_loss: float
    epoch_ms: NonNegFloat
    #: Batch-weighted mean of every recorded scalar.
    scalars: dict[str, float] = {}
    per_rank: list[dict[str, float]] = []
    per_rank_throughput: list[float] = []
    per_rank_batch_share: list[float] = []
    per_rank_share_complete_ms: list[float] = []
    per_rank_compute_only_ms: list[float] = []
    per_rank_data_starve_ms: list[float] = []
    per_rank_loss: list[float | None] = []
    per_rank_samples: list[Count] = []
    device_indices: list[Count] = []
