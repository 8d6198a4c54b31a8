"""The weight consumer: pulls a sync's weights into its model's tensors.

At start it reserves a ring of ``K`` serve slots on every producer of its
plan (``ReserveServeBuffer`` with the plan's digest: a consumer built from
another plan is refused).  Per sync, on ``BeginSync`` from the trainer:

1. groups it pulls nothing from are freed at once, at every owner;
2. its chunks (one per group and owning rank, in group order) are pulled
   with ``PullRequest``, each carrying the consumer's own issue index
   ``seq``; pull ``seq`` is issued only once pull ``seq - K`` has drained,
   since both use slot ``seq % K`` on the producer;
3. each ``PullReply`` is handed to the consumer's effects adapter
   (``WritePull`` to ``<name>/io``, see :mod:`._effects`), which copies it
   into the model's tensors; once ``PullWritten`` is back the slot may be
   reused, and when the last chunk of a group has drained, ``FreeGroup``
   goes to every owner of the group, exactly once;
4. after the last free, ``EndSync`` tells the trainer it is done.  Its
   frees were sent before, from this actor, so they reach each producer
   before anything it sends later: no free of this sync lands in the next.

A ``SyncFailed`` from any producer, or a watched producer going down, ends
the sync: the failure is passed to every producer and to the trainer.
"""

from __future__ import annotations

from typing import Any

import msgspec

from actorwire.actors import _names
from actorwire.actors.runtime._actor import Actor, effects_name, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.runtime._replay import register_replayable
from actorwire.actors.weights._heard import heard
from actorwire.actors.weights._plan import Chunk, WeightPlan
from actorwire.messages.kinds import (
    ActorDetail,
    BeginSync,
    DigestState,
    Down,
    EndSync,
    FreeGroup,
    Plane,
    PullReply,
    PullRequest,
    PullWritten,
    ReserveServeBuffer,
    ServeBufferReserved,
    StateDigest,
    SyncFailed,
    TimerFired,
    WritePull,
)
from actorwire.transport.internal import InvalidArgument

#: Seconds between attempts to reserve on producers that do not exist yet.
RESERVE_RETRY = 0.2


