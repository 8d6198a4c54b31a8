"""Weight transfer, the static part: sources, groups, ownership and the pull plan.

A sync moves a model from trainer ranks (each holding some of the weights)
to consumers (inference workers).  Everything here is decided once, before
the first sync, and must agree everywhere:

* :class:`WeightSource` yields a model's tensors in a fixed metadata order,
  group by group; :func:`layerwise_groups` cuts that order into a block
  before the first numbered layer, one group per layer index, and a block
  after the last.
* :func:`resolve_ownership` turns every rank's held-name bitmask into the
  holders of each name, refusing ranks that disagree on the metadata (the
  digest) and names no rank holds.
* :class:`WeightPlan` is the result, a plain record that travels to the
  consumers; :meth:`WeightPlan.chunks` is one consumer's static pull plan.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import msgspec

from actorwire.actors import _names
from actorwire.messages import ActorwireError, Record
from actorwire.transport.internal import InvalidArgument


class WeightSyncError(ActorwireError, RuntimeError):
    """A weight sync failed; the message says which rank, group, consumer or name, and why."""


class ParamMeta(Record, frozen=True):
    """One weight as every rank and consumer sees it."""

    name: str
    dtype: str
    shape: list[int]

    @property
    def nbytes(self) -> int:
        import torch

        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty(0, dtype=getattr(torch, self.dtype)).element_size()


_LAYER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def layerwise_groups(names: Sequence[str]) -> list[list[str]]:
    """Group names by their first integer path segment (``layers.3.attn.w`` -> layer 3).

    Names before the first numbered one form a leading group, names after the
    last a trailing one.  Each group must be contiguous in ``names``: a layer
    whose names are interleaved with another's is an error naming it.
    """
    groups: list[list[str]] = []
    keys: list[object] = []
    seen_layers: set[int] = set()
    for name in names:
        match = _LAYER.search(name)
        key: object = int(match.group(1)) if match else ("post" if seen_layers else "pre")
        if keys and keys[-1] == key:
            groups[-1].append(name)
            continue
        if isinstance(key, int):
            if "post" in keys:
                raise InvalidArgument(f"{name!r}: unnumbered names must come before the first layer or after the last")
            if key in seen_layers:
                raise InvalidArgument(f"layer {key} is not contiguous in the metadata order (again at {name!r})")
            seen_layers.add(key)
        elif key in keys:
            raise InvalidArgument(f"{name!r}: unnumbered names must come before the first layer or after the last")
        keys.append(key)
        groups.append([name])
    return groups


class WeightSource(Protocol):
    """What a trainer rank exposes to a sync."""

    def metadata(self) -> list[ParamMeta]:
        """Every weight of the model in a fixed order, the same on every rank."""

    def held_names(self) -> set[str]:
        """The names this rank holds (and will yield tensors for)."""

    def iter_groups(self, groups: list[list[str]]) -> Iterator[dict[str, Any]]:
        """For each group in order, ``{name: tensor}`` for held names and ``{name: None}`` for the others.

        Gathering (an all-gather of a sharded layer, a device copy) happens
        here, lazily: the credit gate decides when the next group may exist.
        """


class ModuleSource:
    """A :class:`WeightSource` over a torch module's state dict (all names, or ``held``)."""

    def __init__(self, module: Any, held: Sequence[str] | None = None) -> None:
        self.module = module
        self._names = list(module.state_dict().keys())
        self._held = set(self._names) if held is None else set(held)
        unknown = sorted(self._held - set(self._names))
        if unknown:
            raise InvalidArgument(f"held names not in the model: {unknown}")

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(name=n, dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape))
                for n, t in self.module.state_dict().items()]

    def held_names(self) -> set[str]:
        return set(self._held)

    def iter_groups(self, groups: list[list[str]]) -> Iterator[dict[str, Any]]:
        state = self.module.state_dict()
        for group in groups:
            yield {n: (state[n].detach() if n in self._held else None) for n in group}


def names_digest(names: Sequence[str], meta: Sequence[ParamMeta] | None = None) -> str:
    """SHA-256 (first 16 hex digits) of the name list, with dtypes and shapes when given."""
    h = hashlib.sha256()
    for i, name in enumerate(names):
        h.update(name.encode())
        h.update(b"\0")
        if meta is not None:
            h.update(f"{meta[i].dtype}{meta[i].shape}".encode())
            h.update(b"\0")
    return h.hexdigest()[:16]


