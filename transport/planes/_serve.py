"""Serve rings: where a producer packs what one consumer pulls.

Each consumer reserves a ring of ``K`` slots on every producer it pulls from
(``ReserveServeBuffer``).  Pull number ``seq`` of that consumer (its own
issue index) is packed into slot ``seq % K``; the consumer issues pull ``seq``
only after pull ``seq - K`` has drained, so a slot is never repacked under a
reader.  Slots live as long as the reservation: they are allocated once,
and on the cuda_ipc plane their handles are opened once per consumer, not
once per sync.

Tensors are packed 16-byte aligned, so a whole pull costs one handle.

Each ring has its plane: a producer serves the consumers of its own host on
shm (cuda_ipc for GPU weights) and the others on frames, over tcp towards
their host, in the same sync.
"""

from __future__ import annotations

from multiprocessing import shared_memory
from typing import Any

import msgspec

from actorwire.messages.kinds import Plane, TensorRef
from actorwire.transport._errors import InvalidArgument, NotFound
from actorwire.transport.planes import _shm
from actorwire.transport.planes._frames import FramesServer, handle_for
from actorwire.transport.planes._layout import copy_packed, pack_layout, packed_refs


def _digest(base: Any, offset: int, nbytes: int) -> str:
    import hashlib

    return hashlib.sha256(base[offset:offset + nbytes].cpu().numpy().tobytes()).hexdigest()[:32]


class _Slot:
    def __init__(self, base: Any, handle: bytes, device: str, keep: Any = None, server: Any = None) -> None:
        self.base = base  # uint8 tensor the pack writes into
        self.handle = handle
        self.device = device
        self.keep = keep  # the SharedMemory behind base, or its frames key
        self.server = server  # the frames server that serves it
        #: Frames keys of the tensors the slot serves in place (a CPU producer's frames ring copies
        #: nothing): unregistered when the slot is packed again, K pulls later, or dropped.
        self.served: list[bytes] = []


