"""GpuWorker: the worker as an actor, trained under the coordinator across processes (gloo on the CPU)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from conftest import TESTS

from actorwire import messages as m
from actorwire.actors import ActorSystem
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.testing import ActorHarness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
TESTS_DIR = str(TESTS)


def test_two_actor_workers_train_and_leave_cleanly(tmp_path: pathlib.Path) -> None:
    env = {"PYTHONPATH": TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with ActorSystem(run_id="gw", record=str(tmp_path)) as system:
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
    # Both ranks replay exactly with files, shared memory and CUDA sealed off, and without a model:
    # their training steps and all-reduces ran in the adapter, whose replies are in the log.
    sealed = subprocess.run([sys.executable, str(TESTS / "_replay_sealed.py"), str(tmp_path),
                             "worker/0=_actors:LinearWorker", "worker/1=_actors:LinearWorker"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, **env, "PYTHONDONTWRITEBYTECODE": "1"})
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in sealed.stdout.splitlines())
    assert set(lines) == {"coordinator", "worker/0", "worker/1"}, sealed.stdout
    assert all(v.endswith(" 0 divergences") for v in lines.values()), sealed.stdout


def test_one_batch_per_handler_so_control_interleaves() -> None:
    from _actors import LinearWorker

    h = ActorHarness(LinearWorker(rank=0, world_size=1, run_id="r", batch_size=100), name="worker/0",
                     peers=["coordinator"])
    h.actor.make_communicator = lambda: None  # type: ignore[method-assign]
    h.start()
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    assert [type(s.message).__name__ for s in h.deliver(m.Throttle(), sender="worker/0")] == []  # no model yet
    # The run's first sync gives it the model (no group here: nothing to average); then it trains.
    out = [s.message for s in h.deliver(m.SyncNow(cycle=1, source=0), sender="coordinator")]
    assert [type(x).__name__ for x in out] == ["SyncAck", "Throttle"]
    out = [s.message for s in h.deliver(m.Throttle(), sender="worker/0")]
    assert [type(x).__name__ for x in out] == ["Batch", "Throttle"]  # one batch, then the next step queued
    assert [type(x).__name__ for x in (s.message for s in h.deliver(m.SyncNow(cycle=2), sender="coordinator"))] \
        == ["SyncAck"]  # served between two batches
    h.deliver(m.Throttle(), sender="worker/0")
    last = [s.message for s in h.deliver(m.Throttle(), sender="worker/0")]
    metrics = [x for x in last if isinstance(x, m.MetricsMsg)]
    assert metrics and metrics[0].samples_processed == 250 and metrics[0].batches_processed == 3


def test_the_coordinators_throttle_holds_the_actor_worker_until_the_next_sync() -> None:
    """Its own ``Throttle`` is its next step; the coordinator's (it ran ahead of its peers) was taken
    for one more step."""
    from _actors import LinearWorker

    h = ActorHarness(LinearWorker(rank=0, world_size=1, run_id="r", batch_size=10), name="worker/0",
                     peers=["coordinator"])
    h.actor.make_communicator = lambda: None  # type: ignore[method-assign]
    h.start()
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    h.deliver(m.SyncNow(cycle=1, source=0), sender="coordinator")
    assert [type(s.message).__name__ for s in h.deliver(m.Throttle(), sender="worker/0")] == ["Batch", "Throttle"]
    assert h.deliver(m.Throttle(), sender="coordinator") == []  # no step: the protocol holds it
    assert h.deliver(m.Throttle(), sender="worker/0") == []  # the step it had queued trains nothing
    out = [type(s.message).__name__ for s in h.deliver(m.SyncNow(cycle=2), sender="coordinator")]
    assert out == ["SyncAck", "Throttle"]  # freed: the next step is queued
    assert [type(s.message).__name__ for s in h.deliver(m.Throttle(), sender="worker/0")] == ["Batch", "Throttle"]


def test_the_actor_worker_takes_the_coordinators_kinds_only_from_the_coordinator() -> None:
    """Any proven peer could tell it a plan, a sync, a throttle or the run's end, and it was believed."""
    from _actors import LinearWorker

    h = ActorHarness(LinearWorker(rank=0, world_size=1, run_id="r", batch_size=10), name="worker/0",
                     peers=["coordinator", "liar/1"])
    h.actor.make_communicator = lambda: None  # type: ignore[method-assign]
    h.start()
    for forged in (m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), m.SyncNow(cycle=1, source=0),
                   m.Throttle(), m.ShutdownWithSave(reason=m.SaveReason.REDUCE_STALL)):
        assert h.deliver(forged, sender="liar/1") == []
    p = h.actor.protocol
    assert not p.plans and not p.in_sync and not p.throttled and p.ended is None
    assert h.actor.refused == {"liar/1": 4}
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    h.deliver(m.SyncNow(cycle=1, source=0), sender="coordinator")
    assert [type(s.message).__name__ for s in h.deliver(m.Throttle(), sender="worker/0")] == ["Batch", "Throttle"]