@register_replayable
class WeightConsumer(Actor):
    """Pulls weights into ``tensors`` (name -> tensor of the consumer's model, written in place)."""

    def __init__(self, consumer_id: int, plan: WeightPlan, *, tensors: dict[str, Any] | None = None,
                 wanted: list[str] | None = None, host: str | None = None, address: str | None = None) -> None:
        self.consumer_id = consumer_id
        if host is None or address is None:  # where this consumer runs, said at each reservation (recorded)
            from actorwire.transport.internal import host_address, host_identity

            host = host_identity() if host is None else host
            address = host_address() if address is None else address
        self.host, self.address = host, address
        #: Where the consumer keeps the weights (a model consumer says its device).
        self.device = "cpu"
        if not isinstance(plan, WeightPlan):  # as decoded from a spawn config or a recording
            plan = msgspec.convert(plan, WeightPlan)
        self.plan = plan
        self.tensors = tensors
        self.wanted = wanted
        self.chunks, self.empty_groups = plan.chunks(consumer_id, None if wanted is None else set(wanted))
        self.producer_ranks = sorted({c.rank for c in self.chunks} | {r for g in range(len(plan.group_lens))
                                                                      for r in plan.owners(g)})
        self.reserved: set[int] = set()
        #: Producer rank -> the plane it serves this consumer on (as its reservation said).
        self.planes: dict[int, str] = {}
        self.refused: str | None = None
        self.waiting: list[tuple[BeginSync, str]] = []
        # Per sync.
        self.sync_id = 0
        self.active = False
        self.reply_to = ""
        self.next_chunk = 0
        self.seq = 0  # issue index within the sync (consumers sharing a ring issue the same sequence)
        self.inflight: dict[int, Chunk] = {}
        #: Pulls handed to the adapter and not written yet: seq -> its chunk.
        self.writing: dict[int, Chunk] = {}
        self.remaining: dict[int, int] = {}
        self.syncs_done = 0
        self.bytes_pulled = 0
        #: Ask the adapter for the model's digest at the end of each sync (a model consumer does).
        self.digest_state = False
        #: Messages ignored because their sender may not say them, by sender (``_heard``).
        self.ignored: dict[str, int] = {}

    def config(self) -> dict[str, Any]:
        return {"consumer_id": self.consumer_id, "plan": self.plan, "wanted": self.wanted, "host": self.host,
                "address": self.address}

    def status(self, now: float) -> ActorDetail:
        """For ``actorwire status``: the sync, and the plane each producer serves this consumer on."""
        planes = dict(self.planes)
        return ActorDetail(phase="syncing" if self.active else "idle", notes={
            "sync": str(self.sync_id), "syncs done": str(self.syncs_done), "host": self.host,
            **{f"plane from rank {rank}": plane for rank, plane in sorted(planes.items())}})

    @property
    def ready(self) -> bool:
        return self.reserved >= set(self.producer_ranks)

    def effects(self, name: str) -> Actor | None:
        from actorwire.actors.weights._effects import ConsumerEffects

        return ConsumerEffects(name, tensors=self.tensors)

    def on_start(self, ctx: Context) -> None:
        self.io = effects_name(ctx.name)
        prefix = _names.consumer_prefix(ctx.name)
        #: The trainer thread that starts each sync: rank 0's, under this consumer's prefix.
        self.trainer = _names.weight_sender(prefix or "", 0)
        if prefix is None or _names.consumer_id(ctx.name, prefix) != self.consumer_id:
            # Producers and the trainer know a consumer by that name only: it would wait for ever.
            why = (f"weight consumer {self.consumer_id} runs as {ctx.name!r}; it must be named "
                   f"'<prefix>/consumer/{self.consumer_id}' (the prefix of the trainer's WeightSender)")
            ctx.log.error("weights.misnamed_consumer", reason=why)
            ctx.stop(failure=why)
            return
        self.asked: set[int] = set()
        self._reserve(ctx)

    def _reserve(self, ctx: Context) -> None:
        """Reserve a serve ring on every producer that exists; retry for the others (they may start later)."""
        need: dict[int, int] = {}
        for chunk in self.chunks:
            need[chunk.rank] = max(need.get(chunk.rank, 0), self.plan.chunk_bytes(chunk))
        names = set(ctx.names())
        for rank in self.producer_ranks:
            producer = self.plan.producers[rank]
            if rank in self.asked or producer not in names:
                continue
            self.asked.add(rank)
            ctx.watch(producer)
            wanted = None if self.wanted is None else set(self.wanted)
            ctx.tell(producer, ReserveServeBuffer(consumer_id=self.consumer_id, nbytes=need.get(rank, 16),
                                                  plan_digest=self.plan.pull_digest(self.consumer_id, rank, wanted),
                                                  host=self.host, address=self.address, device=self.device))
        if len(self.asked) < len(self.producer_ranks):
            ctx.start_timer("reserve", RESERVE_RETRY)
        else:
            ctx.cancel_timer("reserve")

    @handler
    def on_tick(self, msg: TimerFired, ctx: Context) -> None:
        if msg.key == "reserve":
            self._reserve(ctx)

    @handler
    def on_reserved(self, msg: ServeBufferReserved, ctx: Context) -> None:
        rank = self.plan.producers.index(ctx.sender) if ctx.sender in self.plan.producers else None
        if rank is None:
            ctx.log.warning("weights.unexpected_reservation", sender=ctx.sender)
            return
        self.reserved.add(rank)
        if msg.plane is not None:
            self.planes[rank] = Plane(msg.plane).value
        if self.ready:
            waiting, self.waiting = self.waiting, []
            for begin, sender in waiting:
                self._begin(begin, sender, ctx)

    @handler
    def on_begin(self, msg: BeginSync, ctx: Context) -> None:
        if not heard(self.ignored, ctx.sender, msg, ctx.sender == self.trainer, ctx.log, expected=self.trainer):
            return
        sender = self.trainer
        if self.refused is not None:
            ctx.tell(sender, SyncFailed(sync_id=msg.sync_id, reason=self.refused))
        elif not self.ready:
            self.waiting.append((msg, sender))
        else:
            self._begin(msg, sender, ctx)

    def _begin(self, msg: BeginSync, sender: str, ctx: Context) -> None:
        if self.active:
            self._abort(f"consumer {self.consumer_id}: sync {msg.sync_id} began before sync {self.sync_id} "
                        f"finished", ctx)
        self.sync_id, self.reply_to = msg.sync_id, sender
        if self.consumer_id not in msg.live_consumer_ids:
            ctx.tell(sender, EndSync(sync_id=msg.sync_id))  # not live in this sync: nothing to pull
            return
        self.active = True
        self.next_chunk = 0
        self.seq = 0  # every pull of the last sync has drained: slots are free
        self.inflight = {}
        self.remaining = {}
        for chunk in self.chunks:
            self.remaining[chunk.group] = self.remaining.get(chunk.group, 0) + 1
        for group in self.empty_groups:
            self._free(group, ctx)
        self._issue(ctx)
        self._maybe_done(ctx)

    def _free(self, group: int, ctx: Context) -> None:
        for rank in self.plan.owners(group):
            ctx.tell(self.plan.producers[rank], FreeGroup(sync_id=self.sync_id, group_idx=group,
                                                          consumer_id=self.consumer_id))

    def _issue(self, ctx: Context) -> None:
        k = self.plan.slots
        while self.next_chunk < len(self.chunks) and len(self.inflight) < k and (self.seq - k) not in self.inflight:
            chunk = self.chunks[self.next_chunk]
            self.inflight[self.seq] = chunk
            ctx.tell(self.plan.producers[chunk.rank], PullRequest(
                sync_id=self.sync_id, consumer_id=self.consumer_id, seq=self.seq, names=chunk.names))
            self.seq += 1
            self.next_chunk += 1

    @handler
    def on_reply(self, msg: PullReply, ctx: Context) -> None:
        """Only from the producer the pull went to: the reply's refs are written into the model."""
        chunk = self.inflight.get(msg.seq) if self.active and msg.sync_id == self.sync_id else None
        owner = self.plan.producers[chunk.rank] if chunk is not None else None
        allowed = ctx.sender == owner if owner is not None else ctx.sender in self.plan.producers
        if not heard(self.ignored, ctx.sender, msg, allowed, ctx.log, expected=owner or "a producer of the plan"):
            return
        if not self.active or msg.sync_id != self.sync_id:
            ctx.log.warning("weights.stale_reply", sync_id=msg.sync_id, seq=msg.seq)
            return
        chunk = self.inflight.get(msg.seq)
        if chunk is None:
            self._abort(f"consumer {self.consumer_id}: reply for pull {msg.seq}, which is not in flight", ctx)
            return
        missing = sorted(set(chunk.names) - set(msg.tensors))
        if missing:
            self._abort(f"consumer {self.consumer_id}: pull {msg.seq} came back without {missing}", ctx)
            return
        if msg.seq in self.writing:
            self._abort(f"consumer {self.consumer_id}: a second reply for pull {msg.seq}", ctx)
            return
        self.writing[msg.seq] = chunk
        ctx.tell(self.io, WritePull(seq=msg.seq, tensors=msg.tensors))

    @handler
    def on_written(self, msg: PullWritten, ctx: Context) -> None:
        if ctx.sender != self.io:
            ctx.log.warning("weights.forged_effect", kind="pull_written", sender=ctx.sender)
            return
        chunk = self.writing.pop(msg.seq, None)
        if chunk is None or not self.active:
            return  # the sync ended while the copy ran
        if msg.error is not None:
            self._abort(f"consumer {self.consumer_id} could not write pull {msg.seq}: {msg.error}", ctx)
            return
        self.bytes_pulled += msg.nbytes
        del self.inflight[msg.seq]
        self.remaining[chunk.group] -= 1
        if self.remaining[chunk.group] == 0:
            self._free(chunk.group, ctx)
        self._issue(ctx)
        self._maybe_done(ctx)

    def _maybe_done(self, ctx: Context) -> None:
        if self.active and self.next_chunk == len(self.chunks) and not self.inflight:
            self.active = False
            if self.digest_state:
                ctx.tell(self.io, DigestState(sync_id=self.sync_id))
                return
            self._done(self.sync_id, self.synced(self.sync_id, ctx), ctx)

    def _done(self, sync_id: int, digest: str | None, ctx: Context) -> None:
        self.syncs_done += 1
        ctx.tell(self.reply_to, EndSync(sync_id=sync_id, digest=digest))

    @handler
    def on_state_digest(self, msg: StateDigest, ctx: Context) -> None:
        if ctx.sender != self.io:
            ctx.log.warning("weights.forged_effect", kind="state_digest", sender=ctx.sender)
            return
        if msg.sync_id == self.sync_id and not self.active:
            self._done(msg.sync_id, msg.digest, ctx)

    def synced(self, sync_id: int, ctx: Context) -> str | None:
        """Called once every weight of sync ``sync_id`` is written, before the trainer hears of it.

        Override to flip a serving model over to the new weights; a returned
        string travels to the trainer as ``EndSync.digest``.
        """
        return None


    def _abort(self, reason: str, ctx: Context) -> None:
        if not self.active:
            return
        self.active = False
        self.inflight = {}
        self.writing = {}
        ctx.log.error("weights.consumer_failed", sync_id=self.sync_id, reason=reason)
        failure = SyncFailed(sync_id=self.sync_id, reason=reason)
        for rank in self.producer_ranks:
            if self.plan.producers[rank] in ctx.names():
                ctx.tell(self.plan.producers[rank], failure)
        if self.reply_to:
            ctx.tell(self.reply_to, failure)

    @handler
    def on_failed(self, msg: SyncFailed, ctx: Context) -> None:
        """From a producer (``sync_id`` 0: it refused the reservation), or from the trainer."""
        allowed = ctx.sender in self.plan.producers or (msg.sync_id != 0 and ctx.sender == self.trainer)
        if not heard(self.ignored, ctx.sender, msg, allowed, ctx.log, expected="a producer of the plan or the trainer"):
            return
        if msg.sync_id == 0:  # refused at reservation: every later sync fails with this reason
            self.refused = msg.reason
            for begin, sender in self.waiting:
                ctx.tell(sender, SyncFailed(sync_id=begin.sync_id, reason=msg.reason))
            self.waiting = []
            return
        if msg.sync_id == self.sync_id:
            self._abort(msg.reason, ctx)  # passed on to every producer (the sender ignores a repeat)

    @handler
    def on_down(self, msg: Down, ctx: Context) -> None:
        if msg.name in self.plan.producers and self.active and self._owed_by(self.plan.producers.index(msg.name)):
            self._abort(f"producer {msg.name} went down ({msg.reason.value}) during sync {self.sync_id}", ctx)

    def _owed_by(self, rank: int) -> bool:
        """Whether a pull from producer ``rank`` is still to be issued or answered in this sync.

        A producer whose part is over may leave while others still serve this consumer: a trainer
        rank exits after its last sync once every consumer has freed its groups (a test saw rank 1
        leave while consumer 2 still pulled from rank 0, and the whole sync failed for it)."""
        return any(chunk.rank == rank for chunk in self.chunks[self.next_chunk:]) or any(
            chunk.rank == rank for chunk in self.inflight.values())


