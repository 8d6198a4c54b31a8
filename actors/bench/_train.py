"""``actorwire bench train``: what the control plane costs a trainer, against torch's DDP.

One workload (examples/digits.py: an MLP 64-128-10 on scikit-learn's digits, 1,400 training
samples, batches of 32, SGD with momentum), three ways, in one run:

* ``train.single``: one process, no actorwire (the accuracy the others are held to);
* ``train.ddp``: torch's DistributedDataParallel over gloo, ``ranks`` processes, each training its
  share of one permutation per epoch (what a user would pick instead of actorwire);
* ``train.actorwire``: a coordinator in this process and ``ranks`` Worker processes, on the
  coordinator's sync cadence, shuffled the same way.

It prints samples/s per variant and the ratio to DDP's (target: at least DDP's), the final test
accuracy of each (target: within 1 point of DDP's), and the share of a Worker rank's wall time
spent inside actorwire calls (``next_plan``, the batch iterator, ``report_timing``,
``report_epoch``, ``finish``; the all-reduces and the waits for slower ranks and for the next
epoch's plan run inside them), of ``report_timing`` alone, of the averaging (flatten, collectives, copy back), and
the CPU the trainer's thread spent in actorwire calls outside it (``train.actorwire.own``:
what the control plane itself costs a step; target: at most 2%).  What is left of ``inside``
after the averaging and ``own`` is waiting: for slower ranks and for the coordinator's answers.
It needs a checkout (examples/digits.py) and scikit-learn (``pip install -e '.[examples]'``).
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from actorwire.actors.bench._harness import Result
from actorwire.messages import ActorwireError

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


class TrainBenchError(ActorwireError, RuntimeError):
    """The workload cannot run here (no checkout, no scikit-learn), or a variant failed."""


def _digits() -> Any:
    if not (EXAMPLES / "digits.py").exists():
        raise TrainBenchError(f"bench train needs a checkout: {EXAMPLES / 'digits.py'} is not there")
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise TrainBenchError("bench train needs scikit-learn: pip install -e '.[examples]'") from None
    sys.path.insert(0, str(EXAMPLES))
    try:
        import digits
    finally:
        sys.path.remove(str(EXAMPLES))
    return digits


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the variants' workers (run as ``python -m actorwire.actors.bench._train ROLE ...``) ------------


def _ddp_rank(rank: int, world: int, port: int, epochs: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    digits = _digits()
    torch.set_num_threads(1)
    x, y, x_test, y_test = digits.load()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(digits.model(seed=0))
    opt = digits.optimizer(model)
    dist.barrier()
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(digits.SHUFFLE_SEED * 1000 + epoch))
        mine = order[rank::world]  # DistributedSampler's split
        for start in range(0, len(mine), digits.BATCH):
            idx = mine[start:start + digits.BATCH]
            digits.step(model, opt, x[idx], y[idx])
    dist.barrier()
    wall = time.perf_counter() - t0
    result = {"rank": rank, "wall": wall, "accuracy": digits.accuracy(model.module, x_test, y_test),
              "params": digits.checksum(model.module)}
    dist.destroy_process_group()
    return result


class _Clock:
    """Wall and trainer-thread CPU seconds inside actorwire calls, and inside the averaging."""

    def __init__(self) -> None:
        self.wall = self.cpu = self.reduce_wall = self.reduce_cpu = 0.0
        self.reduces = 0  # averagings (syncs) this rank took part in
        self.by_call: dict[str, float] = {}  # own CPU per call, the averaging aside

    def call(self, fn: Any, *args: Any) -> tuple[Any, float]:
        a, c, r = time.perf_counter(), time.thread_time(), self.reduce_cpu
        out = fn(*args)
        took = time.perf_counter() - a
        self.wall += took
        cpu = time.thread_time() - c
        self.cpu += cpu
        name = getattr(fn, "__name__", "?")
        self.by_call[name] = self.by_call.get(name, 0.0) + cpu - (self.reduce_cpu - r)
        return out, took

    def timed(self, fn: Any) -> Any:
        """``fn`` (the averaging) counted apart: it runs inside actorwire calls, but it is the sync's
        own work (flatten, collectives, copy back), not the control plane's."""

        def averaging(*args: Any, **kwargs: Any) -> Any:
            self.reduces += 1
            a, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.reduce_wall += time.perf_counter() - a
                self.reduce_cpu += time.thread_time() - c

        return averaging


