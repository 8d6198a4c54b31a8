"""The fault matrix on real processes: a SIGKILL or SIGSTOP of real workers at each phase of a run.

Three demo workers (gloo, a 16-parameter model, 10 ms batches) train under a coordinator in this
process. One case = one fault at one named point (``_faulty_rank.POINTS``), struck by the worker
itself so that it lands in the phase it names. Each case asserts the outcome (every epoch trained by
the survivors, no save, the right exit codes), the detection time (from the signal to the
coordinator counting the rank lost) and that nothing is left behind (processes, /dev/shm).

The quick subset runs in ``make test``; the whole matrix with ``make test-faults`` (marker
``faults``). With ``FAULT_REPORT=<file>`` each case appends its figures there as a JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import TESTS, pythonpath

from actorwire import messages as m
from actorwire.actors import ActorSystem
from actorwire.actors.cli._demo import _spawn_consumers
from actorwire.actors.control._coordinator import Coordinator
from actorwire.transport._process import process_alive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

WORKERS = 3
EPOCHS = 4
STALENESS = 3.0
TICK = 0.5
#: The launcher sees an exit at once; the margin is for a loaded machine, not for the mechanism.
EXIT_DETECTED_WITHIN = 2.0
SCRIPT = str(TESTS / "faults" / "_faulty_rank.py")


@dataclasses.dataclass
class Case:
    point: str
    ranks: str = "1"
    signal: str = "KILL"
    stop_s: float = 0.0  # for STOP: how long until SIGCONT
    slow_rank: int | None = None
    restart: bool = False  # start the killed rank again, as torchrun or SLURM would
    epochs: int = EPOCHS

    @property
    def lost(self) -> int:
        if self.signal == "STOP" and self.stop_s < STALENESS:
            return 0
        # No fault; one after the end; a training thread frozen, not dead.
        if self.point in ("none", "shutdown", "hang_in_sync") or self.signal == "HANG":
            return 0
        return 1 if self.ranks in ("any",) else len(self.ranks.split(","))


@dataclasses.dataclass
class Result:
    ended: m.ShutdownWithSave | None
    epochs: set[int]
    codes: dict[int, int]
    failures: int
    detected_s: dict[int, float]
    reformed_s: float | None
    wall_s: float
    struck: dict[int, float]
    leftovers: list[str]
    #: Seconds from the kill to the first aggregated epoch the restarted rank trained a share of.
    rejoined_s: float | None = None


def _run(case: Case, tmp: pathlib.Path) -> Result:
    started = time.time()
    flag = tmp / "fault"
    with ActorSystem() as system:
        inbox = system.inbox("main")
        coordinator = Coordinator(world_size=WORKERS, run_id=system.run_id, num_epochs=case.epochs, dataset_size=3072,
                                  batch_size=32, sync_every=8, eval_every=2, checkpoint_every=2, form_group=True,
                                  metrics_sink="main", save_stem=str(tmp / "run"), tick_interval=TICK,
                                  staleness_timeout=STALENESS, join_timeout=45.0, final_eval=True,
                                  launcher_node=system.node_id)
        system.spawn(coordinator, "coordinator")
        inbox.watch("coordinator")
        _spawn_consumers(system, WORKERS)
        children = {}

        def start(rank: int, fault: bool = True) -> None:
            env = {"DEMO_DATASET": "3072", "DEMO_SAVE_STEM": str(tmp / "run"), "ACTORWIRE_WORLD_SIZE": str(WORKERS),
                   "FAULT": case.point if fault else "", "FAULT_RANKS": case.ranks, "FAULT_SIGNAL": case.signal,
                   "FAULT_FILE": str(flag), "DEMO_STEP_MS": "50" if rank == case.slow_rank else "10",
                   "PYTHONPATH": pythonpath(str(TESTS))}
            children[rank] = system.launch([sys.executable, SCRIPT], rank=rank, env=env, watcher="coordinator")
            pids[rank] = children[rank].pid

        pids: dict[int, int] = {}
        all_pids: list[int] = []
        for rank in range(WORKERS):
            start(rank)
        restarted: dict[int, float] = {}
        rejoined: float | None = None
        struck: dict[int, float] = {}
        detected: dict[int, float] = {}
        continued: set[int] = set()
        attempt_at_fault: int | None = None
        reformed: float | None = None
        ended: m.ShutdownWithSave | None = None
        epochs: set[int] = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = inbox.get(timeout=0.02)
            now = time.time()
            for rank in range(WORKERS):
                if rank not in struck and (flag.parent / f"{flag.name}.{rank}").exists():
                    struck[rank] = float((flag.parent / f"{flag.name}.{rank}").read_text())
                    attempt_at_fault = coordinator.groups.attempt if attempt_at_fault is None else attempt_at_fault
                if rank in struck and rank not in detected:
                    state = coordinator.ranks.get(rank)
                    if rank in coordinator.losses.at_start or (state is not None and not state.alive):
                        detected[rank] = now - struck[rank]
                        if case.restart:
                            (flag.parent / f"{flag.name}.hold").touch()  # until it trains a share
                            all_pids.append(pids[rank])
                            start(rank, fault=False)
                            restarted[rank] = now
                if (case.signal == "STOP" and rank in struck and rank not in continued
                        and now - struck[rank] >= case.stop_s):
                    os.kill(pids[rank], signal.SIGCONT)
                    continued.add(rank)
            if (reformed is None and attempt_at_fault is not None and coordinator.groups.attempt > attempt_at_fault
                    and struck):
                reformed = now - min(struck.values())
            if got is None:
                continue
            msg = got.message
            if isinstance(msg, m.EpochMetrics):
                epochs.add(msg.epoch)
                if rejoined is None and any(msg.per_rank_samples[r] > 0 for r in restarted
                                            if r < len(msg.per_rank_samples)):
                    rejoined = now - min(struck.values())
                    (flag.parent / f"{flag.name}.hold").unlink(missing_ok=True)
            elif isinstance(msg, m.ShutdownWithSave):
                ended = msg
            elif isinstance(msg, m.Down) and msg.name == "coordinator":
                break
        else:
            pytest.fail(f"the run did not end within 120 s (epochs {sorted(epochs)}, struck {sorted(struck)})")
        for rank in struck:  # a stopped worker must be let go whatever happened
            if rank not in continued and case.signal == "STOP":
                os.kill(pids[rank], signal.SIGCONT)
        codes = {rank: child.wait(30) for rank, child in children.items()}
        failures = coordinator.failures
    all_pids += pids.values()
    leftovers = [name for name in os.listdir("/dev/shm")
                 if any(name.startswith((f"aw{pid}_", f"aws{pid}_")) for pid in all_pids)]
    return Result(ended, epochs, codes, failures, detected, reformed, time.time() - started, struck, leftovers,
                  rejoined)


def _report(case: Case, result: Result) -> None:
    path = os.environ.get("FAULT_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"case": dataclasses.asdict(case), "detected_s": result.detected_s,
                                "reformed_s": result.reformed_s, "wall_s": round(result.wall_s, 1),
                                "rejoined_s": result.rejoined_s,
                                "failures": result.failures, "codes": result.codes}) + "\n")


QUICK = [Case("sync"), Case("formation"), Case("training", signal="STOP", stop_s=6.0)]
FULL = [Case("startup"), Case("join"), Case("training"), Case("eval", ranks="any"),
        Case("checkpoint", ranks="any"), Case("weights"), Case("shutdown"), Case("training", ranks="1,2"),
        Case("training", signal="STOP", stop_s=1.0), Case("none", slow_rank=2), Case("hang_in_sync", signal="HANG"),
        # Frozen for 15 s right after its join: it joined one stale group after another and never
        # caught up; the run hung in 2 of 7 runs of an outside fault matrix. With _rank_effects.current and
        # the coordinator re-forming only once every member gave up, it finished, in 25 to 69 s.
        # The rest: a failed gloo formation left torch's group count one higher on the ranks that
        # tried it, so they met at other store keys than a rank that skipped it (test_gloo.py), and
        # a session joined as its peers gave up cost a formation more (_rank_effects.late_for_group).
        # Since both fixes: 5 of 5 runs in 24-25 s, the group formed 15.0 s in.
        Case("join", signal="HANG")]


def _id(case: Case) -> str:
    how = f"stop{case.stop_s:g}s" if case.signal == "STOP" else case.signal.lower()
    return f"{case.point}-{how}-r{case.ranks.replace(',', '+')}" + (f"-slow{case.slow_rank}" if case.slow_rank else "")


@pytest.mark.parametrize("case", [*QUICK, *(pytest.param(c, marks=pytest.mark.faults) for c in FULL)], ids=_id)
def test_a_fault_at_each_phase_is_detected_and_the_run_finishes_with_the_survivors(case: Case,
                                                                                   tmp_path: pathlib.Path) -> None:
    result = _run(case, tmp_path)
    _report(case, result)
    assert result.ended is None, f"the run ended early: {result.ended.reason.value}: {result.ended.detail}"
    assert result.epochs == set(range(case.epochs))
    assert result.failures == case.lost
    if case.point != "none":
        assert result.struck, "the fault never struck: the case does not test what it names"
    killed = set(result.struck) if case.signal == "KILL" else set()
    if case.point == "hang_in_sync":
        # Nobody died: its peers' collective timed out (gloo, 8 s), each said so at once, and the
        # group was formed again, where it used to stall for 60 s + 300 s.
        assert result.reformed_s is not None and result.reformed_s < 30, result
    if case.point != "shutdown":  # killed after the run ended: seen, but no loss
        for rank in killed:
            assert result.detected_s[rank] < EXIT_DETECTED_WITHIN, result.detected_s
    if case.signal == "STOP" and case.lost:
        (rank,) = result.struck
        # Declared dead by silence: the coordinator's staleness timeout, its tick, and the runtime's.
        assert STALENESS - 0.5 < result.detected_s[rank] < STALENESS + TICK + 2.5, result.detected_s
    for rank, code in result.codes.items():
        if rank in killed:
            assert code == -signal.SIGKILL
        elif case.signal == "STOP" and rank in result.struck and case.lost:
            # Evicted after it was counted lost (or it saw its node expelled first): never an exit
            # like a rank that finished; it used to exit 0 and write its stale model.
            assert code == 1, result.codes
        else:
            assert code == 0, result.codes
    assert result.leftovers == []


@pytest.mark.timeout(150)
def test_a_rank_killed_and_started_again_rejoins_and_trains_a_share(tmp_path: pathlib.Path) -> None:
    """As torchrun or SLURM restart it: same rank, a new process. It was refused ("already taken").

    The survivors are held back (100 ms more a batch) from the restart until the new process trains
    a share: with two test suites on two cores, its start-up outlasted all 16 epochs once.
    """
    case = Case("training", restart=True, epochs=16)
    result = _run(case, tmp_path)
    _report(case, result)
    assert result.ended is None and result.epochs == set(range(case.epochs)) and result.failures == 1
    assert result.rejoined_s is not None, "the restarted rank never trained a share"
    assert result.codes == {0: 0, 1: 0, 2: 0}  # the new incarnation of rank 1 finished cleanly
    assert result.leftovers == []


def test_when_the_coordinators_process_is_killed_the_workers_leave_and_nothing_is_left() -> None:
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="awf", dir="/tmp"))  # short: ipc paths have a limit
    try:
        _coordinator_killed(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _coordinator_killed(tmp_path: pathlib.Path) -> None:
    # The installed package, never the checkout's parent folder: in a clone named actorwire that
    # folder made the checkout itself importable as actorwire, shadowing the package (no demo started).
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": pythonpath(), "DEMO_STEP_MS": "20"}
    demo = subprocess.Popen([sys.executable, "-m", "actorwire", "demo", "--workers", "2", "--epochs", "40"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    pids: list[int] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            if found := re.search(r"\(pids ([\d, ]+)\)", line):
                pids = [int(p) for p in found.group(1).split(", ")]
            if re.match(r"\s+0\s+\d", line):  # the first epoch's row: the workers are training
                break
        assert len(pids) == 2
        demo.kill()
        killed = time.monotonic()
        demo.wait(10)
        alive = set(pids)
        while alive and time.monotonic() - killed < 30:
            for pid in list(alive):
                if not process_alive(pid):
                    alive.discard(pid)
            time.sleep(0.05)
        left_s = time.monotonic() - killed
        assert not alive, f"workers {sorted(alive)} still running 30 s after the coordinator's process died"
    finally:
        if demo.poll() is None:
            demo.kill()
        demo.wait(10)
        if demo.stdout is not None:
            demo.stdout.close()
        for pid in pids:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
    path = os.environ.get("FAULT_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"case": "coordinator process killed", "workers_left_s": round(left_s, 2)}) + "\n")
    shm = [n for n in os.listdir("/dev/shm") if any(n.startswith((f"aw{p}_", f"aws{p}_")) for p in pids)]
    assert shm == []
    # Nothing under TMPDIR is a worker's (its sockets and files are named by pid). What stays is the
    # killed process's own: its sockets, the demo's save directory, torch's cache, and the workers'
    # death records (they left without finishing: their coordinator was gone).
    theirs = [str(p) for p in tmp_path.rglob("*") if any(re.search(rf"\b{pid}\b", p.name) for pid in pids)]
    assert theirs == []
