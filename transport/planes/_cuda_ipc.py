"""The CUDA IPC plane: same-host GPU tensors shared by handle, no copy at all.

Ownership and ordering (CUDA runtime API, cudaIpcGetMemHandle /
cudaIpcOpenMemHandle: https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)

* The **exporter** synchronizes its current stream before publishing (a
  handle says nothing about pending kernels), then takes the storage's IPC
  handle through torch (``UntypedStorage._share_cuda_``, which also shares
  torch's cross-process reference counter).  It keeps a reference to every
  exported storage until the importer releases it: freeing it earlier would
  let the caching allocator hand the same memory to another tensor under the
  importer's feet.
* The **importer** opens each storage once per handle and caches it
  (``cudaIpcOpenMemHandle`` costs tens of microseconds, and opening one
  allocation twice in one process fails); ``drop()`` at the end of a sync
  closes them.
* The caching allocator's *expandable segments* make opens several times
  slower (about 9x, as reported for PyTorch's allocator); a warning says so.

Handles travel in ``TensorRef.handle`` as msgpack of torch's share tuple,
never pickled.
"""

from __future__ import annotations

import itertools
import os
import warnings
from typing import Any

import msgspec

from actorwire.messages import Plane, TensorRef
from actorwire.transport._errors import BadHandle, InvalidArgument
from actorwire.transport.planes._layout import view_ref


def expandable_segments_on() -> bool:
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")
    return "expandable_segments:true" in conf.replace(" ", "").lower()


def share_handle(storage: Any) -> tuple[int, bytes]:
    """``(device index, handle bytes)`` of a CUDA storage, as ``TensorRef.handle`` carries it."""
    share = storage._share_cuda_()
    # (device, handle, size_bytes, offset_bytes, ref_counter_handle, ref_counter_offset,
    #  event_handle, event_sync_required)
    return share[0], msgspec.msgpack.encode([share[1], share[2], share[3], share[4], share[5], share[6], share[7]])


class CudaIpcExporter:
    """Publishes GPU tensors by IPC handle and holds them until released."""

    def __init__(self) -> None:
        if expandable_segments_on():
            warnings.warn("PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True: CUDA IPC opens get several "
                          "times slower; turn it off on trainer ranks that export weights", RuntimeWarning,
                          stacklevel=2)
        self._held: dict[int, list[Any]] = {}
        self._ids = itertools.count(1)

    def export(self, tensors: dict[str, Any]) -> tuple[int, dict[str, TensorRef]]:
        """Handles for ``tensors`` (after a stream sync); the returned id releases them."""
        import torch

        torch.cuda.current_stream().synchronize()
        refs: dict[str, TensorRef] = {}
        held = []
        shared: dict[int, tuple[int, bytes]] = {}  # one handle per storage: views of it share it
        for name, t in tensors.items():
            if t.device.type != "cuda":
                raise InvalidArgument(f"{name}: the cuda_ipc plane carries GPU tensors, got one on {t.device}")
            storage = t.untyped_storage()
            entry = shared.get(storage.data_ptr())
            if entry is None:
                entry = share_handle(storage)
                shared[storage.data_ptr()] = entry
                held.append(storage)
            device_index, handle = entry
            refs[name] = view_ref(t, Plane.CUDA_IPC, handle, device=f"cuda:{device_index}")
        key = next(self._ids)
        self._held[key] = held
        return key, refs

    def release(self, key: int) -> None:
        """The importer is done with this export: the storages may be freed and reused."""
        self._held.pop(key, None)

    @property
    def held(self) -> int:
        return sum(len(v) for v in self._held.values())

    def close(self) -> None:
        self._held.clear()


class CudaIpcImporter:
    """Opens IPC handles (once per storage) and rebuilds the tensor views."""

    def __init__(self) -> None:
        self._bases: dict[tuple[bytes, int], Any] = {}

    def open(self, ref: TensorRef) -> Any:
        import torch

        if ref.plane is not Plane.CUDA_IPC:
            raise BadHandle(f"not a CUDA IPC tensor: plane {ref.plane.value}")
        handle, size, offset, rc_handle, rc_offset, event, event_sync = msgspec.msgpack.decode(ref.handle)
        device = int(ref.device.split(":", 1)[1]) if ":" in ref.device else 0
        # Keyed by the memory handle and offset alone: two exports of one storage
        # carry different reference-counter slots but must open the memory once.
        storage = self._bases.get((handle, offset))
        if storage is None:
            torch.cuda._lazy_init()
            storage = torch.UntypedStorage._new_shared_cuda(device, handle, size, offset, rc_handle, rc_offset,
                                                            event, event_sync)
            self._bases[(handle, offset)] = storage
        dtype = getattr(torch, ref.dtype)
        view = torch.empty(0, dtype=dtype, device=f"cuda:{device}")
        view.set_(storage, ref.storage_offset, ref.shape, ref.stride)
        return view

    @property
    def open_count(self) -> int:
        return len(self._bases)

    def drop(self) -> None:
        """Close every opened storage (the end of a sync)."""
        self._bases.clear()

    close = drop
