"""The weight-transfer family: producers publish groups, consumers pull and free them.

One sync, seen from a producer: ``BeginSync`` names the live consumers; the
trainer publishes groups (``PublishGroup``); each live consumer pulls what it
needs (``PullRequest`` -> ``PullReply``) and sends ``FreeGroup`` exactly once
per group to every owner; a group is released when every live consumer freed
it, and the producer hands released groups back as credit (``GroupsFreed``);
``EndSync`` closes the sync, ``SyncFailed`` ends it with one clear error.
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec

from .._base import Count, Message
from ._enums import Plane
from ._tensor import TensorRef

#: ``seq`` is the consumer's *issue* index of a pull; it picks ring slot ``seq % K``.
Seq = Annotated[int, msgspec.Meta(ge=0)]


class BeginSync(Message, frozen=True, tag="begin_sync"):
    """Start a sync.  ``live_consumer_ids`` is required: no default, on purpose."""

    sync_id: Count
    live_consumer_ids: list[Count]


class PublishGroup(Message, frozen=True, tag="publish_group"):
    """A group of named tensor views is resident and may be pulled."""

    sync_id: Count
    group_idx: Count
    tensors: dict[str, TensorRef]


class FreeGroup(Message, frozen=True, tag="free_group"):
    """Consumer -> every owner: this consumer is done with ``group_idx`` for this sync."""

    sync_id: Count
    group_idx: Count
    consumer_id: Count


class GroupsFreed(Message, frozen=True, tag="groups_freed"):
    """Producer -> trainer: released groups, the credit for the gather loop."""

    sync_id: Count
    groups: list[Count]


class EndSync(Message, frozen=True, tag="end_sync"):
    """Trainer -> producer: close a sync once no group is in flight.

    Consumer -> trainer: this consumer has every weight of the sync; ``digest``
    (optional) is the SHA-256 of what it now holds, for bit-exact checks.
    """

    sync_id: Count
    digest: str | None = None


class SyncFailed(Message, frozen=True, tag="sync_failed"):
    """The sync cannot complete (gather error, stall, misrouted pull, dead consumer)."""

    sync_id: Count
    reason: str


class HeldNames(Message, frozen=True, tag="held_names"):
    """Trainer rank -> every other rank at init: which weight names it holds.

    ``digest`` is the hash of the full name list in metadata order (ranks that
    disagree on the model are refused); ``held`` a bitmask over that list,
    bit ``i`` of byte ``i // 8`` for name ``i``.
    """

    rank: Count
    world_size: Count
    digest: str
    held: bytes


class ReserveServeBuffer(Message, frozen=True, tag="reserve_serve_buffer"):
    """Consumer init: reserve a ring of serve slots; the plan digest must agree.

    ``host`` (the consumer's host, as ``ACTORWIRE_HOST`` or the host name says), ``address`` (where
    that host is reached) and ``device`` let the producer choose the plane for this consumer:
    cuda_ipc or shm on its own host, frames from elsewhere.  Empty: the producer's own host.
    """

    consumer_id: Count
    nbytes: Count
    plan_digest: str | None = None
    host: str = ""
    address: str = ""
    device: str = ""


class ServeBufferReserved(Message, frozen=True, tag="serve_buffer_reserved"):
    """Answer to ``ReserveServeBuffer``: ``slots`` ring slots of ``slot_nbytes`` each."""

    consumer_id: Count
    slots: Count
    slot_nbytes: Count
    #: The plane the producer serves this consumer on (chosen for its host, or forced).
    plane: Plane | None = None


class PullRequest(Message, frozen=True, tag="pull_request"):
    """Pull ``names`` from one owner; ``seq`` is the consumer's issue index."""

    sync_id: Count
    consumer_id: Count
    seq: Seq
    names: list[str]


class PullReply(Message, frozen=True, tag="pull_reply"):
    """Where the pulled tensors are (``seq`` echoed so the consumer matches its slot)."""

    sync_id: Count
    consumer_id: Count
    seq: Seq
    tensors: dict[str, TensorRef]


# -- effects: what a weight actor asks its adapter (``<actor>/io``, same process) to do ----------
#
# Packing into shared memory, opening IPC handles and copying into a model's tensors are
# effects; the actors hand them to an adapter and see the outcome as one of these replies,
# which a recording keeps and replay feeds back (nothing is packed, mapped or copied there).


class ReserveRing(Message, frozen=True, tag="reserve_ring"):
    """Producer -> its adapter: (re)allocate serve ring ``ring``: ``slots`` slots of ``nbytes``, on
    ``plane`` (None: the adapter's own), its frames served towards ``toward`` (a consumer elsewhere)."""

    ring: Count
    slots: Count
    nbytes: Count
    plane: Plane | None = None
    toward: str = ""


class RingReserved(Message, frozen=True, tag="ring_reserved"):
    """Adapter -> producer: ring ``ring`` holds slots of ``slot_nbytes`` (0 and ``error`` if it failed)."""

    ring: Count
    slot_nbytes: Count
    error: str | None = None


class PackPull(Message, frozen=True, tag="pack_pull"):
    """Producer -> its adapter: pack these published tensors into slot ``seq % K`` of ``ring``."""

    ring: Count
    seq: Seq
    tensors: dict[str, TensorRef]


class PullPacked(Message, frozen=True, tag="pull_packed"):
    """Adapter -> producer: where the packed tensors are (empty and ``error`` if packing failed)."""

    ring: Count
    seq: Seq
    tensors: dict[str, TensorRef] = {}
    error: str | None = None


class WritePull(Message, frozen=True, tag="write_pull"):
    """Consumer -> its adapter: copy a ``PullReply``'s tensors into the model's."""

    seq: Seq
    tensors: dict[str, TensorRef]


class PullWritten(Message, frozen=True, tag="pull_written"):
    """Adapter -> consumer: pull ``seq`` is copied (``nbytes`` of it), or ``error`` says why not."""

    seq: Seq
    nbytes: Count = 0
    error: str | None = None


class DigestState(Message, frozen=True, tag="digest_state"):
    """Consumer -> its adapter: the digest of the model's whole state after sync ``sync_id``."""

    sync_id: Count


class StateDigest(Message, frozen=True, tag="state_digest"):
    """Adapter -> consumer: the digest ``DigestState`` asked for."""

    sync_id: Count
    digest: str | None = None


WeightMsg = Union[
    BeginSync,
    PublishGroup,
    FreeGroup,
    GroupsFreed,
    EndSync,
    SyncFailed,
    HeldNames,
    ReserveServeBuffer,
    ServeBufferReserved,
    PullRequest,
    PullReply,
    ReserveRing,
    RingReserved,
    PackPull,
    PullPacked,
    WritePull,
    PullWritten,
    DigestState,
    StateDigest,
]
