"""Weight transfer between real processes on the shm plane: trainer ranks, consumers, deaths.

Trainer ranks are launched scripts (tests/_weight_trainer.py) that attach to
the test's system; consumers are ModelConsumer actors in their own processes.
Every process is stopped by the test; the no_leaks fixture checks it.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import msgspec
import pytest
from conftest import TESTS
from test_multiprocess import ENV, no_leaks  # noqa: F401  (the fixture)

from actorwire import messages as m
from actorwire.actors import ActorSystem
from actorwire.transport import RuntimeConfig

TESTS_DIR = str(TESTS)
TRAINER = [sys.executable, os.path.join(TESTS_DIR, "_weight_trainer.py")]
FACTORY = "_weight_trainer:tiny_model"

SYSTEM_CONFIG = RuntimeConfig(heartbeat_interval=0.5, staleness_timeout=30.0)


def _wait_file(path: pathlib.Path, timeout: float, procs: list) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_bytes()
        dead = [p.returncode for p in procs if p.returncode not in (None, 0)]
        assert not dead, f"a trainer exited with {dead} before writing {path.name}"
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout} s")


def _lines(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(system: ActorSystem, tmp_path: pathlib.Path, *, world: int, consumers: int, args: list[str],
        consumer_target: str = "actorwire.actors.weights:ModelConsumer",
        consumer_config: dict | None = None, device: str = "cpu") -> tuple[list, list]:
    trainers = [system.launch(TRAINER + [str(tmp_path), str(r), str(world), "--consumers", str(consumers), *args],
                              rank=r, env=ENV) for r in range(world)]
    children = []
    try:
        plan = msgspec.json.decode(_wait_file(tmp_path / "plan.json", 60, trainers))
        for cid in range(consumers):
            name = f"weights/consumer/{cid}"
            config = {"consumer_id": cid, "plan": plan, "factory": FACTORY, **(consumer_config or {}).get(cid, {})}
            if device != "cpu":
                config["device"] = device
            target = consumer_target if (consumer_config or {}).get(cid) else "actorwire.actors.weights:ModelConsumer"
            children.append(system.spawn_process({name: target}, config={name: config}, env=ENV, timeout=60))
        codes = [t.stop(timeout=90) for t in trainers]
        assert codes == [0] * world, f"trainer exit codes {codes}"
        return [_lines(tmp_path / f"rank{r}.jsonl") for r in range(world)], children
    finally:
        for t in trainers:
            t.kill()
            t.wait(10)
        for ch in children:
            ch.kill()
            ch.wait(10)


@pytest.mark.parametrize("workers_per_replica", [0, 2], ids=["own-rings", "consumers-0-and-2-share-a-ring"])
def test_two_ranks_move_a_model_bit_exact_to_three_consumers(system: ActorSystem, tmp_path: pathlib.Path,
                                                             workers_per_replica: int) -> None:
    reports, _ = run(system, tmp_path, world=2, consumers=3,
                     args=["--syncs", "2", "--workers-per-replica", str(workers_per_replica)])
    rank0, rank1 = reports
    assert [line["sync"] for line in rank0] == [1, 2] and "error" not in rank0[-1] and "error" not in rank1[-1]
    for line in rank0:
        assert line["digests"] == {str(c): line["expected"] for c in range(3)}, "a consumer's copy differs"
        assert line["done"] == [0, 1, 2]
    for line in rank0 + rank1:
        assert 1 <= line["max_resident"] <= 2  # lookahead 1: at most lookahead + 1 groups resident
    assert rank0[0]["groups"] + rank1[0]["groups"] == 6 + 1  # the embedding group is published by both


@pytest.mark.parametrize("plane", ["shm", "frames"])
def test_lookahead_zero_keeps_exactly_one_group_resident(system: ActorSystem, tmp_path: pathlib.Path,
                                                         plane: str) -> None:
    reports, _ = run(system, tmp_path, world=1, consumers=1,
                     args=["--syncs", "1", "--lookahead", "0", "--plane", plane])
    (line,) = reports[0]
    assert line["max_resident"] == 1 and line["groups"] == 6
    assert line["digests"] == {"0": line["expected"]}


def test_a_consumer_killed_mid_sync_fails_the_sync_on_every_rank(system: ActorSystem, tmp_path: pathlib.Path) -> None:
    reports, _ = run(system, tmp_path, world=2, consumers=2, args=["--syncs", "1", "--stall", "20"],
                     consumer_target="_actors:FaultyConsumer", consumer_config={1: {"at_seq": 2, "how": "kill"}})
    for lines in reports:
        assert "consumer 1" in lines[-1]["error"] and "went down" in lines[-1]["error"]


def test_a_consumer_that_dies_after_its_last_free_fails_the_sync_at_once(system: ActorSystem,
                                                                         tmp_path: pathlib.Path) -> None:
    """The producer had every group back and stopped watching; the trainer waited for this consumer's
    EndSync until stall_timeout + 30 s (here 330 s, past the test's 90 s wait for the trainer)."""
    reports, _ = run(system, tmp_path, world=1, consumers=2, args=["--syncs", "1", "--stall", "300"],
                     consumer_target="_actors:FaultyConsumer", consumer_config={1: {"how": "kill_when_synced"}})
    error = reports[0][-1]["error"]
    assert "consumer 1" in error and "went down" in error, error


def test_a_stopped_consumer_trips_the_stall_watchdog(system: ActorSystem, tmp_path: pathlib.Path) -> None:
    reports, _ = run(system, tmp_path, world=1, consumers=2, args=["--syncs", "1", "--stall", "2"],
                            consumer_target="_actors:FaultyConsumer", consumer_config={1: {"at_seq": 2, "how": "stop"}})
    error = reports[0][-1]["error"]
    assert "stalled" in error and "limit 2 s" in error and "1: [" in error  # names the consumer owing frees


@pytest.mark.gpu
def test_a_gpu_model_moves_bit_exact_over_cuda_ipc(system: ActorSystem, tmp_path: pathlib.Path) -> None:
    reports, _ = run(system, tmp_path, world=1, consumers=2, device="cuda",
                     args=["--syncs", "2", "--device", "cuda", "--plane", "cuda_ipc"])
    for line in reports[0]:
        assert "error" not in line, line.get("error")
        assert line["digests"] == {"0": line["expected"], "1": line["expected"]}


def test_one_sync_serves_a_consumer_here_on_shm_and_one_elsewhere_on_frames(system: ActorSystem,
                                                                           tmp_path: pathlib.Path) -> None:
    """A producer picks the plane per consumer from the host its reservation names: consumer 1 says it
    runs elsewhere (its host apart, reached on loopback), so it is served frames over tcp while
    consumer 0 reads shared memory, in the same sync, both bit-exact."""
    env = {**ENV, "ACTORWIRE_INSECURE_TCP": "1"}  # the other "host" is loopback: plain tcp is allowed there
    trainer = system.launch(TRAINER + [str(tmp_path), "0", "1", "--consumers", "2", "--syncs", "1"], rank=0, env=env)
    children = []
    try:
        plan = msgspec.json.decode(_wait_file(tmp_path / "plan.json", 60, [trainer]))
        for cid, where in ((0, {}), (1, {"host": "another-host", "address": "127.0.0.1"})):
            name = f"weights/consumer/{cid}"
            children.append(system.spawn_process({name: "actorwire.actors.weights:ModelConsumer"}, env=env,
                                                 config={name: {"consumer_id": cid, "plan": plan,
                                                                "factory": FACTORY, **where}}, timeout=60))
        assert trainer.stop(timeout=90) == 0
        (line,) = _lines(tmp_path / "rank0.jsonl")
        assert "error" not in line, line["error"]
        assert line["digests"] == {"0": line["expected"], "1": line["expected"]}  # both bit-exact
        planes = {}
        for name in (n for n in system._node.names(runtime=True) if n.startswith(".introspect/")):
            status = system.ask(name, m.StatusRequest(), timeout=10, expect=m.NodeStatus)
            for actor in status.actors:
                if actor.name.startswith("weights/consumer/") and actor.detail is not None:
                    planes[actor.name] = actor.detail.notes["plane from rank 0"]
        assert planes == {"weights/consumer/0": "shm", "weights/consumer/1": "frames"}
    finally:
        trainer.kill()
        trainer.wait(10)
        for child in children:
            child.kill()
            child.wait(10)
