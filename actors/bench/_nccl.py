"""``actorwire bench nccl``: all_reduce bus bandwidth, ours against torch.distributed's NCCL.

One process per visible GPU (``--world`` to choose fewer).  Rank 0 creates
the NCCL unique id and the parent hands it to the others on their stdin (a
pipe, within one machine); each rank then times ``all_reduce`` (sum, float32)
from 1 MiB to 1 GiB with our communicator and with ``torch.distributed``
(backend nccl) on the same GPUs, in the same run.

Bus bandwidth is ``bytes / time * 2 (n - 1) / n`` (NCCL's convention); on a
single GPU that factor is 0, so algorithm bandwidth (``bytes / time``) is
reported instead and the row says so.  Target: at least 0.95 of torch's at
256 MiB and above.  ``nccl.all_reduce.call``: what one small all_reduce (one
float) costs the caller, ours against torch's, in microseconds per call over
2,000 calls (both enqueued without waiting).  Target: at most 1.2x torch's.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from typing import Any

from actorwire.actors.bench._harness import Result
from actorwire.transport.internal import ChildFailed

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]


def _label(n: int) -> str:
    return f"{n >> 30}GiB" if n >= 1 << 30 else f"{n >> 20}MiB"


def _time(fn: Any, nbytes: int) -> float:
    return _per_call(fn, max(3, min(50, (4 << 30) // nbytes)), warm=2)


def _per_call(fn: Any, calls: int = 2000, *, warm: int = 50) -> float:
    """Seconds per call of ``fn`` (enqueued work) after ``warm`` calls, the GPU drained before and after."""
    import torch

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls


def local_rank_over_pipe(rank: int, world: int, *, timeout_s: float) -> Any:
    """A communicator for one of ``world`` processes on this host, GPU ``rank``, whose parent relays the id.

    Rank 0 prints the unique id (hex) as its first line; the parent writes it to
    the others' stdin.  For benchmarks and tests on one machine; runs use the bus.
    """
    import torch

    from actorwire.transport.comm import NcclCommunicator

    torch.cuda.set_device(rank)
    comm = NcclCommunicator(rank, timeout_s=timeout_s)
    if rank == 0:
        uid = comm.new_unique_id()
        print(uid.hex(), flush=True)
    else:
        uid = bytes.fromhex(sys.stdin.readline().strip())
    comm.init(uid, rank, world)
    return comm


def _rank(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist


    comm = local_rank_over_pipe(rank, world, timeout_s=120)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    one = torch.ones(1, dtype=torch.float32, device="cuda")
    ours_call = _per_call(lambda: comm.all_reduce(one, wait=False))
    torch_call = _per_call(lambda: dist.all_reduce(one))
    if rank == 0:
        print(json.dumps({"call": True, "ours": ours_call, "torch": torch_call}), flush=True)
    for nbytes in SIZES:
        x = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        # Ours waits for completion inside each call (the deadline is polled); torch's is enqueued.
        ours = _time(lambda x=x: comm.all_reduce(x, wait=False), nbytes)
        ref = _time(lambda x=x: dist.all_reduce(x), nbytes)
        if rank == 0:
            print(json.dumps({"bytes": nbytes, "ours": ours, "torch": ref}), flush=True)
        del x  # free this size before the next one is allocated
    dist.destroy_process_group()
    comm.close()


def run(world: int | None = None, progress: Any = sys.stderr) -> list[Result]:
    import torch

    if not torch.cuda.is_available():
        print("bench nccl: no CUDA device; nothing to measure", file=progress)
        return []
    world = world or torch.cuda.device_count()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-m", "actorwire.actors.bench._nccl", str(r), str(world), str(port)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for r in range(world)]
    results: list[Result] = []
    try:
        assert procs[0].stdout is not None
        uid = procs[0].stdout.readline().strip()
        if not uid:
            raise ChildFailed("bench nccl: rank 0 produced no unique id (see its error above)")
        for p in procs[1:]:
            assert p.stdin is not None
            p.stdin.write(uid + "\n")
            p.stdin.flush()
        factor = 2 * (world - 1) / world if world > 1 else 1.0
        kind = "busbw" if world > 1 else "algbw (1 GPU)"
        for line in procs[0].stdout:
            row = json.loads(line)
            if row.get("call"):
                results.append(Result.against("nccl.all_reduce.call", row["ours"] * 1e6, "us", row["torch"] * 1e6,
                                              "<= 1.2x torch"))
                print(f"  one float: {row['ours'] * 1e6:.1f} vs torch {row['torch'] * 1e6:.1f} us a call",
                      file=progress)
                continue
            n = row["bytes"]
            ours, ref = n / row["ours"] / 1e9 * factor, n / row["torch"] / 1e9 * factor
            note = ">= 0.95 of torch" if n >= 256 << 20 else ""
            results.append(Result.against(f"nccl.all_reduce.{_label(n)}", ours, f"GB/s {kind}", ref, note))
            print(f"  {_label(n)}: {ours:.1f} vs torch {ref:.1f} GB/s", file=progress)
        codes = [p.wait(300) for p in procs]
        if any(codes):
            raise ChildFailed(f"bench nccl: rank exit codes {codes}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()
    return results


if __name__ == "__main__":
    from actorwire.transport import configure_logging

    configure_logging()  # a program of ours: it may configure its process
    _rank(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
