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

from actorwire import messages as m
from actorwire.actors import ActorSystem  # actorwire
from actorwire.actors.control import Coordinator, Worker
from actorwire.transport.comm import GlooCommunicator

WORKERS = int(os.environ.get("WORKERS", "3"))


def train() -> int:
    torch.set_num_threads(1)
    x, y, x_test, y_test = digits.load()
    model = digits.model(seed=int(os.environ["ACTORWIRE_RANK"]))  # the first sync makes the ranks' models one
    opt = digits.optimizer(model)
    with Worker(model=model, communicator=GlooCommunicator(), dataset_size=len(x)) as worker:  # actorwire
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
    with ActorSystem() as system:
        inbox = system.inbox("main")
        coordinator = Coordinator(world_size=WORKERS, run_id=system.run_id, num_epochs=digits.EPOCHS,
                                  dataset_size=digits.TRAIN, batch_size=digits.BATCH, form_group=True,
                                  metrics_sink="main", tick_interval=0.5, final_eval=False, eval_every=0)
        system.spawn(coordinator, "coordinator")
        inbox.watch("coordinator")
        children = [system.launch([sys.executable, __file__], rank=r, watcher="coordinator",
                                  env={"ACTORWIRE_WORLD_SIZE": str(WORKERS)}) for r in range(WORKERS)]
        while (got := inbox.get(timeout=120)) is not None and not isinstance(got.message, m.Down):
            if isinstance(got.message, m.EpochMetrics):
                print(f"epoch {got.message.epoch}: loss {got.message.avg_loss:.4f}", flush=True)
        codes = [c.wait(60) for c in children]
    print(f"workers exited with {codes}")
    outcome = coordinator.outcome()  # the run's outcome, not the workers': a recovered death is a success
    print(outcome.line)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(train() if os.environ.get("ACTORWIRE_JOIN") else launch())
