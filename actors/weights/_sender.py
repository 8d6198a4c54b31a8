"""The trainer side of weight transfer: ownership, the producer, and the gather loop.

Every trainer rank builds one :class:`WeightSender` over its
:class:`~._weights.WeightSource`.  Construction resolves ownership across
ranks (each rank tells the others its held-name bitmask and metadata digest
over the bus, as ``HeldNames``), builds the :class:`~._weights.WeightPlan`
and starts this rank's :class:`~._producer.WeightProducer`.  Then, on every
rank, once per sync::

    report = sender.send_weights()          # or send_weights(live_consumer_ids=[0, 2])

runs the gather loop: ``BeginSync`` to the producer (rank 0 also tells it to
the live consumers), then for each group this rank owns, the **credit
gate** (while more than ``lookahead`` groups are resident, wait for
``GroupsFreed``), the gather (``next()`` on the source), the held-names
check, and ``PublishGroup``.  It returns once every group came back and,
on rank 0, every live consumer reported ``EndSync``; any failure raises
:class:`~._weights.WeightSyncError` with the reason, on every rank.  Rank 0 watches the live
consumers for the length of the sync: one that goes down before its ``EndSync`` fails the sync
at once, even when it had freed every group.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from actorwire.actors import _names
from actorwire.actors.weights._heard import heard
from actorwire.actors.weights._plan import (
    WeightPlan,
    WeightSource,
    WeightSyncError,
    bitmask,
    build_plan,
    names_digest,
    resolve_ownership,
)
from actorwire.actors.weights._producer import (
    DEFAULT_STALL_TIMEOUT,
    WeightProducer,
    consumer_name,
)
from actorwire.messages import Message
from actorwire.messages.kinds import BeginSync, Down, EndSync, GroupsFreed, HeldNames, PublishGroup, SyncFailed
from actorwire.transport.internal import InvalidArgument, get_logger
from actorwire.transport.internal import local_plane as _local

if TYPE_CHECKING:
    from actorwire.actors.runtime._system import ActorSystem


@dataclasses.dataclass
class SyncReport:
    """What one ``send_weights`` did on this rank."""

    sync_id: int
    groups: int
    bytes: int
    seconds: float
    #: Most groups resident at once (the credit gate keeps it at or under lookahead + 1).
    max_resident: int
    #: Consumers that reported the sync done (rank 0 only).
    consumers_done: list[int]
    #: Digest of the weights each consumer holds after the sync (rank 0; consumers that report one).
    consumer_digests: dict[int, str] = dataclasses.field(default_factory=dict)


class WeightSender:
    """One trainer rank's end of weight transfer; see the module docstring."""

    def __init__(self, system: ActorSystem, source: WeightSource, *, consumer_ids: list[int], rank: int = 0,
                 world_size: int = 1, lookahead: int = 1, slots: int = 2, plane: str | None = None,
                 device: str = "cpu", stall_timeout: float = DEFAULT_STALL_TIMEOUT, prefix: str = "weights",
                 init_timeout: float = 60.0, workers_per_replica: int = 0) -> None:
        if lookahead < 0:
            raise InvalidArgument(f"lookahead must be >= 0, not {lookahead}")
        if not 0 <= rank < world_size:
            raise InvalidArgument(f"rank {rank} is outside a world of {world_size}")
        self.system, self.source = system, source
        self.rank, self.world_size = rank, world_size
        self.consumer_ids = sorted(consumer_ids)
        self.lookahead, self.prefix = lookahead, prefix
        self.stall_timeout = stall_timeout
        self.log = get_logger(actor=_names.weight_sender(prefix, rank), rank=rank)
        self.inbox = system.inbox(_names.weight_sender(prefix, rank))
        #: Messages ignored because their sender may not say them, by sender (``_heard``).
        self.ignored: dict[str, int] = {}
        self._held_early: dict[int, HeldNames] = {}
        meta = source.metadata()
        names = [p.name for p in meta]
        held = source.held_names()
        unknown = sorted(held - set(names))
        if unknown:
            raise WeightSyncError(f"rank {rank} holds names that are not in the metadata: {unknown}")
        digests, masks = self._exchange_held(names_digest(names, meta), bitmask(names, held), init_timeout)
        holders = resolve_ownership(names, digests, masks)
        self.plan: WeightPlan = build_plan(meta, holders, [_names.producer(prefix, r) for r in range(world_size)],
                                           slots=slots, workers_per_replica=workers_per_replica)
        self.groups = self.plan.groups()
        self.owned = set(self.plan.owned_groups(rank))
        self.held = held
        from actorwire.transport.internal import choose_plane, host_identity, settings

        forced = plane or settings().plane or None
        if forced:
            choose_plane(device, same_host=True, force=forced)  # a plane that cannot carry these weights: now
        # Unless a plane is forced, the producer serves each consumer on the plane its host allows:
        # cuda_ipc or shm for this host's consumers, frames for the others.
        self.producer = system.spawn(WeightProducer(rank, self.plan, plane=forced, device=device,
                                                    stall_timeout=stall_timeout, prefix=prefix, host=host_identity()),
                                     _names.producer(prefix, rank))
        self.sync_id = 0
        self.log.info("weights.sender_ready", groups=len(self.groups), owned=len(self.owned),
                      plane=forced or "per consumer", plan=self.plan.digest)

    # -- init --------------------------------------------------------------------------------

    def _exchange_held(self, digest: str, mask: bytes, timeout: float) -> tuple[list[str], list[bytes]]:
        mine = HeldNames(rank=self.rank, world_size=self.world_size, digest=digest, held=mask)
        got: dict[int, HeldNames] = {self.rank: mine}
        peers = [_names.weight_sender(self.prefix, r) for r in range(self.world_size) if r != self.rank]
        for peer in peers:
            self.system.wait_for(peer, timeout)
            self.inbox.tell(peer, mine)
        deadline = time.monotonic() + timeout
        while len(got) < self.world_size:
            left = deadline - time.monotonic()
            item = self.inbox.get(timeout=max(left, 0)) if left > 0 else None
            if item is None:
                missing = sorted(set(range(self.world_size)) - set(got))
                raise WeightSyncError(f"rank {self.rank}: no held names from rank(s) {missing} within {timeout:g} s")
            msg = item.message
            if isinstance(msg, HeldNames) and self._heard(item.sender, msg, item.sender == _names.weight_sender(
                    self.prefix, msg.rank), expected=_names.weight_sender(self.prefix, msg.rank)):
                if msg.world_size != self.world_size:
                    raise WeightSyncError(f"rank {msg.rank} says the trainer world has {msg.world_size} ranks, "
                                          f"rank {self.rank} says {self.world_size}")
                got[msg.rank] = msg
        ordered = [got[r] for r in range(self.world_size)]
        return [h.digest for h in ordered], [h.held for h in ordered]

    # -- one sync ----------------------------------------------------------------------------

    def send_weights(self, live_consumer_ids: list[int] | None = None) -> SyncReport:
        """Run one sync on this rank (every rank calls it, with the same live set)."""
        live = self.consumer_ids if live_consumer_ids is None else sorted(live_consumer_ids)
        unknown = sorted(set(live) - set(self.consumer_ids))
        if unknown:
            raise InvalidArgument(f"live consumers {unknown} are not consumers of this sender ({self.consumer_ids})")
        self.sync_id += 1
        sync_id = self.sync_id
        started = time.perf_counter()
        begin = BeginSync(sync_id=sync_id, live_consumer_ids=live)
        self.inbox.tell(self.producer, begin)
        pending_consumers = set(live) if self.rank == 0 else set()
        watched = [consumer_name(self.prefix, cid) for cid in sorted(pending_consumers)]
        for name in watched:
            # Rank 0 waits for every consumer's EndSync.  Once the producer has its groups back it no
            # longer watches them, so a consumer that dies after its last free and before its EndSync
            # was noticed by no one: the trainer waited out stall_timeout + 30 s.
            self.inbox.watch(name)
            self.inbox.tell(name, begin)
        inflight: dict[int, bytes] = {}
        state: dict[str, Any] = {"done": [], "max": 0, "bytes": 0, "digests": {}}
        published = 0
        try:
            if not live:  # nobody to free anything: nothing may be published
                self.inbox.tell(self.producer, EndSync(sync_id=sync_id))
                return SyncReport(sync_id, 0, 0, time.perf_counter() - started, 0, [])
            source_iter = iter(self.source.iter_groups(self.groups))
            for g, names in enumerate(self.groups):
                while len(inflight) > self.lookahead:  # the credit gate
                    self._drop(inflight, self._wait_freed(sync_id, pending_consumers, state))
                try:
                    tensors = next(source_iter)
                except StopIteration:
                    raise WeightSyncError(f"rank {self.rank}: the source stopped after {g} of "
                                          f"{len(self.groups)} groups") from None
                held = self._check_yield(g, names, tensors)
                if not held:
                    continue
                key, refs = _local.put(held)
                inflight[g] = key
                state["max"] = max(state["max"], len(inflight))
                state["bytes"] += sum(r.nbytes for r in refs.values())
                self.inbox.tell(self.producer, PublishGroup(sync_id=sync_id, group_idx=g, tensors=refs))
                published += 1
            while inflight:
                self._drop(inflight, self._wait_freed(sync_id, pending_consumers, state))
            self.inbox.tell(self.producer, EndSync(sync_id=sync_id))
            while pending_consumers:
                self._wait_freed(sync_id, pending_consumers, state)
        except BaseException as exc:
            reason = exc.args[0] if isinstance(exc, WeightSyncError) and exc.args else \
                f"rank {self.rank} gather loop: {exc!r}"
            self.inbox.tell(self.producer, SyncFailed(sync_id=sync_id, reason=reason))  # wakes every waiter
            for key in inflight.values():
                _local.drop(key)
            if isinstance(exc, WeightSyncError):
                raise
            raise WeightSyncError(reason) from exc
        finally:
            for name in watched:
                self.inbox.unwatch(name)
        report = SyncReport(sync_id, published, state["bytes"], time.perf_counter() - started, state["max"],
                            sorted(state["done"]), state["digests"])
        self.log.info("weights.synced", sync_id=sync_id, groups=published, bytes=report.bytes,
                      seconds=round(report.seconds, 4), max_resident=report.max_resident)
        return report

    def _check_yield(self, g: int, names: list[str], tensors: dict[str, Any]) -> dict[str, Any]:
        if list(tensors) != names:
            raise WeightSyncError(f"rank {self.rank}: group {g} yielded {list(tensors)}, the plan has {names}")
        held = {}
        for name, t in tensors.items():
            if name in self.held and t is None:
                raise WeightSyncError(f"rank {self.rank} holds {name!r} but its source yielded None for it")
            if name not in self.held and t is not None:
                raise WeightSyncError(f"rank {self.rank} does not hold {name!r} but its source yielded a tensor")
            if t is not None:
                held[name] = t
        return held

    def _wait_freed(self, sync_id: int, pending_consumers: set[int], state: dict[str, Any]) -> list[int]:
        """Block until the producer frees groups or a consumer finishes; raise on failure, never spin."""
        limit = self.stall_timeout + 30.0  # the producer's watchdog fires first; this guards a dead producer
        deadline = time.monotonic() + limit
        while True:
            item = self.inbox.get(timeout=min(1.0, max(deadline - time.monotonic(), 0)))
            if item is None:
                if time.monotonic() >= deadline:
                    raise WeightSyncError(f"rank {self.rank}: nothing from producer or consumers of sync {sync_id} "
                                          f"for {limit:g} s")
                continue
            msg = item.message
            # Freed groups are dropped here (the producer must be done with them); a failure ends the sync.
            if isinstance(msg, GroupsFreed) and msg.sync_id == sync_id and self._heard(
                    item.sender, msg, item.sender == self.producer, expected=self.producer):
                return msg.groups
            if isinstance(msg, SyncFailed) and msg.sync_id == sync_id and self._heard(
                    item.sender, msg, item.sender == self.producer or _consumer_id(item.sender, self.prefix) is not None,
                    expected=f"{self.producer} or a consumer"):
                raise WeightSyncError(msg.reason)
            if isinstance(msg, Down):
                cid = _consumer_id(msg.name, self.prefix)
                # A Down left over from an earlier sync names an incarnation that may since have
                # come back: only a consumer that is still gone fails this sync.
                if cid in pending_consumers and msg.name not in self.system.names():
                    raise WeightSyncError(f"consumer {cid} ({msg.name}) went down ({msg.reason.value}) before it "
                                          f"reported sync {sync_id} done: {msg.detail}")
                continue
            if isinstance(msg, EndSync) and msg.sync_id == sync_id:
                cid = _consumer_id(item.sender, self.prefix)
                if cid is not None:
                    pending_consumers.discard(cid)
                    state["done"].append(cid)
                    if msg.digest is not None:
                        state["digests"][cid] = msg.digest
                return []
            self.log.debug("weights.sender_ignored", kind=type(msg).wire_tag(), sender=item.sender)

    def _heard(self, sender: str, msg: Message, allowed: bool, **expected: Any) -> bool:
        return heard(self.ignored, sender, msg, allowed, self.log, **expected)

    def _drop(self, inflight: dict[int, bytes], groups: list[int]) -> None:
        for g in groups:
            key = inflight.pop(g, None)
            if key is not None:
                _local.drop(key)

    def close(self) -> None:
        self.system.stop(self.producer)
        self.inbox.close()


def _consumer_id(sender: str, prefix: str) -> int | None:
    return _names.consumer_id(sender, prefix)
