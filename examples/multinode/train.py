"""One worker of a multi-host run: a plain PyTorch loop with the Worker API, started by any launcher.

It trains an MLP on scikit-learn's digits (examples/digits.py), shuffled anew each epoch the
same way on every rank, and prints its test accuracy and a checksum of its parameters at the end:
every rank that finishes holds the same model.  It reads who it is and where the coordinator
listens from the launcher's environment (torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR;
SLURM: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODELIST; or ACTORWIRE_JOIN and
ACTORWIRE_RUN_ID), with no flags.  The coordinator listens on $ACTORWIRE_PORT (default 29555) of
the master host, with ``--dataset-size`` equal to $TRAIN_SAMPLES (default 1400, all of the
training set).  See docs/multinode.md.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # examples/digits.py
import digits  # noqa: E402

from actorwire.actors.control import Worker  # noqa: E402
from actorwire.transport.comm import GlooCommunicator  # noqa: E402


def main() -> int:
    torch.set_num_threads(1)
    x, y, x_test, y_test = digits.load()
    n = int(os.environ.get("TRAIN_SAMPLES", str(digits.TRAIN)))
    if not 0 < n <= len(x):
        print(f"train.py: TRAIN_SAMPLES must be 1 to {len(x)} (the training digits), got {n}", file=sys.stderr)
        return 2
    x, y = x[:n], y[:n]
    # Seeded per process: whatever each rank starts from, the run's first sync gives all one model.
    model = digits.model(seed=int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))))
    optimizer = digits.optimizer(model)
    # Checkpoints (the coordinator's --checkpoint-every) go to CHECKPOINT_DIR, a directory every host
    # reaches: when every rank is lost and the launcher starts them again (torchrun --max-restarts),
    # each new rank loads the last one before it trains.
    where = pathlib.Path(os.environ.get("CHECKPOINT_DIR", "checkpoints")).resolve()
    with Worker(model=model, optimizer=optimizer, communicator=GlooCommunicator(timeout_s=10), dataset_size=n,
                checkpoint_fn=lambda epoch: digits.save(str(where / f"epoch-{epoch}.pt"), model, optimizer),
                restore_fn=lambda path, epoch: digits.restore(path, model, optimizer)) as worker:
        resumed = f", resumed at epoch {worker.resumed_from[1]}" if worker.resumed_from else ""
        print(f"rank {worker.rank} of {worker.world_size} joined{resumed}", flush=True)
        while (plan := worker.next_plan()) is not None:
            for idx in worker.batches(plan, digits.BATCH, shuffle_seed=digits.SHUFFLE_SEED):
                t0 = time.perf_counter()
                loss = digits.step(model, optimizer, x[idx], y[idx])
                worker.report_timing(batch_ms=(time.perf_counter() - t0) * 1000, batch_loss=loss)
                if worker.shutting_down:
                    break
            if worker.shutting_down:
                break
            worker.report_epoch(plan)
        worker.drain_pending_shutdown()
        worker.finish()  # raises if this rank was evicted or lost its coordinator: its model is no result
    # One write: ranks that share a terminal (or a launcher's pipe) do not cut into each other's line.
    sys.stdout.write(f"rank {worker.rank} final: test accuracy {digits.accuracy(model, x_test, y_test):.4f} "
                     f"params {digits.checksum(model)}\n")
    sys.stdout.flush()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
