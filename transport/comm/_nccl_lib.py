"""The libnccl binding: the C surface the NCCL communicator drives, over ctypes.

:class:`NcclBackend` is that surface as a protocol (tests drive the
communicator with a fake on the CPU); :class:`CtypesNccl` loads the real
library (:func:`find_nccl` says where from) and owns nothing but the library
handle: communicators, streams and events belong to the caller.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any, Protocol

from actorwire.transport._errors import InvalidArgument
from actorwire.transport._settings import settings
from actorwire.transport.comm._protocol import CommError

SUCCESS, IN_PROGRESS = 0, 7
RESULT_NAMES = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}
DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6, "float32": 7,
          "float64": 8, "bfloat16": 9}
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
#: The environment variables logged at init (NCCL_* ones are added as found).
ENV_LOGGED = ("CUDA_VISIBLE_DEVICES", "ACTORWIRE_NCCL_LIBRARY", "ACTORWIRE_NCCL_DIAGNOSTICS")


class NcclBackend(Protocol):
    """The C surface the communicator needs (``CtypesNccl``, or a fake in tests)."""

    origin: str

    def version(self) -> str: ...
    def unique_id(self) -> bytes: ...
    def init_rank(self, world: int, uid: bytes, rank: int, device: Any) -> tuple[int, Any]: ...
    def status(self, comm: Any) -> int: ...
    def describe(self, code: int, comm: Any) -> str: ...
    def abort(self, comm: Any) -> int: ...
    def destroy(self, comm: Any) -> int: ...
    def call(self, name: str, comm: Any, stream: Any, **args: Any) -> int: ...
    def group_start(self) -> int: ...
    def group_end(self) -> int: ...
    def stream(self, device: Any) -> Any: ...
    def order_before(self, stream: Any, tensors: list[Any]) -> None: ...
    def done_marker(self, comm: Any, stream: Any) -> Any: ...
    def order_after(self, marker: Any, tensors: list[Any]) -> None: ...


# -- the real library ------------------------------------------------------------------------

class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class _Config(ctypes.Structure):
    """``ncclConfig_t`` up to ``netName`` (NCCL 2.17's layout), declared as version 2.17.0.

    NCCL copies ``size`` bytes and keeps its defaults for every field a newer
    version added, so this prefix is valid on every later library.
    """

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("minCTAs", ctypes.c_int),
                ("maxCTAs", ctypes.c_int), ("netName", ctypes.c_char_p)]


_UNDEF_INT = -(2 ** 31)


def _loaded_nccl() -> str | None:
    """A libnccl already mapped into this process (torch's), if any."""
    try:
        with open(f"/proc/{os.getpid()}/maps") as maps:
            for line in maps:
                path = line.split()[-1] if line.strip() else ""
                if "libnccl.so" in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def find_nccl() -> tuple[str, str]:
    """``(path, origin)`` of the libnccl to load, in order of preference.

    ``$ACTORWIRE_NCCL_LIBRARY``; the one torch already loaded; the
    nvidia-nccl wheel (``nvidia/nccl/lib``); the system's.  Raises
    ``CommError`` listing what was tried.
    """
    tried = []
    env = settings().nccl_library
    if env:
        if os.path.exists(env):
            return env, "ACTORWIRE_NCCL_LIBRARY"
        raise CommError(f"ACTORWIRE_NCCL_LIBRARY={env} does not exist")
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
    except ImportError:
        pass
    loaded = _loaded_nccl()
    if loaded:
        return loaded, "already loaded (torch)"
    tried.append("no libnccl loaded by torch")
    import importlib.util

    for package in ("nvidia.nccl",):
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = os.path.join(root, "lib", "libnccl.so.2")
            if os.path.exists(path):
                return path, f"the {package} wheel"
            tried.append(f"{path} missing")
    system = ctypes.util.find_library("nccl")
    if system:
        return system, "the system library path"
    tried.append("no libnccl on the system library path")
    raise CommError("no libnccl found: " + "; ".join(tried) + " (set ACTORWIRE_NCCL_LIBRARY or install "
                    "nvidia-nccl-cu12)")


class CtypesNccl:
    """libnccl through ctypes, with torch streams and events for ordering."""

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            path, origin = find_nccl()
        else:
            origin = "given path"
        self.path, self.origin = path, f"{path} ({origin})"
        self.lib = ctypes.CDLL(path)
        self._events: dict[Any, tuple[Any, Any]] = {}  # per communicator stream: (ready, done)
        self._caller: Any = None  # the caller's stream of the operation under way
        L, c = self.lib, ctypes
        p, i, sz = c.c_void_p, c.c_int, c.c_size_t
        L.ncclGetErrorString.restype = c.c_char_p
        L.ncclGetErrorString.argtypes = [i]
        L.ncclGetLastError.restype = c.c_char_p
        L.ncclGetLastError.argtypes = [p]
        L.ncclCommInitRankConfig.argtypes = [c.POINTER(p), i, _UniqueId, i, c.POINTER(_Config)]
        L.ncclCommGetAsyncError.argtypes = [p, c.POINTER(i)]
        L.ncclCommAbort.argtypes = [p]
        L.ncclCommDestroy.argtypes = [p]
        L.ncclAllReduce.argtypes = [p, p, sz, i, i, p, p]
        L.ncclBroadcast.argtypes = [p, p, sz, i, i, p, p]
        L.ncclAllGather.argtypes = [p, p, sz, i, p, p]
        L.ncclReduceScatter.argtypes = [p, p, sz, i, i, p, p]
        L.ncclSend.argtypes = [p, sz, i, i, p, p]
        L.ncclRecv.argtypes = [p, sz, i, i, p, p]

    def version(self) -> str:
        v = ctypes.c_int()
        self.lib.ncclGetVersion(ctypes.byref(v))
        major, rest = divmod(v.value, 10000)
        return f"{major}.{rest // 100}.{rest % 100}"

    def unique_id(self) -> bytes:
        uid = _UniqueId()
        code = self.lib.ncclGetUniqueId(ctypes.byref(uid))
        if code != SUCCESS:
            raise CommError(f"ncclGetUniqueId failed: {self.describe(code, None)}")
        return ctypes.string_at(ctypes.addressof(uid), 128)  # .internal would stop at the first NUL byte

    def init_rank(self, world: int, uid: bytes, rank: int, device: Any) -> tuple[int, Any]:
        import torch

        torch.cuda.set_device(device)
        comm = ctypes.c_void_p()
        config = _Config(size=ctypes.sizeof(_Config), magic=0xCAFEBEEF, version=21700, blocking=0,
                         cgaClusterSize=_UNDEF_INT, minCTAs=_UNDEF_INT, maxCTAs=_UNDEF_INT, netName=None)
        raw = _UniqueId.from_buffer_copy(uid)  # (memmove into .internal would write into a copy)
        code = self.lib.ncclCommInitRankConfig(ctypes.byref(comm), world, raw, rank, ctypes.byref(config))
        return code, comm

    def status(self, comm: Any) -> int:
        state = ctypes.c_int()
        code = self.lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
        return code if code != SUCCESS else state.value

    def describe(self, code: int, comm: Any) -> str:
        text = self.lib.ncclGetErrorString(code).decode(errors="replace")
        last = self.lib.ncclGetLastError(comm).decode(errors="replace") if comm is not None else ""
        return f"{RESULT_NAMES.get(code, code)} ({text}){': ' + last if last else ''}"

    def abort(self, comm: Any) -> int:
        return int(self.lib.ncclCommAbort(comm))

    def destroy(self, comm: Any) -> int:
        return int(self.lib.ncclCommDestroy(comm))

    def call(self, name: str, comm: Any, stream: Any, **a: Any) -> int:
        op = name
        s = stream.cuda_stream  # plain ints: the argtypes (c_void_p) convert them
        L = self.lib
        for key in ("send", "recv"):
            if key in a:
                a[key] = a[key].data_ptr()
        if op == "all_reduce":
            return int(L.ncclAllReduce(a["send"], a["recv"], a["count"], a["dtype"], a["op"], comm, s))
        if op == "broadcast":
            return int(L.ncclBroadcast(a["send"], a["recv"], a["count"], a["dtype"], a["root"], comm, s))
        if op == "all_gather":
            return int(L.ncclAllGather(a["send"], a["recv"], a["count"], a["dtype"], comm, s))
        if op == "reduce_scatter":
            return int(L.ncclReduceScatter(a["send"], a["recv"], a["count"], a["dtype"], a["op"], comm, s))
        if op == "send":
            return int(L.ncclSend(a["send"], a["count"], a["dtype"], a["peer"], comm, s))
        if op == "recv":
            return int(L.ncclRecv(a["recv"], a["count"], a["dtype"], a["peer"], comm, s))
        raise InvalidArgument(f"unknown NCCL operation {op!r}")

    def group_start(self) -> int:
        return int(self.lib.ncclGroupStart())

    def group_end(self) -> int:
        return int(self.lib.ncclGroupEnd())

    def stream(self, device: Any) -> Any:
        import torch

        return torch.cuda.Stream(device=device)

    # Two events per communicator stream, recorded again by every operation: a wait enqueued on an
    # event depends on its record at that moment, so a later record does not disturb it (CUDA's
    # cudaStreamWaitEvent).  An event created per call, and the caller's stream looked up twice, were
    # a third of a small collective's cost on one H200 (32 us against torch's 22).

    def order_before(self, stream: Any, tensors: list[Any]) -> None:
        import torch

        events = self._events.get(stream)
        if events is None:
            events = self._events[stream] = (torch.cuda.Event(), torch.cuda.Event())
        caller = self._caller = torch.cuda.current_stream(stream.device)
        events[0].record(caller)
        stream.wait_event(events[0])
        for t in tensors:
            t.record_stream(stream)  # the allocator must not reuse them before the collective is done

    def done_marker(self, comm: Any, stream: Any) -> Any:
        event = self._events[stream][1]
        event.record(stream)
        return event

    def order_after(self, marker: Any, tensors: list[Any]) -> None:
        self._caller.wait_event(marker)  # the stream order_before found: one look-up an operation
