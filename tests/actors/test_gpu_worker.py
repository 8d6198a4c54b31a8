"""GpuWorker: the worker as an actor, trained under the coordinator across processes (gloo on the CPU)."""

from __future__ import annotations

import os

import pytest
from conftest import TESTS

from actorwire import messages as m
from actorwire.actors import ActorSystem
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.testing import ActorHarness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
TESTS_DIR = str(TESTS)


def test_two_actor_workers_train_and_leave_cleanly() -> None:
    env = {"PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with ActorSystem(run_id="gw") as system:
        inbox = system.inbox("main")
        system.spawn(Coordinator(world_size=2, run_id="gw", num_epochs=3, dataset_size=512, batch_size=32,
                                 sync_every=4, form_group=True, metrics_sink="main", tick_interval=0.2,
                                 eval_every=1), "coordinator")
        inbox.watch("coordinator")
        children = [system.spawn_process({f"worker/{r}": "_actors:LinearWorker"},
                                         config={f"worker/{r}": {"rank": r, "world_size": 2, "run_id": "gw",
                                                                 "batch_size": 32}}, env=env)
                    for r in range(2)]
        seen: list[m.Message] = []
        while (got := inbox.get(timeout=60)) is not None:
            seen.append(got.message)
            if isinstance(got.message, m.Down):
                break
        codes = [c.wait(30) for c in children]
    losses = [x.avg_loss for x in seen if isinstance(x, m.EpochMetrics)]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert any(isinstance(x, m.EvalBroadcast) for x in seen)
    assert seen[-1] == m.Down(name="coordinator", reason=m.DownReason.EXITED)
    assert codes == [0, 0]


def test_one_batch_per_handler_so_control_interleaves() -> None:
    from _actors import LinearWorker

    h = ActorHarness(LinearWorker(rank=0, world_size=1, run_id="r", batch_size=100), name="worker/0",
                     peers=["coordinator"])
    h.actor.make_communicator = lambda: None  # type: ignore[method-assign]
    h.start()
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    out = [s.message for s in h.deliver(m.Throttle(), sender="worker/0")]
    assert [type(x).__name__ for x in out] == ["Batch", "Throttle"]  # one batch, then the next step queued
    assert [type(x).__name__ for x in (s.message for s in h.deliver(m.SyncNow(cycle=1), sender="coordinator"))] \
        == ["SyncAck"]  # served between two batches
    h.deliver(m.Throttle(), sender="worker/0")
    last = [s.message for s in h.deliver(m.Throttle(), sender="worker/0")]
    metrics = [x for x in last if isinstance(x, m.MetricsMsg)]
    assert metrics and metrics[0].samples_processed == 250 and metrics[0].batches_processed == 3
