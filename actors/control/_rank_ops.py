"""What every data-parallel rank does the same way, embedded (``Worker``) or as an actor (``GpuWorker``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from actorwire.messages import Checkpoint, CheckpointResult, EvalResult, ExecuteEval
from actorwire.transport.comm import Communicator


def weighted_average(comm: Communicator, params: list[Any], steps: int) -> None:
    """Work-weighted all-reduce: parameters weighed by ``steps`` since the last sync, summed, divided once.

    The weight is at least 1: a rank that synced just before a death still counts when the
    broken cycle is redone.  Raises ``CommError`` when the group is broken.
    """
    import torch
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    with torch.no_grad():
        flat = parameters_to_vector(params)
        weight = float(max(1, steps))
        buf = torch.cat([flat * weight, torch.tensor([weight], dtype=flat.dtype, device=flat.device)])
        comm.all_reduce_sum(buf)
        total = float(buf[-1])
        if total > 0:
            vector_to_parameters(buf[:-1] / total, params)


def run_eval(rank: int, msg: ExecuteEval, fn: Callable[[int], float] | None) -> EvalResult:
    """Run an eval; a failure (or no eval function) becomes ``error`` with a NaN metric."""
    t0 = time.monotonic()
    metric = float("nan")
    error: str | None = "no eval function given"
    if fn is not None:
        try:
            metric, error = float(fn(msg.epoch)), None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return EvalResult(rank=rank, schedule_id=msg.schedule_id, epoch=msg.epoch, metric=metric,
                      elapsed_ms=(time.monotonic() - t0) * 1000, error=error)


def run_checkpoint(rank: int, msg: Checkpoint, fn: Callable[[int], str | None] | None) -> CheckpointResult:
    """Run a checkpoint; a failure (or no checkpoint function) becomes ``error``."""
    t0 = time.monotonic()
    path: str | None = None
    error: str | None = "no checkpoint function given"
    if fn is not None:
        try:
            path, error = fn(msg.version), None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return CheckpointResult(rank=rank, version=msg.version, elapsed_ms=(time.monotonic() - t0) * 1000,
                            error=error, path=path)
