"""From a plain PyTorch loop to three data-parallel ranks (docs/getting-started.md)."""

from __future__ import annotations

import os
import sys
import time

import torch

from actorwire.actors.control import Worker, run_local
from actorwire.messages import Message
from actorwire.messages import kinds as m
from actorwire.transport.comm import GlooCommunicator

N, BATCH, EPOCHS = 512, 32, 3


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """The same samples, in the same order, in every rank: y = x . (0..7) + 1."""
    x = torch.randn(N, 8, generator=torch.Generator().manual_seed(0))
    return x, x @ torch.arange(8.0) + 1.0


def train() -> int:
    """One rank: the plain loop, with the Worker handing out the batches and averaging the model."""
    torch.set_num_threads(1)
    x, y = data()
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with Worker(model=model, communicator=GlooCommunicator(), dataset_size=N) as worker:
        while (plan := worker.next_plan()) is not None:             # None once the run is over
            for idx in worker.batches(plan, BATCH, shuffle_seed=1):  # this rank's share of the epoch
                t0 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(model(x[idx]).squeeze(1), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                worker.report_timing(batch_ms=(time.perf_counter() - t0) * 1e3, batch_loss=loss.item())
                if worker.shutting_down:                             # the run ended early: leave
                    break
            if worker.shutting_down:
                break
            worker.report_epoch(plan)
        worker.finish()                                              # raises if this rank was evicted
    return 0


def main() -> int:
    """A coordinator here, this script as ranks 0, 1 and 2."""

    def show(msg: Message) -> None:
        if isinstance(msg, m.EpochMetrics):
            print(f"epoch {msg.epoch}: loss {msg.avg_loss:.4f}", flush=True)

    run = run_local([sys.executable, __file__], 3, num_epochs=EPOCHS, dataset_size=N, batch_size=BATCH,
                    on_message=show)
    print(run.outcome.line)
    return run.outcome.exit_code


if __name__ == "__main__":
    sys.exit(train() if os.environ.get("ACTORWIRE_JOIN") else main())
