"""The CUDA IPC plane: same-host GPU tensors shared by handle, no copy at all.

Through CUDA's public runtime API, by cuda-python (``cuda.bindings``, the ``gpu``
extra): cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle for
memory, cudaIpcGetEventHandle / cudaIpcOpenEventHandle for ordering
(https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html).

Ownership and ordering
----------------------
* The **exporter** records an interprocess event on its current stream and
  sends its handle with every tensor of the export: the importer's stream
  waits on it, so the importer reads what the exporter's queued kernels
  wrote, without a host synchronisation on either side.  A handle names a
  whole allocation (the caching allocator's segment, found with
  cuMemGetAddressRange); the tensor's byte offset in it travels beside it.
  The exporter keeps a reference to every exported storage, and the event,
  until the importer releases the export: freed earlier, the allocator could
  hand the memory to another tensor under the importer's feet.
* The **importer** opens each allocation once (opening one twice in a
  process fails, and an open costs tens of microseconds) and builds views on
  it through ``__cuda_array_interface__``.  The mapping is closed
  (cudaIpcCloseMemHandle) when the last view of it is gone *and* the importer
  dropped it (``drop()``, at the end of a sync): a view the user still holds
  stays valid.  Every view is checked to lie inside the allocation its handle
  names: a crafted ``TensorRef`` cannot reach other memory.
* The caching allocator's *expandable segments* make opens several times
  slower (about 9x, as reported for PyTorch's allocator); a warning says so.

Without cuda-python, the plane falls back to torch's own sharing
(``UntypedStorage._share_cuda_`` / ``_new_shared_cuda``, private and subject to
change between torch releases); an importer opens both kinds of handle.
Handles travel in ``TensorRef.handle`` as msgpack, never pickled.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import warnings
from typing import Any

import msgspec

from actorwire.messages.kinds import Plane, TensorRef
from actorwire.transport._errors import BadHandle, InvalidArgument
from actorwire.transport.planes._layout import view_ref

_HANDLE_BYTES = 64  # cudaIpcMemHandle_t and cudaIpcEventHandle_t: 64 opaque bytes each


def expandable_segments_on() -> bool:
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")
    return "expandable_segments:true" in conf.replace(" ", "").lower()


class IpcHandle(msgspec.Struct, frozen=True, tag="cuda_ipc", forbid_unknown_fields=True):
    """What ``TensorRef.handle`` carries on the public-API path: the allocation, where the storage
    starts in it, and the event the importer's stream waits on."""

    mem: bytes  # cudaIpcMemHandle_t of the allocation
    size: int  # bytes of the allocation
    offset: int  # byte offset of the storage in the allocation
    #: cudaIpcEventHandle_t recorded after the exporter's writes; empty when the exporter synchronized
    #: before it published (a serve ring's slot, whose handle outlives any one pack).
    event: bytes = b""


_IPC_HANDLE = msgspec.msgpack.Decoder(IpcHandle)


def cuda_python() -> Any | None:
    """``(runtime, driver)`` of cuda-python, or None when it is not installed."""
    try:
        from cuda.bindings import driver, runtime
    except ImportError:
        return None
    return runtime, driver


class _Cuda:
    """The few runtime calls the plane makes; a failed call raises naming it and CUDA's error."""

    def __init__(self, bindings: Any) -> None:
        self.rt, self.drv = bindings
        self.ok = self.rt.cudaError_t.cudaSuccess

    def _check(self, what: str, result: Any) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise BadHandle(f"{what} failed: {err!r}")
        return rest[0] if len(rest) == 1 else rest

    def make_current(self, device: int) -> None:
        """Make ``device``'s primary context current on this thread: the driver API (the address range)
        needs one, and torch sets none on a thread that has only ever used the default device (a serve
        ring packed in an adapter's thread got CUDA_ERROR_INVALID_CONTEXT)."""
        self._check("cudaSetDevice", self.rt.cudaSetDevice(device))

    def mem_handle(self, base: int) -> bytes:
        handle = self._check("cudaIpcGetMemHandle", self.rt.cudaIpcGetMemHandle(base))
        return ctypes.string_at(handle.getPtr(), _HANDLE_BYTES)

    def allocation(self, ptr: int) -> tuple[int, int]:
        base, size = self._check("cuMemGetAddressRange", self.drv.cuMemGetAddressRange(ptr))
        return int(base), int(size)

    def open_mem(self, mem: bytes) -> int:
        handle = self.rt.cudaIpcMemHandle_t()
        ctypes.memmove(handle.getPtr(), mem, _HANDLE_BYTES)
        return int(self._check("cudaIpcOpenMemHandle",
                               self.rt.cudaIpcOpenMemHandle(handle, self.rt.cudaIpcMemLazyEnablePeerAccess)))

    def close_mem(self, ptr: int) -> None:
        self._check("cudaIpcCloseMemHandle", self.rt.cudaIpcCloseMemHandle(ptr))

    def interprocess_event(self, stream: int) -> tuple[Any, bytes]:
        flags = int(self.rt.cudaEventInterprocess) | int(self.rt.cudaEventDisableTiming)
        event = self._check("cudaEventCreateWithFlags", self.rt.cudaEventCreateWithFlags(flags))
        self._check("cudaEventRecord", self.rt.cudaEventRecord(event, stream))
        handle = self._check("cudaIpcGetEventHandle", self.rt.cudaIpcGetEventHandle(event))
        return event, ctypes.string_at(handle.getPtr(), _HANDLE_BYTES)

    def wait_event(self, event_handle: bytes, stream: int) -> None:
        handle = self.rt.cudaIpcEventHandle_t()
        ctypes.memmove(handle.getPtr(), event_handle, _HANDLE_BYTES)
        event = self._check("cudaIpcOpenEventHandle", self.rt.cudaIpcOpenEventHandle(handle))
        try:
            self._check("cudaStreamWaitEvent", self.rt.cudaStreamWaitEvent(stream, event, 0))
        finally:
            self.rt.cudaEventDestroy(event)  # the wait is enqueued: the stream keeps what it needs

    def destroy_event(self, event: Any) -> None:
        self.rt.cudaEventDestroy(event)


