"""`TensorRef`: how a message points at a tensor that travels on a plane.

Messages never carry tensor bytes.  A plane (shared memory, CUDA IPC, NCCL,
zero-copy frames) moves the bytes and fills in a descriptor that is enough
for the receiver to rebuild a view: dtype, shape, stride and offset in
elements, the device it lives on, and an opaque plane handle (an shm segment
name, a ``cudaIpcMemHandle_t``, a frame index).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from .._base import Count, Record
from .._errors import InvalidArgument
from ._enums import Plane

Dim = Annotated[int, msgspec.Meta(ge=0)]


class TensorRef(Record, frozen=True):
    """Descriptor of one tensor view on a plane."""

    #: torch dtype name without the ``torch.`` prefix, e.g. ``"bfloat16"``.
    dtype: Annotated[str, msgspec.Meta(min_length=1, max_length=32)]
    shape: list[Dim]
    stride: list[int]
    #: Offset of the view's first element into the storage, in elements.
    storage_offset: Count = 0
    #: ``"cpu"`` or ``"cuda:N"`` as seen by the *sender*.
    device: str = "cpu"
    plane: Plane = Plane.FRAMES
    #: Plane-specific bytes that locate the storage (never the data itself).
    handle: bytes = b""
    #: Byte offset of the storage inside the plane's buffer (packed slots).
    offset: Count = 0
    #: Size in bytes of the region the view spans.
    nbytes: Count = 0
    #: Optional content digest (hex) for recordings and bit-exact checks.
    digest: str | None = None

    def __post_init__(self) -> None:
        if len(self.stride) != len(self.shape):
            raise InvalidArgument(
                f"stride has {len(self.stride)} dims but shape has {len(self.shape)}"
            )
