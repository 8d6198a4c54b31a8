"""Where tensors sit in a plane's buffer, and the ``TensorRef`` that says so.

The only place that knows strides, alignment and how a ``TensorRef`` is built
from a tensor.  Two shapes of ref exist:

* a *packed* ref points into one buffer holding a whole group, each tensor
  copied contiguously at a 16-byte-aligned byte offset (shm, frames, serve
  rings);
* a *view* ref describes a live tensor as it is, with its own strides and
  storage offset (local, cuda_ipc: the receiver rebuilds the same view).

16 bytes is the widest element we carry (complex128) and what vectorised
copies want; every offset in a packed buffer is a multiple of it.
"""

from __future__ import annotations

from typing import Any

from actorwire.messages.kinds import Plane, TensorRef

ALIGN = 16


def aligned(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN`."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def contiguous_strides(shape: list[int]) -> list[int]:
    """Row-major strides, in elements, of a contiguous tensor of ``shape``."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return strides[::-1]


def dtype_name(tensor: Any) -> str:
    """The dtype as a ``TensorRef`` spells it: ``"bfloat16"``, not ``"torch.bfloat16"``."""
    return str(tensor.dtype).removeprefix("torch.")


def nbytes_of(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())


def pack_layout(tensors: dict[str, Any]) -> tuple[dict[str, int], int]:
    """Aligned byte offsets of each tensor in a packed buffer, and the buffer's size."""
    layout, total = {}, 0
    for name, t in tensors.items():
        layout[name] = total
        total = aligned(total + nbytes_of(t))
    return layout, total


def copy_packed(base: Any, layout: dict[str, int], tensors: dict[str, Any]) -> None:
    """Copy each tensor's bytes into ``base`` (a uint8 tensor) at its offset.

    One byte view of the buffer, sliced per tensor: a ``frombuffer`` per tensor
    cost ~10 us each (a 64-tensor group took 2 ms).
    """
    import torch

    for name, t in tensors.items():
        nbytes = nbytes_of(t)
        if nbytes:
            off = layout[name]
            base[off:off + nbytes].copy_(t.contiguous().reshape(-1).view(torch.uint8))


def packed_refs(plane: Plane, handle: bytes, layout: dict[str, int], tensors: dict[str, Any], *,
                device: str, element_offsets: bool = False) -> dict[str, TensorRef]:
    """Refs to ``tensors`` packed at ``layout`` (byte offsets) in one buffer.

    ``element_offsets`` puts the offset in ``storage_offset`` (in elements, for
    planes that rebuild a view on the whole buffer) instead of ``offset``.
    """
    refs = {}
    for name, t in tensors.items():
        shape = list(t.shape)
        off = layout[name]
        refs[name] = TensorRef(
            dtype=dtype_name(t), shape=shape, stride=contiguous_strides(shape),
            storage_offset=off // t.element_size() if element_offsets else 0, device=device, plane=plane,
            handle=handle, offset=0 if element_offsets else off, nbytes=nbytes_of(t))
    return refs


def view_ref(tensor: Any, plane: Plane, handle: bytes, *, device: str | None = None) -> TensorRef:
    """A ref to ``tensor`` as it is: its own strides and storage offset."""
    return TensorRef(dtype=dtype_name(tensor), shape=list(tensor.shape), stride=list(tensor.stride()),
                     storage_offset=tensor.storage_offset(), device=device or str(tensor.device), plane=plane,
                     handle=handle, nbytes=nbytes_of(tensor))