def _actorwire_rank() -> dict[str, Any]:
    import torch

    from actorwire.actors.control import Worker, _rank_ops
    from actorwire.transport.comm import GlooCommunicator

    digits = _digits()
    torch.set_num_threads(1)
    x, y, x_test, y_test = digits.load()
    model = digits.model(seed=0)
    opt = digits.optimizer(model)
    clock = _Clock()
    reporting, steps = 0.0, 0
    _rank_ops.weighted_average = clock.timed(_rank_ops.weighted_average)  # type: ignore[method-assign]
    with Worker(model=model, optimizer=opt, communicator=GlooCommunicator(timeout_s=30), dataset_size=len(x)) as worker:
        # The first plan comes after the group formed and the first sync gave every rank one model;
        # the clock starts there and stops at the last (None), as DDP's starts after its process
        # group and its construction's broadcast and stops before destroy_process_group.
        plan = worker.next_plan()
        clock.reduce_wall = clock.reduce_cpu = 0.0  # the first sync's averaging ran before the clock
        clock.reduces = 0
        t0 = time.perf_counter()
        while plan is not None:
            batches = iter(worker.batches(plan, digits.BATCH, shuffle_seed=digits.SHUFFLE_SEED))
            while (idx := clock.call(next, batches, None)[0]) is not None:
                b = time.perf_counter()
                loss = digits.step(model, opt, x[idx], y[idx])
                reporting += clock.call(worker.report_timing, (time.perf_counter() - b) * 1000, loss)[1]
                steps += 1
            clock.call(worker.report_epoch, plan)
            plan = clock.call(worker.next_plan)[0]
        wall = time.perf_counter() - t0
        worker.finish()
    return {"rank": worker.rank, "wall": wall, "inside": clock.wall, "reporting": reporting,
            "reduce": clock.reduce_wall, "own": clock.cpu - clock.reduce_cpu, "steps": steps,
            "syncs": clock.reduces,
            "own_by_call": clock.by_call,
            "accuracy": digits.accuracy(model, x_test, y_test), "params": digits.checksum(model)}


def _results_of(procs: list[subprocess.Popen[str]], timeout: float) -> list[dict[str, Any]]:
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            lines = [line for line in stdout.splitlines() if line.startswith("{")]
            if p.returncode != 0 or not lines:
                raise TrainBenchError(f"a rank failed (exit {p.returncode}): {stderr.strip().splitlines()[-1:]}")
            out.append(json.loads(lines[-1]))
    finally:  # one rank failed or timed out: the others would wait for it in a collective
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return out


# -- the suite ------------------------------------------------------------------------------


