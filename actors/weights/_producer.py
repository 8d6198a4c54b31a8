"""The weight producer: one actor per trainer rank, serving that rank's groups to consumers.

Per sync (publish -> serve -> free_group -> release, each step a message):

1. ``BeginSync(sync_id, live_consumer_ids)`` from the rank's trainer thread
   (the :class:`~._sender.WeightSender`).  The live set has no default: a
   release counted against a wrong number of consumers frees memory under a
   reader.  Messages of this sync that arrived before it were kept and are
   handled now.
2. ``PublishGroup`` never blocks: the group's tensors (``local`` refs into the
   trainer process) become servable; pulls waiting for them are served; a
   group every live consumer already freed is released at once.
3. ``PullRequest(seq, names)`` from a consumer: names this rank does not
   serve fail the sync at once (naming them); otherwise, once every name is
   published, the producer's effects adapter packs them into the consumer's
   serve slot ``seq % K`` (``PackPull`` -> ``PullPacked``, see
   :mod:`._effects`) and ``PullReply`` points at them.
4. ``FreeGroup`` counts distinct live consumers; at the live count the group
   is released: ``GroupsFreed`` goes to the trainer thread, the credit for its
   gather loop and the only channel for it.
5. ``EndSync`` from the trainer thread once every group came back.

A failure (the trainer's gather error, a consumer's or its own) ends the sync
with ``SyncFailed`` to the trainer thread and every live consumer, so that no
one waits for a sync that cannot finish.  A live consumer that goes down
while it still owes frees fails the sync at once; otherwise the stall
watchdog does, after ``stall_timeout`` seconds without any publish, pull or
free.
"""

from __future__ import annotations

import msgspec

from actorwire.actors import _names
from actorwire.actors.runtime._actor import Actor, effects_name, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.runtime._replay import register_replayable
from actorwire.actors.weights._heard import heard
from actorwire.actors.weights._plan import WeightPlan
from actorwire.messages import Message
from actorwire.messages.kinds import (
    BeginSync,
    Down,
    EndSync,
    FreeGroup,
    GroupsFreed,
    PackPull,
    Plane,
    PublishGroup,
    PullPacked,
    PullReply,
    PullRequest,
    ReserveRing,
    ReserveServeBuffer,
    RingReserved,
    ServeBufferReserved,
    SyncFailed,
    TensorRef,
    TimerFired,
)
from actorwire.transport.internal import InvalidArgument, choose_plane, settings

DEFAULT_STALL_TIMEOUT = 300.0


def consumer_name(prefix: str, consumer_id: int) -> str:
    return _names.consumer(prefix, consumer_id)