class _Mapping:
    """One opened allocation, as ``__cuda_array_interface__`` bytes; closed when the last tensor on it
    (and the importer's cache) let go of it."""

    def __init__(self, cuda: _Cuda, ptr: int, size: int, device: int) -> None:
        self._cuda, self.ptr, self.device = cuda, ptr, device
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None, "stream": None}

    def __del__(self) -> None:
        try:
            import torch

            with torch.cuda.device(self.device):
                self._cuda.close_mem(self.ptr)
        except Exception:  # at interpreter exit CUDA may be gone already: the driver reclaims it
            pass


def slot_handle(base: Any) -> tuple[int, bytes]:
    """``(device index, handle)`` of a long-lived CUDA buffer whose writer synchronizes before each
    publish (a serve ring's slot): CUDA's public API where cuda-python is installed, else torch's."""
    import torch

    bindings = cuda_python()
    if bindings is None:
        return share_handle(base.untyped_storage())
    cuda = _Cuda(bindings)
    device = base.device.index if base.device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(device):
        cuda.make_current(device)
        ptr = base.untyped_storage().data_ptr()
        start, size = cuda.allocation(ptr)
        return device, msgspec.msgpack.encode(IpcHandle(mem=cuda.mem_handle(start), size=size, offset=ptr - start))


def share_handle(storage: Any) -> tuple[int, bytes]:
    """torch's own sharing (the fallback): ``(device index, handle bytes)`` of a CUDA storage."""
    share = storage._share_cuda_()
    # (device, handle, size_bytes, offset_bytes, ref_counter_handle, ref_counter_offset,
    #  event_handle, event_sync_required)
    return share[0], msgspec.msgpack.encode([share[1], share[2], share[3], share[4], share[5], share[6], share[7]])


class CudaIpcExporter:
    """Publishes GPU tensors by IPC handle and holds them until released.

    ``public_api=False`` uses torch's private sharing even where cuda-python is installed (to
    compare the two; without cuda-python it is the only way)."""

    def __init__(self, *, public_api: bool = True) -> None:
        if expandable_segments_on():
            warnings.warn("PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True: CUDA IPC opens get several "
                          "times slower; turn it off on trainer ranks that export weights", RuntimeWarning,
                          stacklevel=2)
        bindings = cuda_python() if public_api else None
        self._cuda = _Cuda(bindings) if bindings is not None else None
        self._held: dict[int, tuple[list[Any], list[Any]]] = {}
        self._ids = itertools.count(1)

    @property
    def public_api(self) -> bool:
        return self._cuda is not None

    def export(self, tensors: dict[str, Any]) -> tuple[int, dict[str, TensorRef]]:
        """Handles for ``tensors``; the returned id releases them."""
        for name, t in tensors.items():
            if t.device.type != "cuda":
                raise InvalidArgument(f"{name}: the cuda_ipc plane carries GPU tensors, got one on {t.device}")
        if self._cuda is None:
            return self._export_by_torch(tensors)
        import torch

        refs: dict[str, TensorRef] = {}
        held: list[Any] = []
        events: dict[int, tuple[Any, bytes]] = {}  # per device: one event after this export's writes
        handles: dict[int, bytes] = {}  # one handle per storage: views of it share it
        for name, t in tensors.items():
            device = t.device.index if t.device.index is not None else torch.cuda.current_device()
            with torch.cuda.device(device):
                self._cuda.make_current(device)
                if device not in events:
                    events[device] = self._cuda.interprocess_event(torch.cuda.current_stream(device).cuda_stream)
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                handle = handles.get(ptr)
                if handle is None:
                    base, size = self._cuda.allocation(ptr)
                    handle = msgspec.msgpack.encode(IpcHandle(mem=self._cuda.mem_handle(base), size=size,
                                                              offset=ptr - base, event=events[device][1]))
                    handles[ptr] = handle
                    held.append(storage)
            refs[name] = view_ref(t, Plane.CUDA_IPC, handle, device=f"cuda:{device}")
        key = next(self._ids)
        self._held[key] = (held, [event for event, _ in events.values()])
        return key, refs

    def _export_by_torch(self, tensors: dict[str, Any]) -> tuple[int, dict[str, TensorRef]]:
        import torch

        torch.cuda.current_stream().synchronize()  # torch's handle says nothing of pending kernels
        refs: dict[str, TensorRef] = {}
        held = []
        shared: dict[int, tuple[int, bytes]] = {}
        for name, t in tensors.items():
            storage = t.untyped_storage()
            entry = shared.get(storage.data_ptr())
            if entry is None:
                entry = share_handle(storage)
                shared[storage.data_ptr()] = entry
                held.append(storage)
            device_index, handle = entry
            refs[name] = view_ref(t, Plane.CUDA_IPC, handle, device=f"cuda:{device_index}")
        key = next(self._ids)
        self._held[key] = (held, [])
        return key, refs

    def release(self, key: int) -> None:
        """The importer is done with this export: the storages may be freed and reused."""
        held = self._held.pop(key, None)
        if held is not None and self._cuda is not None:
            for event in held[1]:
                self._cuda.destroy_event(event)

    @property
    def held(self) -> int:
        return sum(len(storages) for storages, _ in self._held.values())

    def close(self) -> None:
        for key in list(self._held):
            self.release(key)


