"""One rank of the multi-GPU NCCL tests: ``python _nccl_rank.py RANK WORLD PORT MODE``.

Rank 0 prints the unique id (hex) first; the test hands it to the others on
stdin.  MODE ``collectives`` checks every collective against torch.distributed's
NCCL on the same data and prints ``ok``; MODE ``peer-killed`` initialises,
prints ``ready``, and (rank 0) runs an all_reduce whose peer the test kills,
printing the error it ends with.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

from actorwire.actors.bench._nccl import local_rank_over_pipe


def main() -> None:
    rank, world, port, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    comm = local_rank_over_pipe(rank, world, timeout_s=10)
    if mode == "peer-killed":
        print("ready", flush=True)
        if rank == 0:
            sys.stdin.readline()  # the test killed rank 1
            t0 = time.monotonic()
            try:
                comm.all_reduce(torch.ones(1 << 20, device="cuda"))
                print("no error", flush=True)
            except Exception as exc:
                print(f"{type(exc).__name__} after {time.monotonic() - t0:.1f}s: {exc}", flush=True)
            comm.close()
        else:
            time.sleep(600)
        return
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    g = torch.Generator(device="cuda").manual_seed(rank)
    x = torch.randn(4097, device="cuda", generator=g)
    for op, ref_op in [("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN)]:
        a, b = x.clone(), x.clone()
        comm.all_reduce(a, op)
        dist.all_reduce(b, ref_op)
        assert torch.equal(a, b), op
    a, b = x.clone(), x.clone()
    comm.broadcast(a, root=world - 1)
    dist.broadcast(b, src=world - 1)
    assert torch.equal(a, b), "broadcast"
    out, ref = torch.empty(4097 * world, device="cuda"), torch.empty(4097 * world, device="cuda")
    comm.all_gather(out, x)
    dist.all_gather_into_tensor(ref, x)
    assert torch.equal(out, ref), "all_gather"
    big = torch.randn(1024 * world, device="cuda", generator=g)
    o1, o2 = torch.empty(1024, device="cuda"), torch.empty(1024, device="cuda")
    comm.reduce_scatter(o1, big)
    dist.reduce_scatter_tensor(o2, big)
    assert torch.equal(o1, o2), "reduce_scatter"
    got = torch.empty(16, device="cuda")
    with comm.group():
        comm.send(torch.full((16,), float(rank), device="cuda"), (rank + 1) % world)
        comm.recv(got, (rank - 1) % world)
    assert float(got[0]) == float((rank - 1) % world), "send/recv"
    torch.cuda.synchronize()
    dist.destroy_process_group()
    comm.close()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