def state_digest(tensors: dict[str, Any]) -> str:
    """SHA-256 (hex) over names, dtypes, shapes and bytes of ``tensors`` in name order: equal iff bit-exact."""
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        flat = t.to("cpu").contiguous().reshape(-1)
        if flat.numel():
            h.update(flat.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def bitmask(names: Sequence[str], held: set[str]) -> bytes:
    out = bytearray((len(names) + 7) // 8)
    for i, name in enumerate(names):
        if name in held:
            out[i // 8] |= 1 << (i % 8)
    return bytes(out)


def _bits(mask: bytes, n: int) -> list[bool]:
    return [bool(mask[i // 8] >> (i % 8) & 1) if i // 8 < len(mask) else False for i in range(n)]


def resolve_ownership(names: Sequence[str], digests: Sequence[str], masks: Sequence[bytes]) -> list[list[int]]:
    """The ranks holding each name, from every rank's (digest, bitmask) in rank order.

    Raises :class:`WeightSyncError` when ranks disagree on the metadata
    (naming them) or when some name is held by no rank (naming those names).
    """
    if not digests:
        raise WeightSyncError("no trainer rank reported its held names")
    for rank, digest in enumerate(digests):
        if digest != digests[0]:
            raise WeightSyncError(f"trainer ranks disagree on the model: rank 0 has metadata digest {digests[0]}, "
                                  f"rank {rank} has {digest}")
    bits = [_bits(mask, len(names)) for mask in masks]
    holders = [[r for r in range(len(masks)) if bits[r][i]] for i in range(len(names))]
    orphans = [names[i] for i, h in enumerate(holders) if not h]
    if orphans:
        shown = ", ".join(orphans[:8]) + (f" and {len(orphans) - 8} more" if len(orphans) > 8 else "")
        raise WeightSyncError(f"{len(orphans)} weight(s) held by no trainer rank: {shown}")
    return holders


class Chunk(Record, frozen=True):
    """One pull: names of one group from one producer rank."""

    group: int
    rank: int
    names: list[str]


class WeightPlan(Record, frozen=True):
    """Everything a producer and a consumer must agree on; built once by the trainer."""

    meta: list[ParamMeta]
    group_lens: list[int]
    #: Trainer ranks holding each name (metadata order).
    holders: list[list[int]]
    #: Producer actor name per trainer rank.
    producers: list[str]
    #: Ring slots per consumer on each producer (K).
    slots: int = 2
    #: Consumers whose ids differ by a multiple of this share one serve ring per producer, and a pull
    #: of theirs is packed once for all (several inference deployments of one model); 0: no sharing.
    workers_per_replica: int = 0

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.meta]

    @property
    def digest(self) -> str:
        h = hashlib.sha256(msgspec.msgpack.encode([self.meta, self.group_lens, self.holders, self.producers,
                                                   self.slots, self.workers_per_replica]))
        return h.hexdigest()[:16]

    def groups(self) -> list[list[str]]:
        names, out, i = self.names, [], 0
        for n in self.group_lens:
            out.append(names[i:i + n])
            i += n
        return out

    def group_of(self) -> dict[str, int]:
        return {name: g for g, group in enumerate(self.groups()) for name in group}

    def owners(self, group: int) -> list[int]:
        """Every rank holding some name of ``group`` (each publishes it and awaits its frees)."""
        start = sum(self.group_lens[:group])
        ranks = {r for i in range(start, start + self.group_lens[group]) for r in self.holders[i]}
        return sorted(ranks)

    def owned_groups(self, rank: int) -> list[int]:
        return [g for g in range(len(self.group_lens)) if rank in self.owners(g)]

    def served_names(self, rank: int) -> set[str]:
        return {p.name for p, h in zip(self.meta, self.holders) if rank in h}

    def ring_key(self, consumer_id: int) -> int:
        """The serve ring a consumer uses: its own, or its sharing group's (``id % workers_per_replica``)."""
        return consumer_id % self.workers_per_replica if self.workers_per_replica else consumer_id

    def pull_digest(self, consumer_id: int, rank: int, wanted: set[str] | None = None) -> str:
        """``<plan digest>:<digest of the consumer's chunks from rank>``: what sharers of a ring must agree on."""
        chunks, _ = self.chunks(consumer_id, wanted)
        mine = [[c.group, c.names] for c in chunks if c.rank == rank]
        return f"{self.digest}:{hashlib.sha256(msgspec.msgpack.encode(mine)).hexdigest()[:16]}"

    def chunks(self, consumer_id: int, wanted: set[str] | None = None) -> tuple[list[Chunk], list[int]]:
        """A consumer's static pull plan: its chunks in group order, and the groups it pulls nothing from.

        A name held by several ranks is pulled from ``holders[ring_key %
        len(holders)]``, spreading replicated weights over their holders (and
        giving consumers that share a ring the same plan).
        """
        chunks: list[Chunk] = []
        empty: list[int] = []
        i = 0
        for g, n in enumerate(self.group_lens):
            by_rank: dict[int, list[str]] = {}
            for j in range(i, i + n):
                name = self.meta[j].name
                if wanted is not None and name not in wanted:
                    continue
                holders = self.holders[j]
                by_rank.setdefault(holders[self.ring_key(consumer_id) % len(holders)], []).append(name)
            i += n
            if not by_rank:
                empty.append(g)
            chunks.extend(Chunk(group=g, rank=r, names=by_rank[r]) for r in sorted(by_rank))
        return chunks, empty

    def chunk_bytes(self, chunk: Chunk) -> int:
        sizes = {p.name: p.nbytes for p in self.meta}
        total = 0
        for name in chunk.names:
            total = (total + sizes[name] + 15) // 16 * 16
        return total


def build_plan(meta: list[ParamMeta], holders: list[list[int]], producers: list[str], *, slots: int = 2,
               workers_per_replica: int = 0) -> WeightPlan:
    if workers_per_replica < 0:
        raise InvalidArgument(f"workers_per_replica must be >= 0, not {workers_per_replica}")
    groups = layerwise_groups([p.name for p in meta])
    return WeightPlan(meta=meta, group_lens=[len(g) for g in groups], holders=holders, producers=producers,
                      slots=slots, workers_per_replica=workers_per_replica)


def single_rank_plan(module: Any, prefix: str, *, slots: int = 2) -> WeightPlan:
    """The plan a one-rank :class:`~._sender.WeightSender` over ``module`` builds, for consumers made elsewhere."""
    meta = ModuleSource(module).metadata()
    return build_plan(meta, [[0]] * len(meta), [_names.producer(prefix, 0)], slots=slots)