def _joined_worker(**kw: object) -> ActorHarness:
    from _actors import LinearWorker

    h = ActorHarness(LinearWorker(rank=0, world_size=1, run_id="r", batch_size=100, **kw), name="worker/0",
                     peers=["coordinator"])
    h.actor.make_communicator = lambda: None  # type: ignore[method-assign]
    h.start()
    h.deliver(m.JoinAccepted(rank=0, world_size=1), sender="coordinator", correlation_id=1, is_reply=True)
    h.deliver(m.SyncNow(cycle=1, source=0), sender="coordinator")  # the run's first sync: it holds the model
    return h


def test_a_coordinator_that_dies_stops_the_actor_worker() -> None:
    """It did not watch the coordinator: it waited for plans that would never come."""
    h = _joined_worker()
    assert "coordinator" in h.ctx.watched
    h.down("coordinator", m.DownReason.DEAD, "status -9")
    assert h.ctx.stopped


def test_an_evicted_actor_worker_stops_as_a_failed_rank_without_saying_exiting() -> None:
    """The coordinator's ``Evicted`` (it counted the rank dead, and the rank spoke again) had no
    handler here: the actor logged "no handler" and waited for plans that would never come."""
    h = _joined_worker()
    h.take()
    out = h.deliver(m.Evicted(detail="rank 0 was counted dead (dead: status -9)"), sender="coordinator")
    assert h.ctx.stopped and not any(isinstance(s.message, m.Exiting) for s in out)
    assert h.actor.protocol.failure is not None and "evicted from the run" in h.actor.protocol.failure
    # Stopped as a failure: its process exits 3 (``_child``), not 0 with a model that is not the run's.
    assert h.ctx.failure.startswith("rank 0: ") and "evicted" in h.ctx.failure


def test_a_silent_coordinator_does_not_stop_the_actor_worker_its_down_does() -> None:
    h = _joined_worker(coordinator_timeout=5.0)
    h.advance(3.0)
    h.deliver(m.CoordHeartbeat(seq=1), sender="coordinator")  # any message from it counts
    h.advance(20.0)  # silent, maybe saturated: warned about, not taken for dead
    assert not h.ctx.stopped
    h.down("coordinator", m.DownReason.UNREACHABLE, "no connection for 15 s")
    assert h.ctx.stopped


def test_a_failed_all_reduce_is_reported_at_once() -> None:
    """It logged and returned: with no death, nobody re-formed the group."""
    from actorwire.transport.comm import CommError

    class Broken:
        def init(self, uid: bytes, rank: int, world_size: int) -> None:
            pass

        def all_reduce_sum(self, tensor: object) -> None:
            raise CommError("all_reduce failed: connection reset by peer")

    h = _joined_worker()
    h.actor.comm = Broken()
    h.deliver(m.NewNcclSession(uid=b"x", new_rank=0, new_world_size=1, attempt=3), sender="coordinator")
    out = [s.message for s in h.deliver(m.SyncNow(cycle=2), sender="coordinator")]
    assert out == [m.SessionFailed(rank=0, attempt=3,
                                   reason="collective failed: all_reduce failed: connection reset by peer")]


