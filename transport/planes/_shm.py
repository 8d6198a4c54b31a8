"""The shared-memory plane: same-host CPU tensors, one copy in, zero copies out.

Ownership
---------
* The **exporter** owns the segments.  It packs a group of tensors into one
  *slot* (a POSIX shared-memory segment), each tensor 16-byte aligned, so a
  group costs one handle; slots are reused once released (a ring grown on
  demand), and unlinked on ``close()``.
* The **importer** maps a slot by name (cached until ``drop()``) and builds
  views straight onto the mapping: reading the tensor copies nothing.
* A segment's name is gone once the exporter unlinks it; a mapping stays valid
  until the importer drops it (POSIX semantics), so "released when the last
  user frees it" holds.  Segments are not left to Python's resource tracker
  (it would unlink them at exit with a "leaked shared_memory" warning in the
  middle of the user's output, and dies with a job kill anyway): if the
  exporter dies, the launcher that watched the process unlinks them: segment
  names carry the creator's pid (``aw<pid>_...``, ``aws<pid>_...``), and
  :func:`sweep` unlinks those of a process that is gone.  Where no actorwire
  launcher watched (torchrun, SLURM), the next process of this user on the
  host that makes segments does it: the first :func:`segment_prefix` of a
  process runs :func:`sweep_orphans`, which unlinks the segments of processes
  that no longer exist.  Names also carry a tag of the creator's pid
  namespace, so a process never judges the pids of another namespace that
  shares /dev/shm (containers of one pod).

Python 3.11 registers a segment with the resource tracker also when it is
merely *attached*, and would unlink the exporter's segment when the importer
exits (bpo-39959); the importer unregisters right after attaching.
"""

from __future__ import annotations

import _posixshmem  # type: ignore[import-not-found]
import itertools
import os
import re
import secrets
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from actorwire.messages import UsageError
from actorwire.messages.kinds import Plane, TensorRef
from actorwire.transport._errors import BadHandle, InvalidArgument
from actorwire.transport._process import process_alive
from actorwire.transport.planes._layout import copy_packed, pack_layout, packed_refs

DEFAULT_SLOT_BYTES = 64 * 1024 * 1024


_NAME = re.compile(r"^(?:aw|aws)(\d+)_([0-9a-f]{4})[0-9a-f]{6}(?:-|$)")
_swept_in: int | None = None  # the pid that swept (a forked child sweeps again)


def _namespace_tag() -> str:
    """Four hex digits of this process's pid namespace: pids are judged only within it."""
    try:
        return f"{os.stat('/proc/self/ns/pid').st_ino & 0xFFFF:04x}"
    except OSError:
        return "0000"


def segment_prefix(kind: str) -> str:
    """A fresh name prefix for this process's segments: ``<kind><pid>_<namespace tag><random>``.
    The first call in a process sweeps the orphans of dead processes first."""
    global _swept_in
    if _swept_in != os.getpid():
        _swept_in = os.getpid()
        sweep_orphans()
    return f"{kind}{os.getpid()}_{_namespace_tag()}{secrets.token_hex(3)}"


def sweep_orphans(directory: str = "/dev/shm") -> list[str]:
    """Unlink the segments of processes that are gone: this user's, made in this pid namespace,
    whose creator no longer exists (its resource tracker died with it, and no launcher of ours
    watched it).  Returns their names.  A reused pid keeps its segments: the safe side."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    tag, me, uid = _namespace_tag(), os.getpid(), os.getuid()
    swept = []
    for name in names:
        found = _NAME.match(name)
        if found is None or found.group(2) != tag:
            continue
        pid = int(found.group(1))
        if pid == me or process_alive(pid):
            continue
        path = os.path.join(directory, name)
        try:
            if os.stat(path, follow_symlinks=False).st_uid != uid:
                continue
            os.unlink(path)
        except OSError:  # gone already, or not ours
            continue
        swept.append(name)
    return swept


def sweep(pid: int, directory: str = "/dev/shm") -> list[str]:
    """Unlink the segments process ``pid`` (gone) created and left: its tracker died with it.
    Returns their names.  A reader that mapped one keeps its mapping (POSIX semantics)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    mine = (f"aw{pid}_", f"aws{pid}_")
    swept = []
    for name in names:
        if name.startswith(mine):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:  # gone already (its tracker was faster), or not ours to remove
                continue
            swept.append(name)
    return swept


