"""The Worker API against a real coordinator in the same process."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from conftest import wait_until

from actorwire import messages as m
from actorwire.actors import ActorSystem
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.control._worker import Worker, WorkerError
from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.transport.comm import CommError
from actorwire.transport.internal import InvalidArgument

pytestmark = pytest.mark.timeout(60)


def _worker(system: ActorSystem, **settings: Any) -> Worker:
    system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=2, dataset_size=8,
                             eval_every=0, final_eval=False, **settings), "coordinator")
    return Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10)


def test_a_coordinator_that_goes_away_ends_the_users_loop_with_an_error(system: ActorSystem) -> None:
    """``report_timing`` used to raise ActorDead into the user's training loop; and the rank ended as one
    that finished (``next_plan()`` None, exit 0) with a model that is not the run's."""
    worker = _worker(system)
    plan = worker.next_plan(timeout=10)
    assert plan is not None and plan.epoch == 0
    system.stop("coordinator")
    worker.report_timing(batch_ms=1.0, batch_loss=0.5)  # no traceback in the user's loop
    assert worker.shutting_down
    worker.report_epoch(plan)  # nor here
    with pytest.raises(WorkerError, match="^rank 0: coordinator is gone .*its model is not the run's result$"):
        worker.next_plan(timeout=1)
    with pytest.raises(WorkerError, match="coordinator is gone"):
        worker.finish()


def test_an_evicted_rank_never_ends_like_a_finished_one(system: ActorSystem) -> None:
    """A rank stopped past the runtime's timeout and continued is told it is out (``Evicted``): its
    ``next_plan()`` returned None and ``drain_pending_shutdown()`` None, as at a normal end, and it
    exited 0 with its stale model."""
    from actorwire import messages as m

    # The coordinator waits for a restart once every rank is lost (restart_wait), so it is still there
    # to tell the rank it counted dead, when that rank speaks again, that it is out (``Evicted``).
    worker = _worker(system, restart_wait=30.0, launcher_node=system.node_id)
    assert worker.next_plan(timeout=10) is not None
    system.tell("coordinator", m.RankExited(rank=0, returncode=-9, detail="killed by signal 9"))  # as its launcher
    wait_until(lambda: (worker.report_timing(batch_ms=1.0, batch_loss=0.5), worker.shutting_down)[1], timeout=10)
    assert worker.failure is not None
    with pytest.raises(WorkerError, match="^rank 0: evicted from the run: rank 0 was counted dead"):
        worker.next_plan(timeout=1)
    assert worker.drain_pending_shutdown() is None
    with pytest.raises(WorkerError, match="evicted"):
        worker.finish()  # a loop that left on shutting_down learns it here