class ServeRing:
    """Every consumer's ring of slots on one producer.  ``plane`` is what a ring gets when its
    reservation names none."""

    def __init__(self, plane: Plane | str, *, device: str = "cpu", frames_endpoint: str | None = None,
                 digests: bool = False) -> None:
        self.device = device
        self.plane = self._check(Plane(plane))
        #: Put a SHA-256 of each packed tensor's bytes in its ref (recordings then show what moved).
        self.digests = digests
        self._frames_endpoint = frames_endpoint
        #: Frames servers by where they listen ("": this host's private ipc; else the address a remote
        #: consumer reaches this host at).
        self._servers: dict[str, FramesServer] = {}
        self._rings: dict[int, tuple[Plane, list[_Slot]]] = {}
        self._prefix = _shm.segment_prefix("aws")

    def _check(self, plane: Plane) -> Plane:
        if plane is Plane.CUDA_IPC and not self.device.startswith("cuda"):
            raise InvalidArgument(f"a cuda_ipc serve ring needs a CUDA device, not {self.device}")
        if plane not in (Plane.SHM, Plane.CUDA_IPC, Plane.FRAMES):
            raise InvalidArgument(f"plane {plane.value} cannot serve pulls")
        return plane

    def _frames_server(self, toward: str) -> FramesServer:
        """The server for consumers reached at ``toward`` ("": this host's own, on private ipc)."""
        server = self._servers.get(toward)
        if server is None:
            endpoint: str | None
            if toward:
                from actorwire.transport._endpoints import local_address_towards

                endpoint = f"tcp://{local_address_towards(toward)}:0"
            else:
                endpoint = self._frames_endpoint
            server = self._servers[toward] = FramesServer(endpoint)
        return server

    def _new_slot(self, plane: Plane, toward: str, consumer_id: int, index: int, nbytes: int) -> _Slot:
        import torch

        size = max(nbytes, 16)
        if plane is Plane.SHM:
            shm = shared_memory.SharedMemory(name=f"{self._prefix}-{consumer_id}-{index}", create=True, size=size)
            _shm.own(shm)
            base = torch.frombuffer(shm.buf, dtype=torch.uint8, count=size)
            return _Slot(base, shm.name.encode(), "cpu", shm)
        if plane is Plane.CUDA_IPC:
            from actorwire.transport.planes._cuda_ipc import slot_handle

            base = torch.empty(size, dtype=torch.uint8, device=self.device)
            device_index, handle = slot_handle(base)
            return _Slot(base, handle, f"cuda:{device_index}")
        server = self._frames_server(toward)
        if not self.device.startswith("cuda"):  # CPU weights are served in place: no slot memory at all
            return _Slot(None, b"", "cpu", None, server)
        # A GPU producer's frames slot lives in host memory: the pack copies device to host.
        base = torch.empty(size, dtype=torch.uint8)
        key = server.register(base)
        return _Slot(base, handle_for(server.endpoint, key, server.curve_key), "cpu", key, server)

    def reserve(self, consumer_id: int, slots: int, nbytes: int, *, plane: Plane | str | None = None,
                toward: str = "") -> None:
        """(Re)allocate ``consumer_id``'s ring: ``slots`` slots of ``nbytes`` each, on ``plane`` (default:
        the ring's); a frames ring for a consumer elsewhere is served towards its host's ``toward``."""
        if slots < 1:
            raise InvalidArgument(f"a serve ring needs at least one slot, not {slots}")
        chosen = self._check(Plane(plane)) if plane is not None else self.plane
        self.drop(consumer_id)
        self._rings[consumer_id] = (chosen, [self._new_slot(chosen, toward, consumer_id, i, nbytes)
                                             for i in range(slots)])

    def plane_of(self, consumer_id: int) -> Plane | None:
        ring = self._rings.get(consumer_id)
        return ring[0] if ring else None

    def slot_bytes(self, consumer_id: int) -> int:
        ring = self._rings.get(consumer_id)
        if not ring:
            return 0
        slot = ring[1][0]
        return slot.base.numel() if slot.base is not None else 1 << 62  # served in place: no bound

    def pack(self, consumer_id: int, seq: int, tensors: dict[str, Any]) -> dict[str, TensorRef]:
        """Copy ``tensors`` into slot ``seq % K`` of the consumer's ring; their refs."""
        entry = self._rings.get(consumer_id)
        if entry is None:
            raise NotFound(f"consumer {consumer_id} reserved no serve ring here")
        plane, ring = entry
        slot = ring[seq % len(ring)]
        if slot.base is None:
            return self._serve_in_place(slot, tensors)
        layout, total = pack_layout(tensors)
        if total > slot.base.numel():
            raise InvalidArgument(f"pull {seq} of consumer {consumer_id} needs {total} bytes; its slots hold "
                             f"{slot.base.numel()} (reserved from a different plan?)")
        copy_packed(slot.base, layout, tensors)
        if plane is Plane.CUDA_IPC:
            import torch

            # A handle says nothing about pending kernels: the copies must land first.
            torch.cuda.current_stream(slot.base.device).synchronize()
            refs = packed_refs(plane, slot.handle, layout, tensors, device=slot.device, element_offsets=True)
        else:
            if self.device.startswith("cuda"):
                import torch

                torch.cuda.current_stream(self.device).synchronize()  # device-to-host copies landed
            refs = packed_refs(plane, slot.handle, layout, tensors, device="cpu")
        if self.digests:
            refs = {name: msgspec.structs.replace(ref, digest=_digest(slot.base, layout[name], ref.nbytes))
                    for name, ref in refs.items()}
        return refs

    def _serve_in_place(self, slot: _Slot, tensors: dict[str, Any]) -> dict[str, TensorRef]:
        """A CPU producer's frames pull: each tensor served from its own bytes (the producer holds the
        group until every consumer freed it, and a consumer fetches before it frees)."""
        import torch

        server = slot.server
        for key in slot.served:  # pull seq - K: drained before this one was issued
            server.unregister(key)
        slot.served = []
        refs: dict[str, TensorRef] = {}
        for name, t in tensors.items():
            flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
            key = server.register(flat)
            slot.served.append(key)
            (ref,) = packed_refs(Plane.FRAMES, handle_for(server.endpoint, key, server.curve_key), {name: 0},
                                 {name: t}, device="cpu").values()
            if self.digests:
                ref = msgspec.structs.replace(ref, digest=_digest(flat, 0, ref.nbytes))
            refs[name] = ref
        return refs

    def drop(self, consumer_id: int) -> None:
        _, ring = self._rings.pop(consumer_id, (None, []))
        for slot in ring:
            for key in slot.served:
                slot.server.unregister(key)
            slot.served = []
            slot.base = None
            if isinstance(slot.keep, shared_memory.SharedMemory):
                try:
                    slot.keep.close()
                except BufferError:
                    pass
                _shm.unlink(slot.keep)
            elif slot.server is not None and slot.keep is not None:
                slot.server.unregister(slot.keep)

    @property
    def consumers(self) -> list[int]:
        return sorted(self._rings)

    def close(self) -> None:
        for cid in list(self._rings):
            self.drop(cid)
        for server in self._servers.values():
            server.close()
        self._servers.clear()


class TensorImporter:
    """Opens refs of any plane; caches what each plane caches until ``drop()``."""

    def __init__(self) -> None:
        self._planes: dict[Plane, Any] = {}

    def _importer(self, plane: Plane) -> Any:
        imp = self._planes.get(plane)
        if imp is None:
            if plane is Plane.SHM:
                imp = _shm.ShmImporter()
            elif plane is Plane.CUDA_IPC:
                from actorwire.transport.planes._cuda_ipc import CudaIpcImporter

                imp = CudaIpcImporter()
            elif plane is Plane.FRAMES:
                from actorwire.transport.planes._frames import FramesImporter

                imp = FramesImporter()
            else:
                raise InvalidArgument(f"plane {plane.value} cannot be opened from another process")
            self._planes[plane] = imp
        return imp

    def open(self, ref: TensorRef) -> Any:
        return self._importer(ref.plane).open(ref)

    def drop(self) -> None:
        for imp in self._planes.values():
            imp.drop()
        self._planes.clear()
