"""``actorwire demo``: data-parallel training under the coordinator, on the CPU.

A coordinator actor runs in this process; N worker processes train a small
torch model on their slices of a dataset, all-reduce (gloo) when the
coordinator says so, and report metrics, which are printed per epoch.
``--kill-rank R --at-epoch E`` SIGKILLs a worker during epoch E: the
coordinator notices at once (exit detection), hands the rest of its slice to
the survivors, who re-form their process group with new ranks, and the run
finishes.  ``--record DIR`` records every actor for ``actorwire log`` and
``actorwire replay``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from actorwire.actors import _names
from actorwire.actors.cli._summary import summary_path_problem, write_summary
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.runtime._launch import ChildProcess
from actorwire.actors.runtime._system import ActorSystem
from actorwire.actors.weights._consumer import ModelConsumer
from actorwire.messages import kinds as m


def _spawn_consumers(system: ActorSystem, workers: int) -> dict[int, ModelConsumer]:
    """One weight consumer per worker rank, here; each builds the plan its rank's sender will build."""
    from actorwire.actors.cli._demo_train import make_model
    from actorwire.actors.weights._plan import single_rank_plan

    consumers = {}
    for rank in range(workers):
        prefix = _names.rank_prefix("weights", rank)
        plan = single_rank_plan(make_model(), prefix)
        consumers[rank] = ModelConsumer(0, plan, factory="actorwire.actors.cli._demo_train:make_model")
        system.spawn(consumers[rank], _names.consumer(prefix, 0))
    return consumers


