"""Multi-GPU tests (marker ``multigpu``): NCCL between processes, cuda_ipc across devices, recovery.

They need two or more GPUs and skip otherwise; ``make test-gpu`` runs them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from conftest import TESTS, stop_process

pytestmark = [pytest.mark.multigpu, pytest.mark.timeout(300)]


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(world: int, mode: str) -> list[subprocess.Popen]:
    port = _port()
    procs = [subprocess.Popen([sys.executable, str(TESTS / "_nccl_rank.py"), str(r), str(world), str(port), mode],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for r in range(world)]
    uid = procs[0].stdout.readline().strip()  # type: ignore[union-attr]
    assert uid, "rank 0 printed no unique id"
    for p in procs[1:]:
        p.stdin.write(uid + "\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
    return procs


def test_every_collective_matches_torch_across_gpus() -> None:
    procs = _ranks(min(_gpus(), 4), "collectives")
    try:
        outs = [p.stdout.read().strip() for p in procs]  # type: ignore[union-attr]
        codes = [p.wait(120) for p in procs]
        assert codes == [0] * len(procs) and outs == ["ok"] * len(procs), outs
    finally:
        stop_process(*procs)


def test_a_collective_whose_peer_was_killed_ends_in_an_error_not_a_hang() -> None:
    procs = _ranks(2, "peer-killed")
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]  # type: ignore[union-attr]
        procs[1].kill()
        procs[1].wait(30)
        procs[0].stdin.write("\n")  # type: ignore[union-attr]
        procs[0].stdin.flush()  # type: ignore[union-attr]
        line = procs[0].stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith(("CommTimeout", "CommUnhealthy")), line
    finally:
        stop_process(*procs)


def test_cuda_ipc_between_processes_on_different_gpus() -> None:
    code = (
        "import sys, msgspec, torch\n"
        "from actorwire.messages import TensorRef\n"
        "from actorwire.transport.planes._cuda_ipc import CudaIpcImporter\n"
        "refs = msgspec.msgpack.decode(bytes.fromhex(sys.stdin.readline()), type=dict[str, TensorRef])\n"
        "src = CudaIpcImporter().open(refs['w'])\n"
        "dst = src.to('cuda:1')\n"
        "torch.cuda.synchronize()\n"
        "print(float(dst.sum()), dst.device, flush=True)\n"
    )
    import msgspec
    import torch

    from actorwire.transport.planes._cuda_ipc import CudaIpcExporter

    w = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
    exporter = CudaIpcExporter()
    _, refs = exporter.export({"w": w})
    proc = subprocess.run([sys.executable, "-c", code], input=msgspec.msgpack.encode(refs).hex() + "\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    total, device = proc.stdout.split()
    assert float(total) == float(w.sum()) and device == "cuda:1"


def test_the_demo_recovers_from_a_killed_rank_under_nccl() -> None:
    workers = min(_gpus(), 3)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "actorwire", "demo", "--backend", "nccl", "--workers", str(workers),
                           "--kill-rank", "1", "--at-epoch", "1"], capture_output=True, text=True, timeout=280,
                          env=env)
    out = proc.stdout
    assert "SIGKILLed rank 1" in out, out + proc.stderr[-3000:]
    assert "lost rank(s): [1]" in out, out + proc.stderr[-3000:]
    if workers >= 3:  # the survivors re-formed their NCCL group and finished
        assert proc.returncode == 0, out + proc.stderr[-3000:]