def test_training_steps_and_collectives_run_in_the_adapter_and_control_waits_for_the_batch() -> None:
    """The actor's handlers never train: a replay of a rank needs no model, no data, no group."""
    from _actors import LinearWorker

    h = ActorHarness(LinearWorker(rank=0, world_size=1, run_id="r", batch_size=100), name="worker/0",
                     peers=["coordinator"], effects=False)
    h.start()
    assert not hasattr(h.actor, "model")  # setup() is the adapter's
    h.deliver(m.JoinAccepted(rank=0, world_size=1), sender="coordinator", correlation_id=1, is_reply=True)
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    io = "worker/0/io"
    out = [(s.target, s.message) for s in h.deliver(m.SyncNow(cycle=1, source=0), sender="coordinator")]
    assert out == [(io, m.AllReduceParams(cycle=1, steps=0, weight=1))]  # the source of the run's model
    h.deliver(m.ParamsReduced(cycle=1, covered=0), sender=io)
    out = h.deliver(m.Throttle(), sender="worker/0")
    assert [(s.target, s.message) for s in out] == [(io, m.TrainBatch(start=0, stop=100))]
    assert h.deliver(m.SyncNow(cycle=2), sender="coordinator") == []  # waits for the batch
    assert h.deliver(m.BatchTrained(start=0, stop=100, loss=0.5, batch_ms=3.0), sender="coordinator") == []
    out = [(s.target, s.message) for s in h.deliver(m.BatchTrained(start=0, stop=100, loss=0.5, batch_ms=3.0),
                                                     sender=io)]
    assert [type(msg).__name__ for _, msg in out] == ["Batch", "Throttle", "AllReduceParams"]
    assert out[0][1].batch_ms == 3.0 and out[2] == (io, m.AllReduceParams(cycle=2, steps=1, weight=1))
    out = [s.message for s in h.deliver(m.ParamsReduced(cycle=2, covered=1), sender=io)]
    assert out == [m.SyncAck(rank=0, step_count=1, covered=1, cycle=2)]


def test_a_failed_training_step_is_an_error_naming_the_batch() -> None:
    h = _joined_worker()

    def broken(indices: range) -> float:
        raise RuntimeError("CUDA out of memory")

    h.actor.train_batch = broken  # type: ignore[method-assign]
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    import pytest as _pytest

    with _pytest.raises(Exception, match="training batch 0-100 failed: RuntimeError: CUDA out of memory"):
        h.deliver(m.Throttle(), sender="worker/0")


def test_the_optimizer_a_subclass_names_has_its_state_averaged_with_the_parameters() -> None:
    """GpuWorker averaged the parameters only: each rank went on with its own momentum."""
    import torch

    h = _joined_worker()
    w = h.actor
    w.opt = torch.optim.SGD(w.model.parameters(), lr=0.1, momentum=0.9)
    w.train_batch(range(0, 100))  # the momentum buffers exist
    sizes: list[int] = []

    class Recording:
        def init(self, uid: bytes, rank: int, world_size: int) -> None:
            pass

        def all_reduce_sum(self, tensor: torch.Tensor) -> None:
            sizes.append(tensor.numel())

    w.comm = Recording()
    h.deliver(m.NewNcclSession(uid=b"x", new_rank=0, new_world_size=1, attempt=3), sender="coordinator")
    h.deliver(m.SyncNow(cycle=2), sender="coordinator")
    params = sum(p.numel() for p in w.model.parameters())
    assert sizes == [4, params + 2]  # the layout, the parameters (no optimizer named)
    sizes.clear()
    w.optimizer = lambda: w.opt  # type: ignore[method-assign]
    h.deliver(m.SyncNow(cycle=3), sender="coordinator")
    assert sizes == [4, params + params + 2]  # the momentum by the same weights, in the same buffer


def test_an_actor_worker_whose_relay_is_gone_reports_to_the_coordinator_itself() -> None:
    """A tell to the relay that failed was taken for the coordinator's death: the rank stopped."""
    h = _joined_worker(relay="relay/h0")  # not among the harness's peers: telling it fails
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    out = [(s.target, type(s.message).__name__) for s in h.deliver(m.Throttle(), sender="worker/0")]
    assert ("coordinator", "Batch") in out and not h.ctx.stopped
    assert h.actor.protocol.relay == ""


def _training_a_batch(worker: type) -> tuple[ActorHarness, str]:
    """An actor worker of one rank that joined, synced once and has its first batch in its adapter."""
    h = ActorHarness(worker(rank=0, world_size=1, run_id="r", batch_size=100), name="worker/0",
                     peers=["coordinator"], effects=False)
    h.start()
    h.deliver(m.JoinAccepted(rank=0, world_size=1), sender="coordinator", correlation_id=1, is_reply=True)
    h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
    io = "worker/0/io"
    h.deliver(m.SyncNow(cycle=1, source=0), sender="coordinator")
    h.deliver(m.ParamsReduced(cycle=1, covered=0), sender=io)
    assert [s.message for s in h.deliver(m.Throttle(), sender="worker/0")] == [m.TrainBatch(start=0, stop=100)]
    return h, io