def test_only_the_coordinator_tells_a_rank_it_is_out_or_the_run_ended(system: ActorSystem,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Any proven peer (here a thread of this process, ``~<node>/<thread>``) could tell a rank
    ``Evicted``, ``Shutdown`` or ``DeclareDead``, and it was believed: the rank stopped training and
    left.  A rank takes the coordinator's kinds only from the coordinator or its relay."""
    worker = _worker(system)
    plan = worker.next_plan(timeout=10)
    assert plan is not None
    for forged in (m.Evicted(detail="forged"), m.Shutdown(), m.ShutdownWithSave(reason=m.SaveReason.REDUCE_STALL),
                   m.DeclareDead(rank=0), m.StartEpoch(epoch=7, partition_offset=0, partition_size=8)):
        system.tell("worker/0", forged)
    system.inbox("relay/elsewhere").tell("worker/0", m.Shutdown())
    worker.poll_metrics()  # serves what came (a tell within a process is in the inbox when it returns)
    assert not worker.shutting_down and worker.failure is None and worker.drain_pending_shutdown() is None
    assert sorted(worker.refused.values()) == [1, 5]
    warned = [r.getMessage() for r in caplog.records if "only the coordinator may send" in r.getMessage()]
    assert len(warned) == 2  # the first from each sender
    epochs = []
    while plan is not None:  # the run goes on as the coordinator says
        epochs.append(plan.epoch)
        for _ in worker.batches(plan, 4):
            worker.report_timing(batch_ms=1.0, batch_loss=0.5)
        worker.report_epoch(plan)
        plan = worker.next_plan(timeout=10)
    worker.finish()
    assert epochs == [0, 1]


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


def test_the_models_parameters_are_listed_once_for_every_sync(system: ActorSystem) -> None:
    """Listed at the first sync, as DDP lists them when it wraps a model: listing them at every sync
    cost the training thread 23-27 us a sync in ``bench train`` (5% of its time in actorwire calls)."""
    import torch

    system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=3, dataset_size=8, eval_every=0,
                             final_eval=False), "coordinator")
    model = torch.nn.Linear(2, 1)
    listed = []
    parameters = model.parameters
    model.parameters = lambda recurse=True: listed.append(1) or parameters(recurse)  # type: ignore[method-assign]
    worker = Worker(system=system, rank=0, world_size=1, model=model, join_timeout=10)
    syncs = 0
    reduce = worker._run

    def counted(effects: list[Any], received_at: float | None = None) -> None:
        nonlocal syncs
        syncs += sum(type(e).__name__ == "AllReduce" for e in effects)
        reduce(effects, received_at)

    worker._run = counted  # type: ignore[method-assign]
    while (plan := worker.next_plan(timeout=10)) is not None:
        for _ in worker.batches(plan, 4):
            worker.report_timing(batch_ms=1.0, batch_loss=0.5)
        worker.report_epoch(plan)
    worker.finish()
    assert syncs >= 3 and len(listed) == 1
    assert worker._parameters() == list(parameters())


def test_an_epochs_order_is_one_permutation_per_seed_and_epoch_whichever_generator_made_it() -> None:
    """A Worker seeds one generator of its own each epoch (a new one cost 17 us an epoch): the order
    is the same as a fresh generator's, in any sequence of epochs, and a new permutation each epoch."""
    import torch

    from actorwire.actors.control._worker import epoch_order

    fresh = [epoch_order(100, 7, epoch, True) for epoch in range(4)]
    assert all(sorted(order) == list(range(100)) for order in fresh)
    assert len({tuple(order) for order in fresh}) == 4
    kept = torch.Generator()
    assert [epoch_order(100, 7, epoch, True, generator=kept) for epoch in (3, 0, 1, 2)] == [fresh[i] for i in (3, 0, 1, 2)]
    assert epoch_order(100, 8, 0, True, generator=kept) != fresh[0]  # the seed is part of the key


def test_a_held_batch_report_reaches_the_coordinator_before_the_worker_waits(system: ActorSystem) -> None:
    coordinator = Coordinator(world_size=1, run_id=system.run_id, num_epochs=1, dataset_size=8, eval_every=0,
                              final_eval=False)
    system.spawn(coordinator, "coordinator")
    worker = Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10, report_every=60.0)
    plan = worker.next_plan(timeout=10)
    assert plan is not None
    worker.report_timing(batch_ms=1.0, batch_loss=0.5)  # reported
    worker.report_timing(batch_ms=1.0, batch_loss=0.5)  # held for a minute
    assert worker.next_plan(timeout=0.3) is None  # mid-epoch: waits for a plan, and reports first
    wait_until(lambda: coordinator.ranks[0].total_steps == 2, timeout=10)