class ShmExporter:
    """Copies groups of CPU tensors into reusable shared-memory slots."""

    def __init__(self, *, slot_bytes: int = DEFAULT_SLOT_BYTES, prefix: str | None = None) -> None:
        self.slot_bytes = slot_bytes
        self.prefix = prefix or segment_prefix("aw")
        self._slots: dict[int, shared_memory.SharedMemory] = {}
        self._free: set[int] = set()
        self._ids = itertools.count(1)
        self._closed = False

    def _slot(self, nbytes: int) -> int:
        fits = [s for s in self._free if self._slots[s].size >= nbytes]
        if fits:
            slot = min(fits, key=lambda s: self._slots[s].size)
            self._free.discard(slot)
            return slot
        slot = next(self._ids)
        shm = shared_memory.SharedMemory(
            name=f"{self.prefix}-{slot}", create=True, size=max(nbytes, self.slot_bytes if nbytes else 1))
        self._slots[slot] = shm
        own(shm)
        return slot

    def export(self, tensors: dict[str, Any]) -> tuple[int, dict[str, TensorRef]]:
        """Copy ``tensors`` into one slot; returns the slot id (for ``release``) and their refs."""
        import torch

        if self._closed:
            raise UsageError("the shared-memory exporter is closed")
        for name, t in tensors.items():
            if t.device.type != "cpu":
                raise InvalidArgument(f"{name}: the shm plane carries CPU tensors, got one on {t.device}")
        layout, total = pack_layout(tensors)
        slot = self._slot(total)
        shm = self._slots[slot]
        if total:
            base = torch.frombuffer(shm.buf, dtype=torch.uint8, count=total)
            copy_packed(base, layout, tensors)
            del base  # the mapping cannot close while a view of it lives
        refs = packed_refs(Plane.SHM, shm.name.encode(), layout, tensors, device="cpu")
        return slot, refs

    def release(self, slot: int) -> None:
        """The slot's readers are done: it may be reused."""
        if slot in self._slots:
            self._free.add(slot)

    def close(self) -> None:
        """Unlink every segment (mappings held by importers stay valid until they drop them)."""
        if self._closed:
            return
        self._closed = True
        for shm in self._slots.values():
            shm.close()
            unlink(shm)
        self._slots.clear()

    def __enter__(self) -> ShmExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Segments created by exporters of this process.
_CREATED: set[str] = set()


def unlink(shm: shared_memory.SharedMemory) -> None:
    """Unlink a segment of ours (``SharedMemory.unlink`` would unregister it from the resource
    tracker a second time, and the tracker prints a traceback for that)."""
    _CREATED.discard(shm.name)
    try:
        _posixshmem.shm_unlink(shm._name)  # type: ignore[attr-defined]
    except FileNotFoundError:
        pass


def own(shm: shared_memory.SharedMemory) -> None:
    """A segment this process created: its owner unlinks it (on close; after a crash, ``sweep``)."""
    _CREATED.add(shm.name)
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]

#: Every mapping this process opened, by segment name.  Global on purpose: a
#: view must stay valid even if the importer that made it is garbage-collected
#: (closing the mapping under a live view would fault); only ``drop()`` closes.
_MAPPED: dict[str, shared_memory.SharedMemory] = {}


class ShmImporter:
    """Maps slots by name and returns zero-copy views of the tensors in them."""

    def __init__(self) -> None:
        self._opened: set[str] = set()

    def open(self, ref: TensorRef) -> Any:
        import torch

        if ref.plane is not Plane.SHM:
            raise BadHandle(f"not a shared-memory tensor: plane {ref.plane.value}")
        name = ref.handle.decode()
        shm = _MAPPED.get(name)
        if shm is None:
            try:
                shm = shared_memory.SharedMemory(name=name)
            except FileNotFoundError:
                raise BadHandle(f"shared-memory slot {name!r} is gone (released or its owner died)") from None
            if name not in _CREATED:  # attaching registered it (bpo-39959); our own ones are not registered
                resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
            _MAPPED[name] = shm
        self._opened.add(name)
        dtype = getattr(torch, ref.dtype)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        count = ref.nbytes // itemsize
        flat = torch.frombuffer(shm.buf, dtype=dtype, count=count, offset=ref.offset) if count else \
            torch.empty(0, dtype=dtype)
        return flat.as_strided(ref.shape, ref.stride, ref.storage_offset)

    def drop(self) -> None:
        """Unmap what this importer opened; call once its views are no longer used.

        A mapping with a live view is kept (closing it would fault the view) and
        closed by a later ``drop()``.
        """
        for name in sorted(self._opened):
            shm = _MAPPED.get(name)
            if shm is None:
                continue
            try:
                shm.close()
            except BufferError:
                continue  # a view is still alive
            del _MAPPED[name]
        self._opened.clear()

    close = drop