def run(ranks: int = 3, epochs: int | None = None, progress: Any = sys.stderr) -> list[Result]:
    digits = _digits()
    epochs = epochs or digits.EPOCHS
    samples = epochs * digits.TRAIN
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}

    print(f"bench train: single process, {epochs} epochs", file=progress, flush=True)
    single_acc, single_took = _single(digits, epochs)
    single_s = samples / single_took

    print(f"bench train: DDP over gloo, {ranks} ranks", file=progress, flush=True)
    port = _port()
    ddp = _results_of([subprocess.Popen([sys.executable, "-m", "actorwire.actors.bench._train", "ddp", str(r),
                                         str(ranks), str(port), str(epochs)], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for r in range(ranks)], 600)
    ddp_s = samples / max(r["wall"] for r in ddp)

    print(f"bench train: actorwire Worker, {ranks} ranks", file=progress, flush=True)
    ours, outcome = _actorwire(digits, ranks, epochs, env)
    ours_s = samples / max(r["wall"] for r in ours)
    if not outcome.complete:
        raise TrainBenchError(f"the actorwire run did not finish: {outcome.line}")
    if len({r["params"] for r in ours}) != 1:
        raise TrainBenchError(f"the actorwire ranks ended with different models: {[r['params'] for r in ours]}")
    def share(key: str) -> float:  # of the rank where it is largest
        return max(r[key] / r["wall"] for r in ours) * 100

    inside, reporting = share("inside"), share("reporting")
    worst = max(ours, key=lambda r: r["own"] / max(1, r["steps"]))
    acc = min(r["accuracy"] for r in ours) * 100
    ddp_acc = ddp[0]["accuracy"] * 100
    return [
        Result.against("train.single", single_s, "samples/s", ddp_s, "1 process (accuracy "
                       f"{single_acc * 100:.1f}%)"),
        Result.against("train.ddp", ddp_s, "samples/s", ddp_s, f"{ranks} ranks, gloo"),
        Result.against("train.actorwire", ours_s, "samples/s", ddp_s, ">= 1.0x DDP"),
        Result.against("train.accuracy.ddp", ddp_acc, "%", single_acc * 100, "test accuracy / single"),
        Result.against("train.accuracy.actorwire", acc, "%", ddp_acc, "within 1 point of DDP"),
        Result("train.actorwire.inside", inside, "% of wall", note="<= 2% (syncs and waits included)"),
        Result("train.actorwire.report", reporting, "% of wall", note="report_timing alone (syncs served in it)"),
        Result("train.actorwire.reduce", share("reduce"), "% of wall", note="the averaging (collectives, flatten, copy back)"),
        Result("train.actorwire.syncs", max(r["syncs"] for r in ours) / epochs, "an epoch",
               note=f"averagings a rank took part in ({max(r['syncs'] for r in ours)} in {epochs} epochs; a rank "
                    f"trained {min(r['steps'] for r in ours) / epochs:.0f}-{max(r['steps'] for r in ours) / epochs:.0f} "
                    "steps an epoch)"),
        Result("train.actorwire.own", share("own"), "% of wall", note="<= 2%: trainer-thread CPU, averaging aside"),
        Result("train.actorwire.own_step", worst["own"] / max(1, worst["steps"]) * 1e6, "us",
               note="the same, per training step: " + ", ".join(
                   f"{name} {cpu / max(1, worst['steps']) * 1e6:.1f}" for name, cpu in
                   sorted(worst["own_by_call"].items(), key=lambda item: -item[1]))),
    ]


def _single(digits: Any, epochs: int, clock: Any = time.perf_counter) -> tuple[float, float]:
    """``(test accuracy, seconds of training)``.  The data set is loaded and a model and its optimizer
    made once before the clock starts, as every rank of the other variants does before its clock
    starts.  The first of each in a process is slow: the first load imports scikit-learn (2.5 s on
    the H100 host, 2.3 s on the 2-core VM), the first model and optimizer took 3.5 s on the H100
    host (0.26 s the second time); counted, they read 0.12x DDP's rate there, for a training of
    0.27 s (measured: three ``_single`` calls in one process, 3.7 s, 0.27 s, 0.27 s before this)."""
    import torch

    torch.set_num_threads(1)  # as every rank of the other variants
    digits.load()
    digits.optimizer(digits.model(0))
    t0 = clock()
    accuracy = float(digits.single_process(epochs))
    return accuracy, clock() - t0


def _actorwire(digits: Any, ranks: int, epochs: int, env: dict[str, str]) -> tuple[list[dict[str, Any]], Any]:
    from actorwire.actors.control import Coordinator
    from actorwire.actors.runtime._system import ActorSystem

    with ActorSystem() as system:
        coordinator = Coordinator(world_size=ranks, run_id=system.run_id, num_epochs=epochs,
                                  dataset_size=digits.TRAIN, batch_size=digits.BATCH, form_group=True,
                                  final_eval=False, eval_every=0, tick_interval=0.5,
                                  launcher_node=system.node_id)
        system.spawn(coordinator, "coordinator")
        inbox = system.inbox("main")
        inbox.watch("coordinator")
        with tempfile.TemporaryDirectory(prefix="aw-bench-train-") as out:
            children = [system.launch([sys.executable, "-m", "actorwire.actors.bench._train", "actorwire"], rank=r,
                                      watcher="coordinator",
                                      env={"ACTORWIRE_WORLD_SIZE": str(ranks), "BENCH_TRAIN_OUT": out,
                                           "OMP_NUM_THREADS": "1"}) for r in range(ranks)]
            while (got := inbox.get(timeout=300)) is not None:
                if type(got.message).__name__ == "Down":
                    break
            results = []
            for rank, child in enumerate(children):
                code = child.wait(120)
                found = pathlib.Path(out) / f"{rank}.json"
                if code != 0 or not found.exists():
                    raise TrainBenchError(f"actorwire rank {rank} failed (exit {code})")
                results.append(json.loads(found.read_text()))
    return results, coordinator.outcome()


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "ddp":
        print(json.dumps(_ddp_rank(*(int(a) for a in sys.argv[2:6]))), flush=True)
        # Not through the interpreter's exit: the DDP wrapper keeps the gloo group alive past
        # destroy_process_group, and a gloo thread still freeing the last barrier's work then needs
        # the GIL while the interpreter finalises, so the process aborts ("terminate called without
        # an active exception", SIGABRT; gdb: ~AsyncBarrierWork -> take_gil -> PyThread_exit_thread),
        # 1 run in 20 to 40 here.  The result is out and the group destroyed; nothing is left to do.
        sys.stderr.flush()
        os._exit(0)
    else:
        mine = _actorwire_rank()
        (pathlib.Path(os.environ["BENCH_TRAIN_OUT"]) / f"{mine['rank']}.json").write_text(json.dumps(mine))
