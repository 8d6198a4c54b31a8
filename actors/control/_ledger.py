"""What the coordinator is configured with and what it keeps per rank, apart from its rules.

``CoordinatorConfig`` (the run's shape and policies), ``RankState`` (one rank's
progress and liveness as the coordinator knows them) and the arithmetic the
coordinator's rules use: merging a rank's progressive metrics reports, the
run's epoch metrics, speed order and data shares.
"""

from __future__ import annotations

import math
import operator
from typing import Callable

import msgspec

from actorwire.messages.kinds import EpochMetrics, ExtendPartition, JoinRequest, MetricsMsg
from actorwire.transport.internal import InvalidArgument

#: ``schedule_id`` of the single canonical eval at the end of the run.
FINAL_EVAL = 2**63 - 1
META_SCHEMA = 1
EWMA = 0.3


class CoordinatorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of a run, as JSON-able values (they are recorded with the actor)."""

    world_size: int
    run_id: str
    num_epochs: int
    dataset_size: int
    batch_size: int = 1
    #: Expected model signature; empty: the first rank to join sets it.
    model_signature: str = ""
    #: "fixed": every rank syncs every ``sync_every`` batches.  "adaptive": the slowest
    #: rank anchors the cadence and the anchor is tuned to keep sync overhead near
    #: ``overhead_target``.
    sync_policy: str = "fixed"
    sync_every: int = 8
    overhead_target: float = 0.10
    #: "gloo" (CPU) or "nccl": a lone NCCL survivor cannot go on.
    backend: str = "gloo"
    eval_every: int = 1
    checkpoint_every: int = 0
    final_eval: bool = True
    max_failures: int = 1_000_000
    #: A rank silent this long is reported as slow (a warning, again at each doubling).  It is not
    #: declared dead for it: a death is the runtime's ``Down`` (its process gone, stopped or cut off).
    staleness_timeout: float = 30.0
    tick_interval: float = 1.0
    rendezvous_timeout: float = 30.0
    reduce_stall_timeout: float = 300.0
    #: How long to wait for ranks to leave after Shutdown.
    exit_grace: float = 30.0
    #: How long to wait for every rank to join; then the run starts with those that did.
    join_timeout: float = 120.0
    #: The fewest ranks a run goes on with, at its start and at any time after.  A rank lost before
    #: the start (its process exited before it joined, or a joined rank died while others were
    #: still joining) leaves the run to the others, as a rank lost in epoch 0 would; with fewer than
    #: this many left, at the start or after a death, the run ends at once with
    #: ``ShutdownWithSave(too_few_ranks)``.  The default, 1, goes on down to one gloo survivor; set
    #: it to ``world_size`` when a smaller run is worthless to you.
    min_world_size: int = 1
    #: Actor that receives every EpochMetrics and EvalBroadcast (e.g. the user's inbox).
    metrics_sink: str = ""
    #: Where ShutdownWithSave writes ``<stem>.meta.json``; empty: nowhere.
    save_stem: str = ""
    #: Form the process group at start (one rank generates the id, every rank gets
    #: ``NewNcclSession``) instead of leaving the first formation to the workers.
    form_group: bool = True
    #: Seconds to wait, once every rank was lost, for the launcher to start them again (torchrun's
    #: ``--max-restarts``): the new incarnations resume from the last checkpoint (``checkpoint_every``)
    #: and the run goes on.  0: a run that lost every rank ends (``all_ranks_lost``).
    restart_wait: float = 0.0
    #: The node whose launcher reports the ranks' exits (``ActorSystem.launch(..., rank=R,
    #: watcher="coordinator")`` on that system; set it to the system's ``node_id``): a
    #: ``RankExited`` signed by any other node is ignored, or any proven peer could have any live rank
    #: counted dead.  Empty: none is believed; a joined rank's death is then known by its ``Down``,
    #: and one that died before it joined by ``join_timeout``.  ``run_local`` sets it.
    launcher_node: str = ""

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.num_epochs < 1 or self.dataset_size < 1 or self.batch_size < 1:
            raise InvalidArgument("world_size, num_epochs, dataset_size and batch_size must be >= 1")
        if self.sync_policy not in ("fixed", "adaptive"):
            raise InvalidArgument(f"sync_policy must be 'fixed' or 'adaptive', got {self.sync_policy!r}")
        if self.backend not in ("gloo", "nccl"):
            raise InvalidArgument(f"backend must be 'gloo' or 'nccl', got {self.backend!r}")
        if self.sync_every < 1:
            raise InvalidArgument(f"sync_every must be >= 1, got {self.sync_every}")
        if self.restart_wait < 0:
            raise InvalidArgument(f"restart_wait must be >= 0 seconds, got {self.restart_wait}")
        if not 1 <= self.min_world_size <= self.world_size:
            raise InvalidArgument(f"min_world_size must be between 1 and world_size ({self.world_size}), "
                                  f"got {self.min_world_size}")


def _flag(attr: str) -> property:
    """A :class:`RankState` flag that says so when it is set (see there).  Read through
    ``operator.attrgetter``: the coordinator reads ``alive`` and ``exited`` of every rank at each
    sync gate and cycle (a Python ``__get__`` per read was 0.1 s of a 10,000-rank run's 3 epochs)."""

    def set_flag(obj: RankState, value: bool) -> None:
        obj._set(attr, bool(value))

    return property(operator.attrgetter(attr), set_flag)


class RankState:
    """What the coordinator knows of one rank.

    ``alive``, ``exited`` and ``waiting`` decide whether the rank is in the run; setting one calls
    ``on_change`` (the coordinator keeps the list of ranks in the run and drops it then: built per
    message, it made every SyncAck and every join cost a sort of all ranks, quadratic in N).

    Slotted: one per rank, and its 30 fields past what a dict of an instance shares its keys for,
    each instance had a dict of its own, 1.8 KB a rank (tracemalloc; 180 MB at 100,000 ranks) that
    every pass over the ranks walks through.
    """

    __slots__ = ("on_change", "rank", "name", "last_seen", "silence_warned", "joined_at", "evaluates", "_alive",
                 "_exited", "_waiting", "steps_since_sync", "total_steps", "epoch_steps", "synced_steps",
                 "acked_steps", "throttled", "epoch_start_steps", "has_model", "ms_per_batch", "lr", "plan",
                 "slices", "extended", "ext_sent", "ext_done", "reported_epoch", "told_to_leave", "lost_why",
                 "relay", "metrics_seq", "given", "overclaimed")

    def __init__(self, rank: int, name: str, now: float,
                 on_change: Callable[[RankState, bool], None] | None = None) -> None:
        self.on_change = on_change
        self.rank = rank
        self.name = name
        self.last_seen = now
        self.silence_warned = 1  # silence past this many staleness timeouts was reported
        self.joined_at = now
        #: It can run an eval (``JoinRequest.evaluates``).
        self.evaluates = True
        self._alive = True
        self._exited = False
        self._waiting = False
        #: Batches reported since the last sync this rank took part in (what the sync gate counts).
        self.steps_since_sync = 0
        self.total_steps = 0
        self.epoch_steps = 0
        #: The rank's own step count (``SyncAck.step_count``) at the last completed sync it acked,
        #: and at its ack of the sync in progress: a reduce covers what a rank had trained when it
        #: acked, never the batches it reports after that and before the cycle closes.
        self.synced_steps = 0
        self.acked_steps = 0
        #: Told ``Throttle`` (``SyncCadence.ahead``) since the last ``SyncNow``: told once, and it
        #: does not hold the sync gate.
        self.throttled = False
        #: ``total_steps`` when the current epoch was dispatched to it.
        self.epoch_start_steps = 0
        #: Holds the run's model: it took part in a completed sync, or it is the one whose
        #: initialisation the run starts from.  A rank without it trains nothing and weighs 0.
        self.has_model = False
        self.ms_per_batch: float | None = None
        self.lr: float | None = None
        self.plan = (0, 0)  # (offset, size) of the current epoch
        #: The plan, then every slice handed to it this epoch, in the order the rank trains them.
        self.slices: list[tuple[int, int]] = []
        self.extended = 0  # samples added by ExtendPartition this epoch
        self.ext_sent = 0  # ExtendPartition slices sent this epoch...
        self.ext_done = 0  # ...and reported done
        self.reported_epoch = -1
        self.told_to_leave = False  # declared dead, then heard from: told Evicted once
        self.lost_why = "lost"  # how it was lost, for the Evicted it may be told
        self.relay = ""  # the relay it reports through and is told through ("": none, or it died)
        self.metrics_seq = 0  # the last MetricsMsg.seq taken
        #: Samples handed to it since it joined (its plans and the slices handed over): every step
        #: takes at least one, so an honest rank's step count never passes it (``Coordinator._claimed``).
        self.given = 0
        self.overclaimed = False  # said more steps than that: warned once

    @property
    def in_run(self) -> bool:
        """Alive, not left, and not waiting for the next epoch to take part."""
        return self._alive and not self._exited and not self._waiting

    def _set(self, attr: str, value: bool) -> None:
        was_in = self.in_run
        setattr(self, attr, value)
        if self.on_change is not None:
            self.on_change(self, was_in)

    alive = _flag("_alive")
    exited = _flag("_exited")
    #: Joined while the run was running (a restart or a late rank): in from the next epoch.
    waiting = _flag("_waiting")


def add_metrics(a: MetricsMsg, b: MetricsMsg) -> MetricsMsg:
    """Two reports of one rank for one epoch (progressive chunks) summed."""
    batches = a.batches_processed + b.batches_processed
    scalars = dict(a.scalars)
    for name, acc in b.scalars.items():
        old = scalars.get(name)
        scalars[name] = acc if old is None else type(acc)(sum=old.sum + acc.sum, count=old.count + acc.count)
    return msgspec.structs.replace(
        a,
        avg_loss=(a.avg_loss * a.batches_processed + b.avg_loss * b.batches_processed) / max(1, batches),
        batches_processed=batches,
        epoch_ms=max(a.epoch_ms, b.epoch_ms),
        samples_processed=a.samples_processed + b.samples_processed,
        share_complete_ms=max(a.share_complete_ms, b.share_complete_ms),
        compute_only_ms=a.compute_only_ms + b.compute_only_ms,
        data_starve_ms=a.data_starve_ms + b.data_starve_ms,
        scalars=scalars,
        extensions=a.extensions + b.extensions,
        step_count=max(a.step_count, b.step_count),
    )


def by_speed(ranks: list[RankState]) -> list[RankState]:
    """Fastest first (lowest ms per batch); uncalibrated ranks by rank number."""
    return sorted(ranks, key=lambda r: (r.ms_per_batch is None, r.ms_per_batch or 0.0, r.rank))


def shares(total: int, alive: list[RankState]) -> list[int]:
    """``total`` samples split over ``alive``, in proportion to speed once every rank is calibrated.

    The split is exact (the parts sum to ``total``): largest remainders get the leftover samples.
    """
    speeds = [r.ms_per_batch for r in alive]
    if len(alive) > 1 and all(s is not None and s > 0 for s in speeds):
        weights = [1.0 / s for s in speeds if s]
        whole = sum(weights)  # once: summed in the comprehension it was quadratic in the ranks
        raw = [total * w / whole for w in weights]
        parts = [int(x) for x in raw]
        for i in sorted(range(len(raw)), key=lambda i: raw[i] - parts[i], reverse=True)[: total - sum(parts)]:
            parts[i] += 1
        return parts
    base, extra = divmod(total, len(alive))
    return [base + (1 if i < extra else 0) for i in range(len(alive))]


def quotas(alive: list[RankState], *, policy: str, sync_every: int, anchor: int, dataset_size: int,
           batch_size: int) -> dict[int, int]:
    """Batches each rank does between two syncs. ``fixed``: ``sync_every`` each. ``adaptive``: the
    slowest rank does ``anchor``, faster ranks proportionally more, capped at a share of the data."""
    if not alive:
        return {}
    speeds = [r.ms_per_batch for r in alive]
    if policy == "fixed" or any(ms is None for ms in speeds):
        return {r.rank: sync_every for r in alive}
    slowest = max(ms for ms in speeds if ms is not None)
    cap = max(1, dataset_size // max(1, len(alive)) // batch_size)
    return {r.rank: max(1, min(cap, round(anchor * slowest / r.ms_per_batch)))  # type: ignore[operator]
            for r in alive}


def adapt_anchor(anchor: int, overhead: float, target: float) -> int:
    """The adaptive policy's anchor after a sync whose cost was ``overhead`` of its window: at most
    doubled while above ``target``, shrunk by a fifth while under half of it."""
    if overhead > target:
        return min(anchor * 2, max(1, math.ceil(anchor * overhead / target)))
    if overhead < target / 2 and anchor > 1:
        return max(1, int(anchor * 0.8))
    return anchor


def aggregate(epoch: int, reports: dict[int, MetricsMsg], world: int) -> EpochMetrics:
    """One epoch's reports (rank -> merged report) as the run's ``EpochMetrics``; per-rank lists span ``world``."""
    batches = sum(m.batches_processed for m in reports.values()) or 1
    scalar_sum: dict[str, float] = {}
    scalar_count: dict[str, int] = {}
    for m in reports.values():
        for name, acc in m.scalars.items():
            scalar_sum[name] = scalar_sum.get(name, 0.0) + acc.sum
            scalar_count[name] = scalar_count.get(name, 0) + acc.count

    # The per-rank lists in one pass over the world (a comprehension and a lambda call per list and
    # rank cost 1.7 us a rank at 10,000 ranks, at every epoch's end): a missing rank gets 0, or
    # ``{}`` and None for its scalars and loss.
    scalars_of: list[dict[str, float]] = []
    throughput: list[float] = []
    batch_share: list[float] = []
    complete: list[float] = []
    compute: list[float] = []
    starve: list[float] = []
    loss: list[float | None] = []
    samples: list[int] = []
    none: dict[str, float] = {}
    get = reports.get
    for i in range(world):
        m = get(i)
        if m is None:
            scalars_of.append(none)
            throughput.append(0.0)
            batch_share.append(0.0)
            complete.append(0.0)
            compute.append(0.0)
            starve.append(0.0)
            loss.append(None)
            samples.append(0)
            continue
        scalars_of.append({k: v.sum / v.count for k, v in m.scalars.items() if v.count})
        throughput.append(m.samples_processed / m.share_complete_ms if m.share_complete_ms else 0.0)
        batch_share.append(m.batches_processed / batches)
        complete.append(m.share_complete_ms)
        compute.append(m.compute_only_ms)
        starve.append(m.data_starve_ms)
        loss.append(m.avg_loss)
        samples.append(m.samples_processed)

    return EpochMetrics(
        epoch=epoch,
        avg_loss=sum(m.avg_loss * m.batches_processed for m in reports.values()) / batches,
        epoch_ms=max(m.epoch_ms for m in reports.values()),
        scalars={k: scalar_sum[k] / scalar_count[k] for k in sorted(scalar_sum) if scalar_count[k]},
        per_rank=scalars_of,
        per_rank_throughput=throughput,
        per_rank_batch_share=batch_share,
        per_rank_share_complete_ms=complete,
        per_rank_compute_only_ms=compute,
        per_rank_data_starve_ms=starve,
        per_rank_loss=loss,
        per_rank_samples=samples,
        device_indices=[],
    )


def split_range(start: int, size: int, parts: int) -> list[tuple[int, int]]:
    """``[start, start + size)`` cut into ``parts`` consecutive (offset, size) pieces, the first ones larger by one."""
    share, extra = divmod(size, parts)
    pieces = []
    for i in range(parts):
        n = share + (1 if i < extra else 0)
        pieces.append((start, n))
        start += n
    return pieces


def remaining_slices(slices: list[tuple[int, int]], batches: int, batch_size: int) -> list[tuple[int, int]]:
    """What a rank has not trained of ``slices`` after ``batches`` batches, as the Worker trains them:
    each slice in order, in batches of ``batch_size`` (the last batch of a slice may be short)."""
    left: list[tuple[int, int]] = []
    for start, size in slices:
        needed = -(-size // batch_size)  # batches this slice takes
        if batches >= needed:
            batches -= needed
            continue
        done = batches * batch_size
        batches = 0
        left.append((start + done, size - done))
    return [(start, size) for start, size in left if size > 0]


def unsynced(r: RankState, *, acked: bool, batch_size: int) -> list[tuple[int, int]]:
    """What of a lost rank's share is not in the run's model, in its own order: what it had not
    trained of its plan and of the slices handed to it, and what it trained after its last completed
    sync (that dies with it).  ``acked``: it acknowledged the cycle in progress (an ack says its
    reduce completed: its work up to the ack is in)."""
    in_model = r.acked_steps if acked else r.synced_steps
    synced = min(r.epoch_steps, max(0, in_model - r.epoch_start_steps))
    return remaining_slices(r.slices, synced, batch_size)


def hand_over(left: list[tuple[int, int]], survivors: list[RankState],
              epoch: int) -> list[tuple[RankState, ExtendPartition]]:
    """``left`` dealt to ``survivors`` (:func:`split_slices`): what each is told, in order, each
    piece counted in its slices and this epoch's extensions."""
    told = []
    for s, pieces in zip(survivors, split_slices(left, len(survivors))):
        for start, n in pieces:
            told.append((s, ExtendPartition(partition_offset=start, partition_size=n, epoch=epoch)))
            s.slices.append((start, n))
            s.given += n
            s.extended += n
            s.ext_sent += 1
    return told


def split_slices(slices: list[tuple[int, int]], parts: int) -> list[list[tuple[int, int]]]:
    """``slices`` dealt to ``parts`` takers as evenly as the sample count allows, each taking a run of
    consecutive samples in order (a run may span two slices, so a taker may get several pieces)."""
    total = sum(size for _, size in slices)
    shares = [n for _, n in split_range(0, total, parts)]
    out: list[list[tuple[int, int]]] = [[] for _ in range(parts)]
    taker, room = 0, shares[0] if shares else 0
    for start, size in slices:
        while size > 0:
            while room == 0:
                taker += 1
                room = shares[taker]
            n = min(size, room)
            out[taker].append((start, n))
            start, size, room = start + n, size - n, room - n
    return out


def join_refusal(c: CoordinatorConfig, msg: JoinRequest, *, joined: dict[int, RankState],
                 signature: str) -> str | None:
    """Why ``msg`` may not join the run, or None when it may (``joined``: the live incarnations)."""
    if msg.run_id != c.run_id:
        return "wrong run id"  # naming the run's id would hand it to whoever asks
    if msg.world_size != c.world_size:
        return f"world size {msg.world_size} does not match the run's {c.world_size}"
    if msg.rank >= c.world_size:
        return f"rank {msg.rank} is out of range for world size {c.world_size}"
    if msg.rank in joined:
        return f"rank {msg.rank} already joined (from {joined[msg.rank].name!r})"
    if msg.dataset_size and msg.dataset_size < c.dataset_size:
        return (f"rank {msg.rank} has {msg.dataset_size} samples, fewer than the run's dataset_size "
                f"{c.dataset_size}: its slices would run past its data")
    if signature and msg.model_signature != signature:
        return f"model signature {msg.model_signature!r} does not match {signature!r}"
    return None