def _epoch_arg(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _reap(child: ChildProcess, grace: float) -> int:
    """The worker's exit status, once it has left by itself within ``grace`` s or been stopped."""
    try:
        return child.wait(grace)
    except subprocess.TimeoutExpired:  # e.g. still waiting to join a run that ended
        child.process.terminate()
        try:
            return child.wait(5.0)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()


def _cli() -> str:
    """How to run the `actorwire` command from here: the name if PATH finds this interpreter's
    script, else the script's path (relative when it is under the current directory)."""
    script = os.path.join(os.path.dirname(sys.executable), "actorwire")
    found = shutil.which("actorwire")
    if found and os.path.realpath(found) == os.path.realpath(script):
        return "actorwire"
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else script


def run_demo(args: argparse.Namespace) -> int:
    # A progress table: each line as it happens, also into a pipe or a file (`demo | tee run.txt`).
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    workers, epochs = args.workers, args.epochs
    if args.kill_rank is not None and not 0 <= args.kill_rank < workers:
        print(f"actorwire demo: --kill-rank must be between 0 and {workers - 1}, got {args.kill_rank}")
        return 2
    at_start = args.at_epoch == "start"
    if args.at_epoch is None:  # not given: the kill (if any) lands in epoch 1, or 0 in a one-epoch run
        at_epoch: int | None = min(1, epochs - 1)
    else:
        at_epoch = None if at_start else _epoch_arg(args.at_epoch)
        if args.kill_rank is None:
            print("actorwire demo: --at-epoch says when --kill-rank kills; give --kill-rank too")
            return 2
        if not at_start and (at_epoch is None or not 0 <= at_epoch < epochs):
            print(f"actorwire demo: --at-epoch must be 'start' or between 0 and {epochs - 1}, got {args.at_epoch}")
            return 2
    problem = summary_path_problem(getattr(args, "summary", None))
    if problem is not None:
        print(f"actorwire demo: {problem}")
        return 2
    if args.record is not None:
        where = pathlib.Path(args.record)
        if where.exists() and not where.is_dir():
            print(f"actorwire demo: --record {args.record}: not a directory")
            return 2
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"actorwire demo: --record {args.record}: cannot create it ({exc.strerror})")
            return 2
    min_world = getattr(args, "min_world_size", None) or 1
    if min_world > workers:
        print(f"actorwire demo: --min-world-size must be at most --workers ({workers}), got {min_world}")
        return 2
    backend = getattr(args, "backend", "gloo")
    if backend == "nccl":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < workers:
            print(f"actorwire demo: --backend nccl needs a GPU per worker ({workers}); {gpus} visible")
            return 2
    started = time.monotonic()
    save_dir = tempfile.mkdtemp(prefix="actorwire-demo-")
    try:
        dataset = 3072
        with ActorSystem(record=args.record) as system:
            waiting: Any = None
            try:
                run_id = system.run_id
                inbox = system.inbox("main")
                coordinator = Coordinator(world_size=workers, run_id=system.run_id, num_epochs=epochs,
                                          dataset_size=dataset, batch_size=32, sync_every=8, eval_every=2,
                                          checkpoint_every=2, form_group=True, metrics_sink="main",
                                          save_stem=f"{save_dir}/run", tick_interval=0.5, staleness_timeout=10.0,
                                          join_timeout=45.0, min_world_size=min_world,
                                          launcher_node=system.node_id)
                system.spawn(coordinator, "coordinator")
                inbox.watch("coordinator")
                consumers = _spawn_consumers(system, workers)
                env = {"DEMO_DATASET": str(dataset), "DEMO_SAVE_STEM": f"{save_dir}/run",
                       "ACTORWIRE_WORLD_SIZE": str(workers), "DEMO_BACKEND": backend}
                # The coordinator is told when a worker's process exits, also before it has joined.
                children = {rank: system.launch([sys.executable, "-m", "actorwire.actors.cli._demo_train"], rank=rank, env=env,
                                                watcher="coordinator")
                            for rank in range(workers)}
                print(f"run {system.run_id}: coordinator here, {workers} workers "
                      f"(pids {', '.join(str(c.pid) for c in children.values())}), {epochs} epochs, {backend} all-reduce")
                print(f"{'epoch':>5}  {'loss':>8}  {'ms':>7}  samples per rank")
                kill_at = at_epoch if args.kill_rank is not None else None
                killed = None
                killed_at = 0.0
                if args.kill_rank is not None and at_start:  # it is still importing torch: it cannot have joined
                    children[args.kill_rank].kill()
                    killed, killed_at = args.kill_rank, time.monotonic()
                    print(f"   -- SIGKILLed rank {killed} at start, before it joined")
                handed_over: list[int] = []
                ended: m.ShutdownWithSave | None = None
                finished: set[int] = set()
                joined = 0
                # On a terminal, a spinner says what the first seconds are spent on (each worker imports
                # torch before it can join); the lines below are printed above it, and it goes once all
                # have joined.  Piped, the lines alone.
                waiting = _spinner(f"starting {workers} workers (each imports torch, then joins)")
                while True:
                    got = inbox.get(timeout=60)
                    if got is None:
                        print("the run stalled: no news from the coordinator for 60 s")
                        return 1
                    msg = got.message
                    if isinstance(msg, m.StartEpoch) and msg.epoch == kill_at and killed is None:
                        time.sleep(0.15)  # let the epoch get under way (an epoch lasts about 0.3 s)
                        children[args.kill_rank].kill()  # type: ignore[index]
                        killed, killed_at = args.kill_rank, time.monotonic()
                        print(f"   -- SIGKILLed rank {killed} during epoch {kill_at}")
                    elif isinstance(msg, m.JoinAccepted):
                        joined += 1
                        print(f"   rank {msg.rank} joined ({joined}/{msg.world_size})")
                        if waiting is not None:
                            waiting.update(f"{joined} of {msg.world_size} workers joined; waiting for the rest")
                            if joined >= msg.world_size:
                                waiting.stop()
                                waiting = None
                    elif isinstance(msg, m.ExtendPartition):
                        handed_over.append(msg.partition_size)
                        if len(handed_over) == 1:
                            after = f" {time.monotonic() - killed_at:.2f} s after the kill" if killed is not None else ""
                            print(f"   -- a rank was lost during epoch {msg.epoch}{after}; the samples it had not "
                                  f"trained go to the survivors:")
                        print(f"      {msg.partition_size} samples from {msg.partition_offset} to a survivor")
                    elif isinstance(msg, m.ShutdownWithSave):
                        ended = msg
                        print(f"the run cannot go on ({msg.reason.value}): {msg.detail}")
                    elif isinstance(msg, m.EpochMetrics):
                        finished.add(msg.epoch)
                        samples = " ".join(f"{s:>5}" for s in msg.per_rank_samples)
                        print(f"{msg.epoch:>5}  {msg.avg_loss:>8.4f}  {msg.epoch_ms:>7.1f}  {samples}")
                    elif isinstance(msg, m.EvalBroadcast):
                        # An eval asked at the start of epoch E sees epochs 0..E-1: "after epoch E-1", in
                        # the table's (0-based) numbering.
                        print(f"   eval after epoch {msg.epoch - 1}: validation mse {msg.metric:.4f}")
                    elif isinstance(msg, m.RankLost):
                        when = f"in epoch {msg.epoch}" if msg.epoch >= 0 else "before the run started"
                        print(f"   -- rank {msg.rank} lost {when} ({msg.reason}); {msg.world_size} rank(s) go on")
                    elif isinstance(msg, m.GroupFormed):
                        print(f"   -- the group formed again: ranks {msg.ranks}, world size {msg.world_size}, "
                              f"{msg.seconds:.2f} s after the loss")
                    elif isinstance(msg, m.Down) and msg.name == "coordinator":
                        break
                    if waiting is not None and (finished or ended is not None):  # it went on without someone
                        waiting.stop()
                        waiting = None
                codes = {rank: _reap(child, 30.0 if ended is None else 5.0) for rank, child in children.items()}
            except KeyboardInterrupt:  # the children are in their own process group: end them here
                system.interrupt()
                raise
            finally:
                if waiting is not None:
                    waiting.stop()
        lost = [r for r, c in codes.items() if c != 0]
        synced = ", ".join(f"rank {r}: {c.syncs_done}" for r, c in consumers.items())
        print(f"weights synced to one consumer per rank after every epoch, each checked bit-exact ({synced})")
        print(f"done in {time.monotonic() - started:.1f} s; worker exit codes {codes}")
        print(f"lost rank(s): {lost}" if lost else "no rank lost")
        print(f"checkpoints kept under {save_dir}" if args.keep else
              "checkpoints were written to a temp dir, removed at exit (--keep keeps them)")
        cli = _cli()
        if args.record:
            from actorwire.actors.runtime._record import run_directory

            where = run_directory(args.record, run_id)
            print(f"recorded into {where}: try `{cli} log show {where} --kind epoch_aggregated` or "
                  f"`{cli} replay {where} --actor coordinator`")
        # The outcome is the run's, not the workers': a run that finished with survivors succeeded,
        # whoever killed a rank; one that ended early (or lost an epoch) failed.
        outcome = coordinator.outcome()
        complete = outcome.complete and ended is None and finished == set(range(epochs))
        if not complete and ended is None:
            print(f"the run ended after epochs {sorted(finished)} of {epochs}")
        print(outcome.line)
        if getattr(args, "summary", None):
            write_summary(args.summary, outcome.summary())
        if cli == "actorwire":
            print("more: `actorwire --help`")
        else:  # `make demo` runs the venv's script, which is not on PATH until the venv is active
            venv = os.path.dirname(os.path.dirname(cli))
            print(f"more: `{cli} --help` (or `source {venv}/bin/activate` and then `actorwire --help`)")
        return 0 if complete else 1
    finally:
        if not args.keep:  # a temp dir: gone with the demo, however it ended, unless asked
            shutil.rmtree(save_dir, ignore_errors=True)


def _spinner(text: str) -> Any:
    """A started rich status line on stdout when it is a terminal (None otherwise)."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        return None
    status = console.status(text)
    status.start()
    return status
