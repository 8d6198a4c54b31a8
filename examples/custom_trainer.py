"""A plain PyTorch training loop with actorwire's Worker API embedded.

Run it as is: it starts a coordinator in this process and three copies of itself
as workers, which train an MLP on scikit-learn's digits data-parallel (gloo
all-reduce on the coordinator's cadence), print the per-epoch aggregated
metrics, and each its final test accuracy and parameter checksum: every rank
ends with the same model.

    python examples/custom_trainer.py

The lines marked ``# actorwire`` are all a trainer adds.
"""

from __future__ import annotations

import os
import sys
import time

import digits  # examples/digits.py: the model, the data, one training step
import torch

from actorwire.actors.control import Worker, run_local  # actorwire
from actorwire.messages import Message
from actorwire.messages import kinds as m
from actorwire.transport.comm import GlooCommunicator

WORKERS = int(os.environ.get("WORKERS", "3"))


def train() -> int:
    torch.set_num_threads(1)
    x, y, x_test, y_test = digits.load()
    model = digits.model(seed=int(os.environ["ACTORWIRE_RANK"]))  # the first sync makes the ranks' models one
    opt = digits.optimizer(model)
    with Worker(model=model, optimizer=opt, communicator=GlooCommunicator(), dataset_size=len(x)) as worker:  # actorwire
        while (plan := worker.next_plan()) is not None:  # actorwire
            for idx in worker.batches(plan, digits.BATCH, shuffle_seed=digits.SHUFFLE_SEED):  # actorwire
                t0 = time.perf_counter()
                loss = digits.step(model, opt, x[idx], y[idx])
                worker.report_timing(batch_ms=(time.perf_counter() - t0) * 1e3, batch_loss=loss)  # actorwire
                if worker.shutting_down:  # actorwire
                    break  # actorwire
            if worker.shutting_down:  # actorwire
                break  # actorwire
            worker.report_epoch(plan)  # actorwire
        # finish() raises if this rank was evicted or lost its coordinator: its model is not the run's.
        worker.finish()  # actorwire
    # One write: ranks that share a terminal (or a launcher's pipe) do not cut into each other's line.
    sys.stdout.write(f"rank {worker.rank} final: test accuracy {digits.accuracy(model, x_test, y_test):.4f} "
                     f"params {digits.checksum(model)}\n")
    sys.stdout.flush()
    return 0


def launch() -> int:
    """Start a coordinator here and the workers as child processes, then wait for the run to end."""

    def show(msg: Message) -> None:
        if isinstance(msg, m.EpochMetrics):
            print(f"epoch {msg.epoch}: loss {msg.avg_loss:.4f}", flush=True)

    run = run_local([sys.executable, __file__], WORKERS, num_epochs=digits.EPOCHS,  # actorwire
                    dataset_size=digits.TRAIN, batch_size=digits.BATCH, on_message=show)
    print(f"workers exited with {run.exit_codes}")
    print(run.outcome.line)  # the run's outcome, not the workers': a recovered death is a success
    return run.outcome.exit_code


if __name__ == "__main__":
    sys.exit(train() if os.environ.get("ACTORWIRE_JOIN") else launch())