@register_replayable
class WeightProducer(Actor):
    """Serves one trainer rank's weights; see the module docstring for the protocol."""

    def __init__(self, rank: int, plan: WeightPlan, *, plane: str | None = None, device: str = "cpu",
                 stall_timeout: float = DEFAULT_STALL_TIMEOUT, prefix: str = "weights",
                 digests: bool | None = None, host: str = "") -> None:
        if stall_timeout <= 0:
            raise InvalidArgument(f"stall_timeout must be positive, not {stall_timeout}")
        self.rank = rank
        if not isinstance(plan, WeightPlan):  # as decoded from a spawn config or a recording
            plan = msgspec.convert(plan, WeightPlan)
        self.plan = plan
        #: The plane every consumer is served on, when one was forced; None: chosen per consumer, by
        #: whether it is on this producer's ``host`` (cuda_ipc or shm) or elsewhere (frames).
        self.plane = plane
        self.host = host
        #: Serve ring -> the plane it was reserved on (its sharers are on one host).
        self.ring_plane: dict[int, Plane] = {}
        self.device = device
        self.stall_timeout = stall_timeout
        self.prefix = prefix
        #: Content digests in every served ref (default: ``$ACTORWIRE_RECORD_DIGESTS=1``), so a
        #: recording shows which bytes each pull carried.
        self.digests = settings().record_digests if digests is None else digests
        self.served = plan.served_names(rank)
        self.owned = set(plan.owned_groups(rank))
        self.group_of = plan.group_of()
        #: Serve ring -> its slot size, as the adapter reported it.
        self.slot_nbytes: dict[int, int] = {}
        #: Serve ring -> [reservations on their way to the adapter, consumers to answer].
        self.reserving: dict[int, tuple[list[int], list[tuple[int, str]]]] = {}
        #: (ring, seq) -> (sync, the sharers to answer) while the adapter packs it.
        self.packing: dict[tuple[int, int], tuple[int, dict[int, tuple[PullRequest, str]]]] = {}
        #: Group -> packs in flight that read it (it is not released before they are done).
        self.packing_groups: dict[int, int] = {}
        # Per sync.
        self.sync_id = 0
        self.active = False
        self.failed: str | None = None
        self.live: set[int] = set()
        self.reply_to = ""
        self.published: dict[int, dict[str, TensorRef]] = {}
        self.frees: dict[int, set[int]] = {}
        self.released: set[int] = set()
        self.pending: list[tuple[PullRequest, str]] = []
        self.last_progress = 0.0
        self.early: dict[int, list[tuple[Message, str]]] = {}
        self.served_pulls = 0
        #: Serve ring -> (the consumer that reserved it first, its pull-plan digest).
        self.ring_owner: dict[int, tuple[int, str]] = {}
        #: Shared pulls waiting for every live sharer: (ring, seq) -> {consumer: (request, sender)}.
        self.rendezvous: dict[tuple[int, int], dict[int, tuple[PullRequest, str]]] = {}
        #: The trainer thread whose word a sync's begin, publishes and end are.
        self.trainer = _names.weight_sender(prefix, rank)
        #: Messages ignored because their sender may not say them, by sender (``_heard``).
        self.ignored: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def effects(self, name: str) -> Actor | None:
        from actorwire.actors.weights._effects import ProducerEffects

        default = self.plane or choose_plane(self.device, same_host=True).value
        return ProducerEffects(name, plane=default, device=self.device, digests=self.digests)

    def on_start(self, ctx: Context) -> None:
        self.io = effects_name(ctx.name)
        ctx.start_timer("stall", min(5.0, self.stall_timeout / 4), periodic=True)

    def _from_io(self, kind: str, ctx: Context) -> bool:
        if ctx.sender == self.io:
            return True
        ctx.log.warning("weights.forged_effect", kind=kind, sender=ctx.sender)
        return False

    def _from_trainer(self, msg: Message, ctx: Context) -> bool:
        return heard(self.ignored, ctx.sender, msg, ctx.sender == self.trainer, ctx.log, expected=self.trainer)

    def _from_consumer(self, msg: ReserveServeBuffer | PullRequest | FreeGroup, ctx: Context) -> bool:
        """A consumer speaks only for itself: a free counted for another consumer releases a group
        under its reader, and a pull or reservation in its name has its reply sent elsewhere."""
        name = consumer_name(self.prefix, msg.consumer_id)
        return heard(self.ignored, ctx.sender, msg, ctx.sender == name, ctx.log, expected=name)

    # -- consumers' init ---------------------------------------------------------------------

    @handler
    def on_reserve(self, msg: ReserveServeBuffer, ctx: Context) -> None:
        if not self._from_consumer(msg, ctx):
            return
        sender = consumer_name(self.prefix, msg.consumer_id)
        digest = msg.plan_digest or ""
        if digest.split(":", 1)[0] != self.plan.digest:
            reason = (f"consumer {msg.consumer_id} was built from weight plan {digest.split(':', 1)[0]}, producer "
                      f"rank {self.rank} serves plan {self.plan.digest}: rebuild the consumer from the trainer's plan")
            self._refuse_reservation(ctx, sender, msg.consumer_id, "weights.plan_mismatch", reason)
            return
        key = self.plan.ring_key(msg.consumer_id)
        same_host = not msg.host or not self.host or msg.host == self.host
        try:
            plane = choose_plane(self.device, same_host=same_host, force=self.plane, environment=False)
        except InvalidArgument as exc:  # a forced plane this consumer cannot be served on
            reason = f"consumer {msg.consumer_id} (host {msg.host or 'this one'}): {exc}"
            self._refuse_reservation(ctx, sender, msg.consumer_id, "weights.no_plane", reason)
            return
        known = self.ring_plane.get(key)
        if known is not None and known is not plane and self.ring_owner.get(key, (msg.consumer_id,))[0] != msg.consumer_id:
            reason = (f"consumer {msg.consumer_id} shares serve ring {key} on producer rank {self.rank} with consumer "
                      f"{self.ring_owner[key][0]}, which is served on {known.value}, but would be served on "
                      f"{plane.value} (another host): consumers sharing a ring must be on one host")
            self._refuse_reservation(ctx, sender, msg.consumer_id, "weights.shared_ring_across_hosts", reason)
            return
        first = self.ring_owner.get(key)
        if first is not None and first[1] != digest and first[0] != msg.consumer_id:
            reason = (f"consumers {first[0]} and {msg.consumer_id} share serve ring {key} on producer rank "
                      f"{self.rank} but their pull plans differ ({first[1]} vs {digest}); sharers must want the "
                      f"same weights")
            self._refuse_reservation(ctx, sender, msg.consumer_id, "weights.shared_plan_mismatch", reason)
            return
        pending = self.reserving.get(key)
        if first is None or first[0] == msg.consumer_id or self.slot_nbytes.get(key, 0) < msg.nbytes:
            self.ring_owner[key] = (msg.consumer_id, digest)
            if pending is None:
                self.reserving[key] = pending = ([0], [])
            pending[0][0] += 1
            pending[1].append((msg.consumer_id, sender))
            self.ring_plane[key] = plane
            ctx.tell(self.io, ReserveRing(ring=key, slots=self.plan.slots, nbytes=max(msg.nbytes, 1), plane=plane,
                                          toward="" if same_host else msg.address))
        elif pending is not None:  # the ring is being (re)allocated: answer with its final size
            pending[1].append((msg.consumer_id, sender))
        else:
            ctx.tell(sender, ServeBufferReserved(consumer_id=msg.consumer_id, slots=self.plan.slots,
                                                 slot_nbytes=self.slot_nbytes[key], plane=self.ring_plane.get(key)))

    @staticmethod
    def _refuse_reservation(ctx: Context, sender: str, consumer_id: int, event: str, reason: str) -> None:
        """A reservation this producer will not serve: logged, and the consumer told why (every sync of
        it then fails with that reason)."""
        ctx.log.error(event, consumer=consumer_id, reason=reason)
        ctx.tell(sender, SyncFailed(sync_id=0, reason=reason))

    @handler
    def on_ring_reserved(self, msg: RingReserved, ctx: Context) -> None:
        if not self._from_io("ring_reserved", ctx):
            return
        pending = self.reserving.get(msg.ring)
        if pending is None:
            return
        pending[0][0] -= 1
        if msg.error is None:
            self.slot_nbytes[msg.ring] = msg.slot_nbytes
        if pending[0][0] > 0 and msg.error is None:
            return  # a larger reservation is still on its way
        del self.reserving[msg.ring]
        for cid, sender in pending[1]:
            if msg.error is not None:
                ctx.tell(sender, SyncFailed(sync_id=0, reason=(
                    f"producer rank {self.rank} could not reserve serve ring {msg.ring}: {msg.error}")))
            else:
                ctx.tell(sender, ServeBufferReserved(consumer_id=cid, slots=self.plan.slots,
                                                     slot_nbytes=self.slot_nbytes[msg.ring],
                                                     plane=self.ring_plane.get(msg.ring)))

    # -- the sync ----------------------------------------------------------------------------

    def _progress(self, ctx: Context) -> None:
        self.last_progress = ctx.now()

    def _route(self, sync_id: int, msg: Message, ctx: Context) -> bool:
        """True when ``msg`` belongs to the current sync; early ones are kept, stale ones dropped."""
        if self.active and sync_id == self.sync_id:
            return True
        if sync_id > self.sync_id:
            self.early.setdefault(sync_id, []).append((msg, ctx.sender or ""))
        else:
            ctx.log.warning("weights.stale_message", kind=type(msg).wire_tag(), sync_id=sync_id,
                            current=self.sync_id)
        return False

    @handler
    def on_begin(self, msg: BeginSync, ctx: Context) -> None:
        if not self._from_trainer(msg, ctx):
            return
        if self.active and self.failed is None:
            ctx.log.warning("weights.sync_abandoned", sync_id=self.sync_id, next=msg.sync_id)
        if msg.sync_id <= self.sync_id:
            ctx.tell(ctx.sender or "", SyncFailed(sync_id=msg.sync_id, reason=(
                f"producer rank {self.rank}: sync {msg.sync_id} is not after sync {self.sync_id}")))
            return
        for cid in self.live:
            ctx.unwatch(consumer_name(self.prefix, cid))
        self.sync_id, self.active, self.failed = msg.sync_id, True, None
        self.packing, self.packing_groups = {}, {}
        self.live = set(msg.live_consumer_ids)
        self.reply_to = ctx.sender or ""
        self.published, self.frees, self.released, self.pending = {}, {}, set(), []
        self.rendezvous = {}
        self._progress(ctx)
        for cid in sorted(self.live):
            ctx.watch(consumer_name(self.prefix, cid))
        for early, sender in self.early.pop(msg.sync_id, []):
            self._replay_early(early, sender, ctx)
        self.early = {s: v for s, v in self.early.items() if s > msg.sync_id}

    def _replay_early(self, msg: Message, sender: str, ctx: Context) -> None:
        if isinstance(msg, PullRequest):
            self._pull(msg, sender, ctx)
        elif isinstance(msg, FreeGroup):
            self._free(msg, ctx)
        elif isinstance(msg, SyncFailed):
            self._fail(msg.reason, ctx)

    @handler
    def on_publish(self, msg: PublishGroup, ctx: Context) -> None:
        if not self._from_trainer(msg, ctx) or not self._route(msg.sync_id, msg, ctx) or self.failed is not None:
            return
        if msg.group_idx not in self.owned:
            self._fail(f"producer rank {self.rank}: group {msg.group_idx} published, but this rank holds none "
                       f"of its names", ctx)
            return
        self.published[msg.group_idx] = msg.tensors
        self._progress(ctx)
        waiting, self.pending = self.pending, []
        for pull, sender in waiting:
            self._pull(pull, sender, ctx)
        self._maybe_release(msg.group_idx, ctx)

    @handler
    def on_pull(self, msg: PullRequest, ctx: Context) -> None:
        if not self._from_consumer(msg, ctx):
            return
        if self._route(msg.sync_id, msg, ctx):
            self._pull(msg, consumer_name(self.prefix, msg.consumer_id), ctx)
        elif msg.sync_id < self.sync_id or (msg.sync_id == self.sync_id and not self.active):
            ctx.tell(ctx.sender or "", SyncFailed(sync_id=msg.sync_id, reason=(
                f"producer rank {self.rank}: sync {msg.sync_id} is over")))

    def _pull(self, msg: PullRequest, sender: str, ctx: Context) -> None:
        if self.failed is not None:
            ctx.tell(sender, SyncFailed(sync_id=self.sync_id, reason=self.failed))
            return
        wrong = [n for n in msg.names if n not in self.served]
        if wrong:
            self._fail(f"consumer {msg.consumer_id} pulled {wrong} from producer rank {self.rank}, which does "
                       f"not serve them (a misrouted pull)", ctx)
            return
        if msg.consumer_id not in self.live:
            ctx.tell(sender, SyncFailed(sync_id=self.sync_id, reason=(
                f"consumer {msg.consumer_id} is not in the live set {sorted(self.live)} of sync {self.sync_id}")))
            return
        groups = {self.group_of[n] for n in msg.names}
        released = sorted(g for g in groups if g in self.released)
        if released:
            self._fail(f"consumer {msg.consumer_id} pulled group(s) {released} after they were released", ctx)
            return
        if any(g not in self.published for g in groups):
            self.pending.append((msg, sender))
            return
        key = self.plan.ring_key(msg.consumer_id)
        sharers = {c for c in self.live if self.plan.ring_key(c) == key}
        waiting = self.rendezvous.setdefault((key, msg.seq), {})
        waiting[msg.consumer_id] = (msg, sender)
        other = next((req for c, (req, _) in waiting.items() if req.names != msg.names), None)
        if other is not None:
            self._fail(f"consumers {other.consumer_id} and {msg.consumer_id} share serve ring {key} but pulled "
                       f"different names as pull {msg.seq}", ctx)
            return
        if not sharers <= set(waiting):
            self._progress(ctx)
            return  # the last sharer to arrive packs, once, for all of them
        del self.rendezvous[(key, msg.seq)]
        self.packing[(key, msg.seq)] = (self.sync_id, waiting)
        for g in groups:  # not released while the adapter reads it
            self.packing_groups[g] = self.packing_groups.get(g, 0) + 1
        self._progress(ctx)
        ctx.tell(self.io, PackPull(ring=key, seq=msg.seq,
                                   tensors={n: self.published[self.group_of[n]][n] for n in msg.names}))

    @handler
    def on_packed(self, msg: PullPacked, ctx: Context) -> None:
        if not self._from_io("pull_packed", ctx):
            return
        entry = self.packing.pop((msg.ring, msg.seq), None)
        if entry is None:
            return
        sync_id, waiting = entry
        request = next(iter(waiting.values()))[0]
        groups = sorted({self.group_of[n] for n in request.names})
        if sync_id != self.sync_id:
            return  # an older sync's pack (the counts were reset at this one's begin)
        for g in groups:
            self.packing_groups[g] -= 1
        if not self.active or self.failed is not None:
            return  # the sync ended while the adapter packed
        if msg.error is not None:  # a pack failure fails the sync (every sharer), never a half-written slot
            for g in groups:
                self._maybe_release(g, ctx)
            self._fail(f"producer rank {self.rank} could not serve pull {msg.seq} of consumer(s) "
                       f"{sorted(waiting)}: {msg.error}", ctx)
            return
        self.served_pulls += 1
        self._progress(ctx)
        for cid, (_, to) in sorted(waiting.items()):
            ctx.tell(to, PullReply(sync_id=sync_id, consumer_id=cid, seq=msg.seq, tensors=msg.tensors))
        for g in groups:
            self._maybe_release(g, ctx)

    @handler
    def on_free(self, msg: FreeGroup, ctx: Context) -> None:
        if self._from_consumer(msg, ctx) and self._route(msg.sync_id, msg, ctx):
            self._free(msg, ctx)

    def _free(self, msg: FreeGroup, ctx: Context) -> None:
        if self.failed is not None:
            return
        if msg.consumer_id not in self.live:
            ctx.log.warning("weights.free_from_unknown", consumer=msg.consumer_id, group=msg.group_idx)
            return
        if msg.group_idx not in self.owned:
            ctx.log.warning("weights.free_not_owned", consumer=msg.consumer_id, group=msg.group_idx)
            return
        counted = self.frees.setdefault(msg.group_idx, set())
        if msg.consumer_id in counted:
            ctx.log.warning("weights.duplicate_free", consumer=msg.consumer_id, group=msg.group_idx)
            return
        counted.add(msg.consumer_id)
        self._progress(ctx)
        self._maybe_release(msg.group_idx, ctx)

    def _maybe_release(self, group: int, ctx: Context) -> None:
        if (group in self.published and group not in self.released and not self.packing_groups.get(group)
                and len(self.frees.get(group, ())) >= len(self.live)):
            self.released.add(group)
            del self.published[group]
            ctx.tell(self.reply_to, GroupsFreed(sync_id=self.sync_id, groups=[group]))

    @handler
    def on_end(self, msg: EndSync, ctx: Context) -> None:
        if not self._from_trainer(msg, ctx):
            return
        if msg.sync_id != self.sync_id or not self.active:
            return
        if self.published and self.failed is None:
            self._fail(f"producer rank {self.rank}: end of sync with group(s) {sorted(self.published)} still "
                       f"in flight", ctx)
        self._finish(ctx)

    def _finish(self, ctx: Context) -> None:
        self.active = False
        self.published, self.pending = {}, []
        for cid in sorted(self.live):
            ctx.unwatch(consumer_name(self.prefix, cid))

    # -- failure -----------------------------------------------------------------------------

    @handler
    def on_failed(self, msg: SyncFailed, ctx: Context) -> None:
        """A gather error from the trainer thread, or a consumer giving up."""
        sender = ctx.sender or ""
        allowed = sender == self.trainer or _names.consumer_id(sender, self.prefix) is not None
        if not heard(self.ignored, ctx.sender, msg, allowed, ctx.log, expected=f"{self.trainer} or a consumer"):
            return
        if self._route(msg.sync_id, msg, ctx):
            self._fail(msg.reason, ctx)

    def _fail(self, reason: str, ctx: Context) -> None:
        if self.failed is not None:
            return
        self.failed = reason
        ctx.log.error("weights.sync_failed", sync_id=self.sync_id, rank=self.rank, reason=reason)
        failure = SyncFailed(sync_id=self.sync_id, reason=reason)
        if self.reply_to:
            ctx.tell(self.reply_to, failure)
        for cid in sorted(self.live):
            name = consumer_name(self.prefix, cid)
            if name in ctx.names():
                ctx.tell(name, failure)
        self.pending = []
        # The trainer thread drops its groups on the failure; nothing here serves them any more.
        self.published = {}

    def owed(self) -> dict[int, list[int]]:
        """Live consumer -> owned groups it has not freed yet (this sync)."""
        return {cid: [g for g in sorted(self.owned) if cid not in self.frees.get(g, ())] for cid in sorted(self.live)}

    @handler
    def on_down(self, msg: Down, ctx: Context) -> None:
        if not self.active or self.failed is not None:
            return
        for cid, groups in self.owed().items():
            if consumer_name(self.prefix, cid) == msg.name and groups:
                self._fail(f"consumer {cid} ({msg.name}) went down ({msg.reason.value}) in sync {self.sync_id} "
                           f"owing frees for group(s) {groups}", ctx)

    @handler
    def on_tick(self, msg: TimerFired, ctx: Context) -> None:
        if msg.key != "stall" or not self.active or self.failed is not None:
            return
        idle = ctx.now() - self.last_progress
        if idle >= self.stall_timeout:
            owing = {cid: g for cid, g in self.owed().items() if g}
            self._fail(f"weight sync {self.sync_id} stalled on producer rank {self.rank}: no publish, pull or "
                       f"free for {idle:.0f} s (limit {self.stall_timeout:g} s); consumers still owing frees: "
                       f"{owing or 'none'}; groups published and not freed: {sorted(self.published)}", ctx)
