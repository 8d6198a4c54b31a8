"""The embedded Worker's final snapshot and NCCL abort, in one process with a real coordinator."""

from __future__ import annotations

import pytest
import torch

from actorwire.actors import ActorSystem
from actorwire.actors.control import Coordinator, Worker, WorkerError
from actorwire.actors.weights._consumer import WeightConsumer
from actorwire.actors.weights._plan import single_rank_plan, state_digest
from actorwire.transport.comm import CommError


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))


def train(worker: Worker, net: torch.nn.Module) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    while (plan := worker.next_plan(timeout=30)) is not None:
        for _ in worker.batches(plan, 16):
            loss = net(torch.randn(16, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            worker.report_timing(batch_ms=1.0, batch_loss=loss.item())
        worker.report_epoch(plan)


@pytest.mark.timeout(60)
def test_the_final_snapshot_reaches_its_consumer_bit_exact() -> None:
    net, replica = model(), model()
    with ActorSystem() as system:
        system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=1, dataset_size=64, batch_size=16),
                     "coordinator")
        system.spawn(WeightConsumer(0, single_rank_plan(net, "snapshot/r0"), tensors=dict(replica.state_dict())),
                     "snapshot/r0/consumer/0")
        worker = Worker(system=system, rank=0, world_size=1, model=net)
        train(worker, net)
        assert state_digest(replica.state_dict()) != state_digest(net.state_dict())
        report = worker.send_final_snapshot()
        assert state_digest(replica.state_dict()) == state_digest(net.state_dict())
        assert report.consumers_done == [0]
        with pytest.raises(WorkerError, match="no snapshot consumer named 'elsewhere/r0/consumer/0'"):
            worker.send_final_snapshot(prefix="elsewhere", timeout=0.2)
        worker.abort_nccl()  # no communicator here: a no-op, never an error
        worker.finish()


class FlakyComm:
    """A one-rank communicator whose first all-reduce fails (a collective error with no dead peer)."""

    def __init__(self) -> None:
        self.inits: list[tuple[bytes, int, int]] = []
        self.failures = 1
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def world_size(self) -> int:
        return 1

    def new_unique_id(self) -> bytes:
        return f"uid-{len(self.inits)}".encode()

    def init(self, uid: bytes, rank: int, world_size: int) -> None:
        self.inits.append((uid, rank, world_size))
        self._ready = True

    def all_reduce_sum(self, tensor: object) -> None:
        if self.failures:
            self.failures -= 1
            self._ready = False
            raise CommError("all_reduce: async error (injected)")

    def abort(self) -> None:
        self._ready = False


@pytest.mark.timeout(60)
def test_a_failed_collective_nobody_re_forms_is_reported_and_the_group_is_re_formed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from actorwire.actors.control import _worker

    monkeypatch.setattr(_worker, "_SESSION_WAIT_S", 0.5)
    net, comm = model(), FlakyComm()
    with ActorSystem() as system:
        system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=2, dataset_size=64, batch_size=16,
                                 sync_every=2, form_group=True), "coordinator")
        worker = Worker(system=system, rank=0, world_size=1, model=net, communicator=comm)
        train(worker, net)
        worker.finish()
    assert comm.failures == 0 and len(comm.inits) >= 2  # formed, failed, reported, formed again