class CudaIpcImporter:
    """Opens IPC handles (once per allocation) and rebuilds the tensor views."""

    def __init__(self) -> None:
        self._bases: dict[Any, Any] = {}
        self._waited: set[bytes] = set()  # export events this importer's stream already waits on
        self._cuda: _Cuda | None = None

    def open(self, ref: TensorRef) -> Any:
        if ref.plane is not Plane.CUDA_IPC:
            raise BadHandle(f"not a CUDA IPC tensor: plane {ref.plane.value}")
        device = int(ref.device.split(":", 1)[1]) if ":" in ref.device else 0
        try:
            handle = _IPC_HANDLE.decode(ref.handle)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return self._open_by_torch(ref, device)
        return self._open(ref, handle, device)

    def _open(self, ref: TensorRef, handle: IpcHandle, device: int) -> Any:
        import torch

        if len(handle.mem) != _HANDLE_BYTES or len(handle.event) not in (0, _HANDLE_BYTES) or handle.size <= 0 \
                or not 0 <= handle.offset < handle.size:
            raise BadHandle("malformed CUDA IPC handle")
        dtype = getattr(torch, ref.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise BadHandle(f"unknown dtype {ref.dtype!r}")
        itemsize = torch.empty(0, dtype=dtype).element_size()
        if handle.offset % itemsize or handle.size % itemsize or any(s < 0 for s in ref.stride):
            raise BadHandle("a CUDA IPC view must be aligned to its element size, with strides >= 0")
        extent = ref.storage_offset + 1 + sum((n - 1) * s for n, s in zip(ref.shape, ref.stride) if n > 0)
        if any(n == 0 for n in ref.shape):
            extent = 0
        if handle.offset + extent * itemsize > handle.size:
            raise BadHandle(f"the view ({extent * itemsize} bytes at offset {handle.offset}) reaches past the "
                            f"{handle.size}-byte allocation its handle names")
        if self._cuda is None:
            bindings = cuda_python()
            if bindings is None:
                raise BadHandle("this tensor was shared through CUDA's public IPC API, which needs cuda-python "
                                "here too (pip install 'actorwire[gpu]')")
            self._cuda = _Cuda(bindings)
        base = self._bases.get(handle.mem)
        if base is None:
            with torch.cuda.device(device):
                self._cuda.make_current(device)
                ptr = self._cuda.open_mem(handle.mem)
                base = torch.as_tensor(_Mapping(self._cuda, ptr, handle.size, device), device=f"cuda:{device}")
            self._bases[handle.mem] = base
        if handle.event and handle.event not in self._waited:
            with torch.cuda.device(device):
                self._cuda.wait_event(handle.event, torch.cuda.current_stream(device).cuda_stream)
            self._waited.add(handle.event)
        return base.view(dtype).as_strided(ref.shape, ref.stride, handle.offset // itemsize + ref.storage_offset)

    def _open_by_torch(self, ref: TensorRef, device: int) -> Any:
        import torch

        try:
            handle, size, offset, rc_handle, rc_offset, event, event_sync = msgspec.msgpack.decode(ref.handle)
        except (msgspec.DecodeError, ValueError, TypeError):
            raise BadHandle("malformed CUDA IPC handle") from None
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
        """Forget every opened allocation (the end of a sync); each closes once no view of it is left."""
        self._bases.clear()
        self._waited.clear()

    close = drop
