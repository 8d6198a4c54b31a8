"""The weight actors' effects adapters: where packing, mapping and copying happen.

A producer's handlers decide *what* to serve and a consumer's *what* to pull;
the bytes move here, in an adapter beside each (``<actor>/io``, the same
process, spawned by the runtime from :meth:`~actorwire.actors.Actor.effects`).
Each request is one message and each outcome one reply, so a recording of the
producer or the consumer holds everything the effects returned, and replay
feeds it back without touching shared memory, a GPU or a model.

The adapters take orders from their owner only (:class:`EffectsAdapter`).
"""

from __future__ import annotations

from typing import Any

from actorwire.actors.runtime._actor import EffectsAdapter, handler
from actorwire.actors.runtime._context import Context
from actorwire.actors.weights._plan import state_digest
from actorwire.messages.kinds import (
    DigestState,
    PackPull,
    PullPacked,
    PullWritten,
    ReserveRing,
    RingReserved,
    StateDigest,
    WritePull,
)
from actorwire.transport.internal import InvalidArgument
from actorwire.transport.internal import local_plane as _local


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class ProducerEffects(EffectsAdapter):
    """A producer's serve rings: reserves slots and packs published tensors into them."""

    never_blocks = False  # packing copies up to a slot of bytes: never on the I/O thread

    def __init__(self, owner: str, *, plane: str = "shm", device: str = "cpu", digests: bool = False) -> None:
        super().__init__(owner)
        self.plane, self.device, self.digests = plane, device, digests
        self.ring: Any = None

    def on_start(self, ctx: Context) -> None:
        from actorwire.transport.internal import ServeRing

        self.ring = ServeRing(self.plane, device=self.device, digests=self.digests)

    def on_stop(self, ctx: Context) -> None:
        if self.ring is not None:
            self.ring.close()

    @handler
    def on_reserve(self, msg: ReserveRing, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        try:
            self.ring.reserve(msg.ring, msg.slots, msg.nbytes, plane=msg.plane, toward=msg.toward)
        except Exception as exc:  # out of shared memory, of device memory: the consumer is told why
            ctx.tell(self.owner, RingReserved(ring=msg.ring, slot_nbytes=0, error=_reason(exc)))
            return
        ctx.tell(self.owner, RingReserved(ring=msg.ring, slot_nbytes=self.ring.slot_bytes(msg.ring)))

    @handler
    def on_pack(self, msg: PackPull, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        try:
            views = {name: _local.get(ref, name) for name, ref in msg.tensors.items()}
            refs = self.ring.pack(msg.ring, msg.seq, views)
        except Exception as exc:  # a pack failure fails the sync, never a half-written slot
            ctx.tell(self.owner, PullPacked(ring=msg.ring, seq=msg.seq, error=_reason(exc)))
            return
        ctx.tell(self.owner, PullPacked(ring=msg.ring, seq=msg.seq, tensors=refs))


class ConsumerEffects(EffectsAdapter):
    """A consumer's model side: opens served refs and copies them into the model's tensors.

    ``tensors`` (name -> tensor, written in place) or ``factory`` (``"module:function"``
    building a torch module on ``device``, for :class:`~._consumer.ModelConsumer`); with
    neither, pulls are opened and counted, not kept.
    """

    never_blocks = False

    def __init__(self, owner: str, *, tensors: dict[str, Any] | None = None, factory: str | None = None,
                 factory_kwargs: dict[str, Any] | None = None, device: str = "cpu") -> None:
        super().__init__(owner)
        self.tensors = tensors
        self.factory, self.factory_kwargs, self.device = factory, dict(factory_kwargs or {}), device
        self.model: Any = None
        self.importer: Any = None

    def on_start(self, ctx: Context) -> None:
        from actorwire.transport.internal import TensorImporter

        self.importer = TensorImporter()
        if self.factory is not None:
            import importlib

            module, _, attr = self.factory.partition(":")
            if not attr:
                raise InvalidArgument(f"factory must be 'module:function', not {self.factory!r}")
            self.model = getattr(importlib.import_module(module), attr)(**self.factory_kwargs).to(self.device)
            self.tensors = dict(self.model.state_dict())

    def on_stop(self, ctx: Context) -> None:
        if self.importer is not None:
            self.importer.drop()

    @handler
    def on_write(self, msg: WritePull, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        try:
            nbytes = self._write(msg)
        except Exception as exc:
            ctx.tell(self.owner, PullWritten(seq=msg.seq, error=_reason(exc)))
            return
        ctx.tell(self.owner, PullWritten(seq=msg.seq, nbytes=nbytes))

    def _write(self, msg: WritePull) -> int:
        cuda = False
        nbytes = 0
        for name, ref in msg.tensors.items():
            view = self.importer.open(ref)
            nbytes += ref.nbytes
            if self.tensors is None:
                continue
            dst = self.tensors.get(name)
            if dst is None:
                raise InvalidArgument(f"{name} is not a tensor of this consumer's model")
            if list(dst.shape) != list(view.shape) or dst.dtype != view.dtype:
                raise InvalidArgument(f"{name}: got {view.dtype} {list(view.shape)}, the model has {dst.dtype} "
                                      f"{list(dst.shape)}")
            dst.copy_(view, non_blocking=view.is_cuda)
            cuda = cuda or view.is_cuda or dst.is_cuda
        if cuda:
            import torch

            torch.cuda.current_stream().synchronize()  # the slot is reused once the reply is out
        return nbytes

    @handler
    def on_digest(self, msg: DigestState, ctx: Context) -> None:
        if not self.obeys(ctx):
            return
        ctx.tell(self.owner, StateDigest(sync_id=msg.sync_id, digest=state_digest(self.tensors or {})))
