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
import math
import sys
import tempfile
import time

from actorwire import messages as m
from actorwire.actors import _names
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.runtime._system import ActorSystem
from actorwire.actors.weights._consumer import ModelConsumer


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


def run_demo(args: argparse.Namespace) -> int:
    workers, epochs = args.workers, args.epochs
    if args.kill_rank is not None and not 0 <= args.kill_rank < workers:
        print(f"actorwire demo: --kill-rank must be between 0 and {workers - 1}, got {args.kill_rank}")
        return 2
    if args.at_epoch is not None and not 0 <= args.at_epoch < epochs:
        print(f"actorwire demo: --at-epoch must be between 0 and {epochs - 1}, got {args.at_epoch}")
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
    dataset = 3072
    with ActorSystem(record=args.record) as system:
        inbox = system.inbox("main")
        system.spawn(Coordinator(world_size=workers, run_id=system.run_id, num_epochs=epochs, dataset_size=dataset,
                                 batch_size=32, sync_every=8, eval_every=2, checkpoint_every=2, form_group=True,
                                 metrics_sink="main", save_stem=f"{save_dir}/run", tick_interval=0.5,
                                 staleness_timeout=10.0), "coordinator")
        inbox.watch("coordinator")
        consumers = _spawn_consumers(system, workers)
        env = {"DEMO_DATASET": str(dataset), "DEMO_SAVE_STEM": f"{save_dir}/run",
               "ACTORWIRE_WORLD_SIZE": str(workers), "DEMO_BACKEND": backend}
        children = {rank: system.launch([sys.executable, "-m", "actorwire.actors.cli._demo_train"], rank=rank, env=env)
                    for rank in range(workers)}
        print(f"run {system.run_id}: coordinator here, {workers} workers "
              f"(pids {', '.join(str(c.pid) for c in children.values())}), {epochs} epochs, {backend} all-reduce")
        print(f"{'epoch':>5}  {'loss':>8}  {'mse':>8}  {'ms':>7}  samples per rank")
        kill_at = args.at_epoch if args.kill_rank is not None else None
        killed = None
        while True:
            got = inbox.get(timeout=60)
            if got is None:
                print("the run stalled: no news from the coordinator for 60 s")
                return 1
            msg = got.message
            if isinstance(msg, m.StartEpoch) and msg.epoch == kill_at and killed is None:
                time.sleep(0.2)  # let the epoch get under way
                children[args.kill_rank].kill()  # type: ignore[index]
                killed = args.kill_rank
                print(f"   -- SIGKILLed rank {killed} during epoch {kill_at}")
            elif isinstance(msg, m.EpochMetrics):
                samples = " ".join(f"{s:>5}" for s in msg.per_rank_samples)
                mse = msg.scalars.get("mse", math.nan)
                print(f"{msg.epoch:>5}  {msg.avg_loss:>8.4f}  {mse:>8.4f}  {msg.epoch_ms:>7.1f}  {samples}")
            elif isinstance(msg, m.EvalBroadcast):
                print(f"   eval after epoch {msg.epoch}: validation mse {msg.metric:.4f}")
            elif isinstance(msg, m.Down) and msg.name == "coordinator":
                break
        codes = {rank: child.wait(30) for rank, child in children.items()}
    lost = [r for r, c in codes.items() if c != 0]
    synced = ", ".join(f"rank {r}: {c.syncs_done}" for r, c in consumers.items())
    print(f"weights synced to one consumer per rank after every epoch, each checked bit-exact ({synced})")
    print(f"done in {time.monotonic() - started:.1f} s; worker exit codes {codes}")
    print(f"lost rank(s): {lost}" if lost else "no rank lost")
    print(f"checkpoints under {save_dir}")
    if args.record:
        print(f"recorded into {args.record}: try `actorwire log show {args.record} --kind epoch_aggregated` or "
              f"`actorwire replay {args.record} --actor coordinator`")
    return 0 if set(lost) <= ({killed} if killed is not None else set()) else 1
