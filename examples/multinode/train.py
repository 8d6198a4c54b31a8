"""One worker of a multi-host run: a plain PyTorch loop with the Worker API, started by any launcher.

It reads who it is and where the coordinator listens from the launcher's
environment (torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR; SLURM:
SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODELIST; or ACTORWIRE_JOIN
and ACTORWIRE_RUN_ID), with no flags.  The coordinator listens on
$ACTORWIRE_PORT (default 29555) of the master host.  See docs/multinode.md.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from actorwire.actors.control import Worker
from actorwire.transport.comm import GlooCommunicator


def main() -> int:
    torch.manual_seed(0)  # the same initial weights on every rank
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1234)
    n = int(os.environ.get("TRAIN_SAMPLES", "2048"))
    x = torch.randn(n, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with Worker(model=model, communicator=GlooCommunicator(timeout_s=10), dataset_size=n) as worker:
        print(f"rank {worker.rank} of {worker.world_size} joined", flush=True)
        while (plan := worker.next_plan()) is not None:
            for idx in worker.batches(plan, 32):
                t0 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(model(x[idx.start:idx.stop]), y[idx.start:idx.stop])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                worker.record_scalar("mse", loss.item())
                worker.report_timing(batch_ms=(time.perf_counter() - t0) * 1000, batch_loss=loss.item())
                if worker.shutting_down:
                    break
            if worker.shutting_down:
                break
            worker.report_epoch(plan)
        worker.drain_pending_shutdown()
        worker.finish()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
