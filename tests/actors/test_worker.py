"""The Worker API against a real coordinator in the same process."""

from __future__ import annotations

import pytest

from actorwire.actors import ActorSystem
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.control._worker import Worker

pytestmark = pytest.mark.timeout(60)


def _worker(system: ActorSystem) -> Worker:
    system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=2, dataset_size=8,
                             eval_every=0, final_eval=False), "coordinator")
    return Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10)


def test_a_coordinator_that_goes_away_ends_the_users_loop_cleanly(system: ActorSystem) -> None:
    """``report_timing`` used to raise ActorDead into the user's training loop."""
    worker = _worker(system)
    plan = worker.next_plan(timeout=10)
    assert plan is not None and plan.epoch == 0
    system.stop("coordinator")
    worker.report_timing(batch_ms=1.0, batch_loss=0.5)  # no traceback in the user's loop
    assert worker.shutting_down
    worker.report_epoch(plan)  # nor here
    assert worker.next_plan(timeout=1) is None


def test_the_users_loop_trains_every_epoch_and_leaves_cleanly(system: ActorSystem) -> None:
    worker = _worker(system)
    epochs = []
    while (plan := worker.next_plan(timeout=10)) is not None:
        for _ in worker.batches(plan, 4):
            worker.report_timing(batch_ms=1.0, batch_loss=0.5)
        worker.report_epoch(plan)
        epochs.append(plan.epoch)
    worker.finish()
    assert epochs == [0, 1] and not worker.drain_pending_shutdown()