@register_replayable
class ModelConsumer(WeightConsumer):
    """A consumer owning a torch model, built in its own process by ``factory`` ("module:function").

    Weights are written in place into the model's state-dict tensors; after
    each sync the digest of the whole state travels back to the trainer, so
    the trainer can check the copy is bit-exact.  The model lives in the
    effects adapter (:class:`~._effects.ConsumerEffects`): the factory is
    called there, never by the actor's handlers, so a replay builds no model
    and runs no factory.
    """

    def __init__(self, consumer_id: int, plan: WeightPlan, *, factory: str, factory_kwargs: dict[str, Any] | None = None,
                 device: str = "cpu", wanted: list[str] | None = None, host: str | None = None,
                 address: str | None = None) -> None:
        super().__init__(consumer_id, plan, wanted=wanted, host=host, address=address)
        module, _, attr = factory.partition(":")
        if not module or not attr:
            raise InvalidArgument(f"factory must be 'module:function', not {factory!r}")
        self.factory, self.factory_kwargs, self.device = factory, dict(factory_kwargs or {}), device
        self.digest_state = True

    def config(self) -> dict[str, Any]:
        return {**super().config(), "factory": self.factory, "factory_kwargs": self.factory_kwargs,
                "device": self.device}

    def effects(self, name: str) -> Actor | None:
        from actorwire.actors.weights._effects import ConsumerEffects

        return ConsumerEffects(name, factory=self.factory, factory_kwargs=self.factory_kwargs, device=self.device)