@pytest.mark.parametrize("bad", [-0.001, float("nan"), "5ms", None])
def test_a_report_interval_that_is_not_seconds_is_one_error_before_anything_starts(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="^report_every must be a number of seconds >= 0, got "):
        Worker(rank=0, world_size=1, report_every=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("loss", [float("nan"), float("inf")])
def test_a_loss_that_is_not_finite_is_an_error_naming_rank_epoch_and_batch(system: ActorSystem, loss: float) -> None:
    """A worker training an empty or broken slice used to report `loss nan` as an epoch row."""
    worker = _worker(system)
    plan = worker.next_plan(timeout=10)
    assert plan is not None
    worker.report_timing(batch_ms=1.0, batch_loss=0.5)
    with pytest.raises(WorkerError, match=f"^rank 0: the loss of batch 2 of epoch 0 is {loss}$"):
        worker.report_timing(batch_ms=1.0, batch_loss=loss)


def test_data_shorter_than_the_runs_dataset_is_refused_at_the_join(system: ActorSystem) -> None:
    system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=1, dataset_size=65536), "coordinator")
    with pytest.raises(WorkerError, match="rank 0 has 2048 samples, fewer than the run's dataset_size 65536"):
        Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10, dataset_size=2048)


def test_a_worker_started_before_its_root_joins_once_the_root_is_up(
        setenv: Callable[[str, str | None], None]) -> None:
    """attach() used to give up after a fixed 10 s (here scaled to 1 s): a worker launched before
    its coordinator failed. It now waits ACTORWIRE_JOIN_TIMEOUT (120 s, scaled to 12 s here)."""
    import socket
    import threading
    import time

    from actorwire.actors.runtime._launch import attach
    from actorwire.transport import RuntimeConfig

    setenv("ACTORWIRE_INSECURE_TCP", "1")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    roots: list[ActorSystem] = []

    def late_root() -> None:
        # Not a wait for something: the fault itself, a root that comes up 1.5 s late (past the old
        # fixed bound, scaled to 1 s here).  Nothing the member does can be waited on instead: any
        # listener on the port before the root's would answer its connection and end the join.
        time.sleep(1.5)
        roots.append(ActorSystem(run_id="late", bind=endpoint))

    starter = threading.Thread(target=late_root)
    starter.start()
    try:
        member = attach(join=endpoint, run_id="late", config=RuntimeConfig(timeout_scale=0.1))
        member.shutdown()
    finally:
        starter.join(10)
        for root in roots:
            root.shutdown()


def test_torchrun_s_default_run_id_is_refused_with_what_to_pass(setenv: Callable[[str, str | None], None]) -> None:
    """A plain ``torchrun train.py`` against ``actorwire coordinator`` was refused with "wrong run id"
    (torchrun's TORCHELASTIC_RUN_ID is 'none' without --rdzv-id), naming neither id."""
    import socket

    from actorwire.actors.runtime._launch import attach
    from actorwire.transport import JoinRefused

    setenv("ACTORWIRE_INSECURE_TCP", "1")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                        ("TORCHELASTIC_RUN_ID", "none"), ("ACTORWIRE_PORT", str(port))):
        setenv(name, value)
    with ActorSystem(run_id="the-coordinators-id", bind=f"tcp://127.0.0.1:{port}"):
        with pytest.raises(JoinRefused) as refused:
            attach(join_timeout=10)
    text = str(refused.value)
    assert "wrong run id: this process used run id 'none' (from TORCHELASTIC_RUN_ID, torchrun's default without " \
           "--rdzv-id)" in text and "--rdzv-id ID" in text and "ACTORWIRE_RUN_ID=ID" in text
    assert "the-coordinators-id" not in text  # the root's id is never handed out


class Resuming(Actor):
    """A coordinator whose run lost every rank: each join is told to resume from a checkpoint."""

    @handler
    def on_join(self, msg: m.JoinRequest, ctx: Context) -> None:
        ctx.reply(m.JoinAccepted(rank=msg.rank, world_size=msg.world_size, resume_from="/ck/epoch-3.pt",
                                 resume_epoch=3))

    @handler
    def on_other(self, msg: m.Message, ctx: Context) -> None:
        pass


