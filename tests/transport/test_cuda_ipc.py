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
import sys, msgspec, torch
from actorwire.messages import TensorRef
from actorwire.transport.planes._cuda_ipc import CudaIpcImporter
refs = msgspec.msgpack.decode(bytes.fromhex(sys.stdin.readline().strip()), type=dict[str, TensorRef])
imp = CudaIpcImporter()
views = {k: imp.open(r) for k, r in refs.items()}
again = imp.open(refs["a"])
print(imp.open_count, flush=True)
for k in sorted(views):
    print(k, float(views[k].float().sum()), tuple(views[k].shape), views[k].is_contiguous(), flush=True)
views["a"][0] = 42.0          # write through the shared memory
torch.cuda.synchronize()
print("written", flush=True)
sys.stdin.readline()
"""


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
def test_tensors_cross_processes_by_handle_and_share_memory() -> None:
    import torch

    base = torch.arange(64, dtype=torch.float32, device="cuda")
    tensors = {"a": base[:16], "b": base[16:48].reshape(4, 8).t(), "c": torch.ones(3, 5, dtype=torch.bfloat16,
                                                                                   device="cuda")}
    expected = {name: float(t.float().sum()) for name, t in tensors.items()}  # before the consumer writes
    exporter = CudaIpcExporter()
    key, refs = exporter.export(tensors)
    assert all(r.plane is Plane.CUDA_IPC and r.device == "cuda:0" for r in refs.values())
    assert exporter.held == 2  # storages: "a" and "b" are views of one
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(msgspec.msgpack.encode(refs).hex() + "\n")
        proc.stdin.flush()
        # "a" and "b" share one storage: opened once; "c" is another.
        assert proc.stdout.readline().strip() == "2"
        lines = [proc.stdout.readline().split() for _ in range(3)]
        got = {name: (float(total), shape, contiguous) for name, total, *rest in lines
               for shape, contiguous in [(" ".join(rest[:-1]), rest[-1])]}
        assert got["a"][0] == expected["a"]
        assert got["b"][0] == expected["b"] and got["b"][2] == "False"  # the strided view survives
        assert got["c"][0] == 15.0
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
