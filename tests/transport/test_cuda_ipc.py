"""The CUDA IPC plane: handles cross a process boundary, memory is shared, references are held."""

from __future__ import annotations

import subprocess
import sys
import warnings

import msgspec
import pytest
from conftest import stop_process

from actorwire.messages import Plane, TensorRef
from actorwire.transport.planes._cuda_ipc import (
    CudaIpcExporter,
    CudaIpcImporter,
    expandable_segments_on,
)

CONSUMER = """
import hashlib, sys, msgspec, torch
from actorwire.messages import TensorRef
from actorwire.transport.planes._cuda_ipc import CudaIpcImporter
refs = msgspec.msgpack.decode(bytes.fromhex(sys.stdin.readline().strip()), type=dict[str, TensorRef])
imp = CudaIpcImporter()
views = {k: imp.open(r) for k, r in refs.items()}
again = imp.open(refs["a"])
print(imp.open_count, flush=True)
for k in sorted(views):
    print(k, float(views[k].float().sum()), tuple(views[k].shape), views[k].is_contiguous(), flush=True)
print(hashlib.sha256(b"".join(views[k].contiguous().cpu().view(torch.uint8).numpy().tobytes()
                              for k in sorted(views))).hexdigest(), flush=True)
views["a"][0] = 42.0          # write through the shared memory
torch.cuda.synchronize()
print("written", flush=True)
sys.stdin.readline()
"""


def _allocations(refs: dict[str, TensorRef]) -> int:
    """How many allocations (or, on torch's path, storages) the refs name: what an importer opens."""
    from actorwire.transport.planes._cuda_ipc import IpcHandle

    names = set()
    for ref in refs.values():
        try:
            names.add(msgspec.msgpack.decode(ref.handle, type=IpcHandle).mem)
        except msgspec.ValidationError:
            handle, _, offset, *_ = msgspec.msgpack.decode(ref.handle)
            names.add((handle, offset))
    return len(names)


def test_expandable_segments_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert expandable_segments_on()
    with pytest.warns(RuntimeWarning, match="expandable_segments:True: CUDA IPC opens get several times slower"):
        CudaIpcExporter()
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CudaIpcExporter()


def test_importer_refuses_other_planes() -> None:
    with pytest.raises(ValueError, match="not a CUDA IPC tensor: plane shm"):
        CudaIpcImporter().open(TensorRef(dtype="float32", shape=[1], stride=[1], plane=Plane.SHM))


@pytest.mark.gpu
@pytest.mark.timeout(120)
@pytest.mark.parametrize("public_api", [True, False], ids=["cuda-python", "torch-private"])
def test_tensors_cross_processes_by_handle_and_share_memory(public_api: bool) -> None:
    """Both ways of sharing (CUDA's public API through cuda-python, and torch's private one it
    replaces) give the consumer the same bytes, the same views, and the exporter's memory."""
    import hashlib

    import torch

    if public_api:
        pytest.importorskip("cuda.bindings", reason="the public API path needs cuda-python")
    base = torch.arange(64, dtype=torch.float32, device="cuda")
    tensors = {"a": base[:16], "b": base[16:48].reshape(4, 8).t(), "c": torch.ones(3, 5, dtype=torch.bfloat16,
                                                                                   device="cuda")}
    expected = {name: float(t.float().sum()) for name, t in tensors.items()}  # before the consumer writes
    digest = hashlib.sha256(b"".join(tensors[k].contiguous().cpu().view(torch.uint8).numpy().tobytes()
                                     for k in sorted(tensors))).hexdigest()
    exporter = CudaIpcExporter(public_api=public_api)
    assert exporter.public_api is public_api
    key, refs = exporter.export(tensors)
    assert all(r.plane is Plane.CUDA_IPC and r.device == "cuda:0" for r in refs.values())
    assert exporter.held == 2  # storages: "a" and "b" are views of one
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(msgspec.msgpack.encode(refs).hex() + "\n")
        proc.stdin.flush()
        # Each allocation (or storage) is opened once, however many views name it.
        assert proc.stdout.readline().strip() == str(_allocations(refs))
        lines = [proc.stdout.readline().split() for _ in range(3)]
        got = {name: (float(total), shape, contiguous) for name, total, *rest in lines
               for shape, contiguous in [(" ".join(rest[:-1]), rest[-1])]}
        assert got["a"][0] == expected["a"]
        assert got["b"][0] == expected["b"] and got["b"][2] == "False"  # the strided view survives
        assert got["c"][0] == 15.0
        assert proc.stdout.readline().strip() == digest  # bit-exact
        assert proc.stdout.readline().strip() == "written"
        torch.cuda.synchronize()
        assert base[0].item() == 42.0  # the consumer wrote into the exporter's memory
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(60) == 0
    finally:
        stop_process(proc)
    exporter.release(key)
    assert exporter.held == 0


@pytest.mark.gpu
def test_exporter_refuses_cpu_tensors() -> None:
    import torch

    with pytest.raises(ValueError, match="the cuda_ipc plane carries GPU tensors, got one on cpu"):
        CudaIpcExporter().export({"x": torch.ones(2)})


def test_a_crafted_handle_cannot_reach_past_its_allocation() -> None:
    """The view a ref describes must lie inside the allocation its handle names (checked before CUDA is
    touched): a peer cannot make the importer read or write other memory."""
    from actorwire.transport.planes._cuda_ipc import IpcHandle

    handle = msgspec.msgpack.encode(IpcHandle(mem=bytes(64), size=4096, offset=1024, event=bytes(64)))
    for shape, stride, offset, says in (([1024], [1], 0, "reaches past the 4096-byte allocation"),
                                        ([4], [-1], 3, "strides >= 0"),
                                        ([10], [100], 0, "reaches past")):
        ref = TensorRef(dtype="float32", shape=shape, stride=stride, storage_offset=offset, device="cuda:0",
                        plane=Plane.CUDA_IPC, handle=handle)
        with pytest.raises(ValueError, match=says):
            CudaIpcImporter().open(ref)
    short = msgspec.msgpack.encode(IpcHandle(mem=b"x", size=4096, offset=0, event=bytes(64)))
    with pytest.raises(ValueError, match="malformed CUDA IPC handle"):
        CudaIpcImporter().open(TensorRef(dtype="float32", shape=[1], stride=[1], device="cuda:0",
                                         plane=Plane.CUDA_IPC, handle=short))


def test_a_handle_that_decodes_as_neither_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed CUDA IPC handle"):
        CudaIpcImporter().open(TensorRef(dtype="float32", shape=[1], stride=[1], device="cuda:0",
                                         plane=Plane.CUDA_IPC, handle=b"\x93\x01\x02\x03"))


@pytest.mark.gpu
def test_the_public_api_works_from_a_thread_that_never_used_cuda() -> None:
    """A serve ring packs in its adapter's thread: the driver call that finds an allocation needs a
    current context there (it failed with CUDA_ERROR_INVALID_CONTEXT before make_current)."""
    import threading

    import torch

    pytest.importorskip("cuda.bindings", reason="the public API path needs cuda-python")
    from actorwire.transport.planes._cuda_ipc import slot_handle

    out: list[object] = []

    def run() -> None:
        try:
            out.append(slot_handle(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))[0])
            out.append(len(CudaIpcExporter().export({"x": torch.ones(4, device="cuda")})[1]))
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert out == [0, 1]
