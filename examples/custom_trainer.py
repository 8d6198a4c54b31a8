"""A plain PyTorch training loop with actorwire's Worker API embedded.

Run it as is: it starts a coordinator in this process and two copies of itself
as workers, which train data-parallel (gloo all-reduce on the coordinator's
cadence) and print the per-epoch aggregated metrics.

    python examples/custom_trainer.py

The lines marked ``# actorwire`` are all a trainer adds (16 of them).
"""

from __future__ import annotations

import os
import sys
import time

import torch

from actorwire import messages as m
from actorwire.actors import ActorSystem  # actorwire
from actorwire.actors.control import Coordinator, Worker
from actorwire.transport.comm import GlooCommunicator

DATASET, BATCH, EPOCHS, WORKERS = 2048, 32, 3, 2


def train() -> int:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(DATASET, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with Worker(model=model, communicator=GlooCommunicator()) as worker:  # actorwire
        while (plan := worker.next_plan()) is not None:  # actorwire
            for idx in worker.batches(plan, BATCH):  # actorwire
                t0 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(model(x[idx.start:idx.stop]), y[idx.start:idx.stop])
                opt.zero_grad()
                loss.backward()
                opt.step()
                worker.record_scalar("mse", loss.item())  # actorwire
                worker.report_timing(batch_ms=(time.perf_counter() - t0) * 1e3,  # actorwire
                                     batch_loss=loss.item(), lr=0.05)  # actorwire
                if worker.shutting_down:  # actorwire
                    break  # actorwire
            if worker.shutting_down:  # actorwire
                break  # actorwire
            worker.report_epoch(plan)  # actorwire
        for metrics in worker.poll_metrics():  # actorwire
            print(f"rank {worker.rank} saw epoch {metrics.epoch}: loss {metrics.avg_loss:.4f}")  # actorwire
        worker.finish()  # actorwire
    return 0


def launch() -> int:
    """Start a coordinator here and the workers as child processes, then wait for the run to end."""
    with ActorSystem() as system:
        inbox = system.inbox("main")
        system.spawn(Coordinator(world_size=WORKERS, run_id=system.run_id, num_epochs=EPOCHS, dataset_size=DATASET,
                                 batch_size=BATCH, form_group=True, metrics_sink="main", tick_interval=0.5,
                                 final_eval=False, eval_every=0), "coordinator")
        inbox.watch("coordinator")
        children = [system.launch([sys.executable, __file__], rank=r, env={"ACTORWIRE_WORLD_SIZE": str(WORKERS)})
                    for r in range(WORKERS)]
        while (got := inbox.get(timeout=120)) is not None and not isinstance(got.message, m.Down):
            if isinstance(got.message, m.EpochMetrics):
                print(f"epoch {got.message.epoch}: loss {got.message.avg_loss:.4f}")
        codes = [c.wait(60) for c in children]
    print(f"workers exited with {codes}")
    return 0 if codes == [0] * WORKERS else 1


if __name__ == "__main__":
    sys.exit(train() if os.environ.get("ACTORWIRE_JOIN") else launch())
