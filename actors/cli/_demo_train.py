"""The training process of ``actorwire demo``: a plain PyTorch loop with the Worker API embedded.

Run by the demo (``python -m actorwire.actors.cli._demo_train``); it joins from the
environment the demo sets (``ACTORWIRE_JOIN``, ``ACTORWIRE_RUN_ID``,
``ACTORWIRE_RANK``, ``ACTORWIRE_WORLD_SIZE``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from actorwire.actors import _names
from actorwire.transport.internal import settings

DIM = 16


def make_model() -> object:
    """The demo's model; the weight consumers build theirs with it too."""
    import torch

    return torch.nn.Linear(DIM, 1)


def dataset(n: int) -> tuple[object, object]:
    """The same synthetic regression data on every rank (a fixed seed)."""
    import torch

    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, DIM, generator=g)
    w = torch.randn(DIM, 1, generator=g)
    y = x @ w + 0.05 * torch.randn(n, 1, generator=g)
    return x, y


def main() -> int:
    import torch

    from actorwire.actors.control._worker import Worker
    from actorwire.actors.weights._plan import (
        ModuleSource,
        WeightSyncError,
        state_digest,
    )
    from actorwire.actors.weights._sender import WeightSender
    from actorwire.transport.comm import GlooCommunicator

    torch.set_num_threads(1)
    torch.manual_seed(0)  # identical initial weights on every rank
    n = int(os.environ.get("DEMO_DATASET", "3072"))
    batch_size = int(os.environ.get("DEMO_BATCH", "32"))
    # The model is tiny: each batch is stretched to at least this long, so that an epoch lasts long
    # enough (about 0.3 s with 3 workers) for a kill to land inside it, as it would in a real run.
    step_s = float(os.environ.get("DEMO_STEP_MS", "10")) / 1000
    stem = os.environ.get("DEMO_SAVE_STEM", "")
    x, y = dataset(n)
    val_x, val_y = x[-256:], y[-256:]
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.MSELoss()

    def evaluate(epoch: int) -> float:
        with torch.no_grad():
            return float(loss_fn(model(val_x), val_y))

    def checkpoint(version: int) -> str:
        path = f"{stem}.epoch{version}.pt"
        torch.save(model.state_dict(), path)
        return path

    communicator: Any = GlooCommunicator(timeout_s=8)
    if os.environ.get("DEMO_BACKEND") == "nccl":  # one GPU per worker, by launch rank
        from actorwire.transport.comm import NcclCommunicator

        device = torch.device("cuda", (settings().rank or 0) % torch.cuda.device_count())
        torch.cuda.set_device(device)
        model.to(device)
        x, y, val_x, val_y = x.to(device), y.to(device), val_x.to(device), val_y.to(device)
        communicator = NcclCommunicator(device, timeout_s=8)
    with Worker(model=model, communicator=communicator, eval_fn=evaluate,
                checkpoint_fn=checkpoint if stem else None) as worker:
        # After every epoch this rank's weights go to its consumer in the demo process, checked bit-exact.
        launch_rank = (settings().rank or 0)
        sender = WeightSender(worker.system, ModuleSource(model), consumer_ids=[0], prefix=_names.rank_prefix("weights", launch_rank),
                              stall_timeout=20.0)
        while (plan := worker.next_plan()) is not None:
            for idx in worker.batches(plan, batch_size):
                t0 = time.perf_counter()
                xb, yb = x[idx.start:idx.stop], y[idx.start:idx.stop]
                loss = loss_fn(model(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                value = loss.item()
                if (spare := step_s - (time.perf_counter() - t0)) > 0:
                    time.sleep(spare)
                worker.record_scalar("mse", value)
                worker.report_timing(batch_ms=(time.perf_counter() - t0) * 1000, batch_loss=value, lr=0.05)
                if worker.shutting_down:
                    break
            if worker.shutting_down:
                break
            worker.report_epoch(plan)
            try:
                report = sender.send_weights()
            except WeightSyncError as exc:
                print(f"rank {launch_rank}: weight sync failed: {exc}", file=sys.stderr)
                continue  # the consumer is the demo's, not training's: keep training
            if report.consumer_digests.get(0) != state_digest(model.state_dict()):
                raise WeightSyncError(f"rank {launch_rank}: the consumer's weights differ from the trainer's")
        reason = worker.drain_pending_shutdown()
        if reason is not None and stem:
            worker.write_bundle(stem, optimizer)
        worker.finish()
    return 0


if __name__ == "__main__":
    from actorwire.transport import configure_logging

    configure_logging()  # a program of ours: it may configure its process
    sys.exit(main())