def test_a_worker_told_to_resume_loads_the_checkpoint_before_its_first_plan(system: ActorSystem) -> None:
    system.spawn(Resuming(), "coordinator")
    loaded: list[tuple[str, int]] = []
    worker = Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10,
                    restore_fn=lambda path, epoch: loaded.append((path, epoch)))
    assert loaded == [("/ck/epoch-3.pt", 3)] and worker.resumed_from == ("/ck/epoch-3.pt", 3)


def test_a_worker_told_to_resume_without_a_restore_fn_refuses_to_train(system: ActorSystem) -> None:
    """It would train from its fresh initialisation, and the first sync would spread it to every rank."""
    system.spawn(Resuming(), "coordinator")
    with pytest.raises(WorkerError, match=r"^rank 0: every rank was lost and the run resumes at epoch 3 from "
                                          r"checkpoint /ck/epoch-3.pt; this Worker has no restore_fn"):
        Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10)


def test_the_worker_waits_for_its_coordinator_as_long_as_actorwire_join_timeout_says(
        system: ActorSystem, setenv: Callable[[str, str | None], None]) -> None:
    """`Worker(join_timeout=60)` and `ACTORWIRE_JOIN_TIMEOUT` (120) disagreed: one default now."""
    setenv("ACTORWIRE_JOIN_TIMEOUT", "0.3")
    with pytest.raises(Exception, match=r"0\.3 s"):  # no coordinator: the wait ends at the variable's bound
        Worker(system=system, rank=0, world_size=1, model_signature="s")


class _CollectiveOnADeadPeer:
    """A communicator whose first collective waits as NCCL's does on a dead peer: until ``abort()``
    (from any thread, as NCCL's) or its own timeout.  Later ones return at once (one rank: the sum
    is its own)."""

    abort_from_any_thread = True
    formation_timeout_s = 10.0

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.waiting = threading.Event()
        self.aborted = threading.Event()
        self.freed_by = ""
        self.abort_threads: list[str] = []

    @property
    def ready(self) -> bool:
        return True

    @property
    def world_size(self) -> int:
        return 1

    def new_unique_id(self) -> bytes:
        return b"a group"

    def init(self, uid: bytes, rank: int, world_size: int) -> None:
        pass

    def all_reduce_sum(self, tensor: Any) -> None:
        if self.freed_by:
            return
        self.waiting.set()
        self.freed_by = "abort" if self.aborted.wait(self.timeout) else "timeout"
        raise CommError(f"the collective ended by {self.freed_by}")

    def abort(self) -> None:
        if self.waiting.is_set():
            self.abort_threads.append(threading.current_thread().name)
            self.aborted.set()


def test_declare_dead_frees_a_collective_the_training_thread_waits_in(system: ActorSystem) -> None:
    """NCCL's collective on a dead peer waits until it is aborted or times out, and the training
    thread, inside it, cannot serve the coordinator's DeclareDead: before, it sat out the collective's
    timeout.  The I/O thread that receives DeclareDead aborts it now (a communicator whose abort is
    safe from another thread)."""
    import torch

    comm = _CollectiveOnADeadPeer()
    system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=1, dataset_size=8, eval_every=0,
                             final_eval=False), "coordinator")
    worker = Worker(system=system, rank=0, world_size=1, model=torch.nn.Linear(2, 1), communicator=comm,
                    join_timeout=10)

    # What the coordinator says of a dead peer while this rank is inside, said by a stand-in this rank
    # takes the coordinator's word from (a relay's place): one rank has no peer to lose.
    worker.protocol.told_by.add("relay/stand-in")
    stand_in = system.inbox("relay/stand-in")

    def declare() -> None:
        if comm.waiting.wait(20):
            stand_in.tell("worker/0", m.DeclareDead(rank=1))

    teller = threading.Thread(target=declare, daemon=True)
    teller.start()
    worker.next_plan(timeout=15)  # the first sync's collective runs in here, on this thread
    teller.join(5)
    assert comm.freed_by == "abort"
    assert comm.abort_threads and comm.abort_threads[0] != threading.current_thread().name