def test_a_group_session_held_behind_a_long_batch_is_refused_in_the_adapter_not_joined() -> None:
    """The Worker's rule (``_rank_effects.late_for_group``) for the actor worker: a session that came while
    a batch trained is held, and ``JoinGroup`` carries when it came; the adapter refuses one that
    waited past half the communicator's formation timeout, and forms a fresh one."""
    from _actors import LinearWorker

    from actorwire.actors.control._gpu_worker import GpuWorkerEffects

    h, io = _training_a_batch(LinearWorker)
    session = m.NewNcclSession(uid=b"g2", new_rank=0, new_world_size=1, attempt=2)
    came = h.ctx.clock
    assert h.deliver(session, sender="coordinator") == []  # held: a batch is training
    h.advance(20.0)
    out = h.deliver(m.BatchTrained(start=0, stop=100, loss=0.5, batch_ms=3.0), sender=io)
    assert [s.message for s in out if isinstance(s.message, m.JoinGroup)] == [m.JoinGroup(session=session, asked_at=came)]

    class Comm:
        formation_timeout_s = 8.0
        inits: list[int] = []

        def init(self, uid: bytes, rank: int, world_size: int) -> None:
            self.inits.append(rank)

    worker = LinearWorker(rank=0, world_size=1, run_id="r", batch_size=100)
    worker.make_communicator = Comm  # type: ignore[assignment,method-assign]
    adapter = ActorHarness(GpuWorkerEffects("worker/0", worker), name=io, now=100.0)
    adapter.start()
    out = adapter.deliver(m.JoinGroup(session=session, asked_at=90.0), sender="worker/0")
    assert [type(s.message) for s in out] == [m.GroupJoined] and Comm.inits == []
    assert "waited 10.0 s" in (out[0].message.error or "")  # type: ignore[attr-defined]
    out = adapter.deliver(m.JoinGroup(session=session, asked_at=99.0), sender="worker/0")
    assert [s.message for s in out] == [m.GroupJoined(attempt=2, error=None)] and Comm.inits == [0]


def test_of_the_group_sessions_held_behind_a_batch_only_the_newest_is_joined() -> None:
    """As the Worker does (``_rank_effects.current``): sessions that queued while the rank was busy were formed
    and given up on by the others, one after another; joining each in turn, a rank frozen in a long
    batch never caught up.  A SyncNow before the newest session was for a group that is gone."""
    from _actors import LinearWorker

    h, io = _training_a_batch(LinearWorker)
    sessions = [m.NewNcclSession(uid=f"g{n}".encode(), new_rank=0, new_world_size=1, attempt=n) for n in (2, 3, 4)]
    came = h.ctx.clock
    assert h.deliver(sessions[0], sender="coordinator") == []  # held: a batch is training
    assert h.deliver(m.SyncNow(cycle=2), sender="coordinator") == []
    assert h.deliver(sessions[1], sender="coordinator") == []
    assert h.deliver(sessions[2], sender="coordinator") == []
    out = h.deliver(m.BatchTrained(start=0, stop=100, loss=0.5, batch_ms=3.0), sender=io)
    joins = [s.message for s in out if isinstance(s.message, m.JoinGroup)]
    assert joins == [m.JoinGroup(session=sessions[2], asked_at=came)]
    assert not [s.message for s in out if isinstance(s.message, m.AllReduceParams)]


def test_declare_dead_during_a_collective_aborts_an_nccl_communicator_from_the_actor_itself() -> None:
    """The collective runs in the adapter, whose thread waits in it: the AbortComm it is told comes
    after it, so an NCCL collective on a dead peer ran to its own timeout.  With a communicator whose
    abort is safe from another thread, the actor aborts it itself; gloo's is left to the adapter."""
    from _actors import LinearWorker

    class Comm:
        def __init__(self, any_thread: bool) -> None:
            self.abort_from_any_thread = any_thread
            self.aborts = 0

        def abort(self) -> None:
            self.aborts += 1

    for any_thread in (True, False):
        h = ActorHarness(LinearWorker(rank=0, world_size=1, run_id="r", batch_size=100), name="worker/0",
                         peers=["coordinator"], effects=False)
        h.start()
        comm = Comm(any_thread)
        h.actor.comm = comm
        h.deliver(m.JoinAccepted(rank=0, world_size=1), sender="coordinator", correlation_id=1, is_reply=True)
        h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=250), sender="coordinator")
        io = "worker/0/io"
        assert [s.message for s in h.deliver(m.SyncNow(cycle=1, source=0), sender="coordinator")] == [
            m.AllReduceParams(cycle=1, steps=0, weight=1)]  # the adapter is inside the collective now
        out = [(s.target, s.message) for s in h.deliver(m.DeclareDead(rank=1), sender="coordinator")]
        assert out == [(io, m.AbortComm())]
        assert comm.aborts == (1 if any_thread else 0)
