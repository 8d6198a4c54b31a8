"""``actorwire demo``: a small live system, until the control-plane demo replaces it.

A ``tally`` actor in this process watches N ``reporter/R`` actors, each in its
own child process.  Every reporter sends ``Batch`` messages on a timer and
leaves cleanly after its quota; ``--kill-rank R`` SIGKILLs one mid-way to show
that a death is reported as such (and a clean exit never is).
"""

from __future__ import annotations

import argparse
import time

from actorwire import messages as m

from ._actor import Actor, handler
from ._context import Context
from ._system import ActorSystem


class Reporter(Actor):
    """Sends ``batches`` Batch messages to ``tally``, one per ``period`` seconds, then stops."""

    def __init__(self, rank: int, batches: int = 20, period: float = 0.05) -> None:
        self.rank = rank
        self.batches = batches
        self.period = period
        self.step = 0

    def on_start(self, ctx: Context) -> None:
        ctx.start_timer("batch", self.period, periodic=True)

    @handler
    def on_timer(self, msg: m.TimerFired, ctx: Context) -> None:
        self.step += 1
        loss = 1.0 / self.step + ctx.random.random() * 0.01
        ctx.tell("tally", m.Batch(rank=self.rank, batch_ms=self.period * 1000, step_count=self.step,
                                  batch_loss=loss))
        if self.step >= self.batches:
            ctx.stop()


class Tally(Actor):
    """Counts batches per rank and reports every ``Down`` to the user's inbox."""

    def __init__(self) -> None:
        self.batches: dict[int, int] = {}
        self.loss: dict[int, float] = {}

    @handler
    def on_batch(self, msg: m.Batch, ctx: Context) -> None:
        self.batches[msg.rank] = self.batches.get(msg.rank, 0) + 1
        self.loss[msg.rank] = msg.batch_loss
        if msg.step_count == 1:
            ctx.watch(ctx.sender or "")

    @handler
    def on_down(self, msg: m.Down, ctx: Context) -> None:
        rank = int(msg.name.rsplit("/", 1)[1])
        ctx.tell("main", m.EvalResult(rank=rank, schedule_id=self.batches.get(rank, 0), epoch=0,
                                      metric=self.loss.get(rank, float("nan")), elapsed_ms=0.0,
                                      error=None if msg.reason is m.DownReason.EXITED else
                                      f"{msg.reason.value}: {msg.detail}"))


def run_demo(args: argparse.Namespace) -> int:
    workers, batches = args.workers, 20
    if args.kill_rank is not None and not 0 <= args.kill_rank < workers:
        print(f"actorwire demo: --kill-rank must be between 0 and {workers - 1}, got {args.kill_rank}")
        return 2
    started = time.monotonic()
    with ActorSystem(record=args.record) as system:
        inbox = system.inbox("main")
        system.spawn(Tally(), "tally")
        children = {
            rank: system.spawn_process({f"reporter/{rank}": "actorwire.actors._demo:Reporter"},
                                       config={f"reporter/{rank}": {"rank": rank, "batches": batches}})
            for rank in range(workers)
        }
        print(f"run {system.run_id}: tally here, {workers} reporters in child processes "
              f"(pids {', '.join(str(c.pid) for c in children.values())})")
        if args.kill_rank is not None:
            time.sleep(batches * 0.05 / 2)
            children[args.kill_rank].kill()
            print(f"SIGKILLed reporter/{args.kill_rank}")
        print(f"{'rank':>4}  {'batches':>7}  {'last loss':>9}  outcome")
        failed = 0
        for _ in range(workers):
            got = inbox.get(timeout=30)
            if got is None:
                print("timed out waiting for the reporters")
                return 1
            r = got.message
            assert isinstance(r, m.EvalResult)
            failed += r.error is not None
            print(f"{r.rank:>4}  {r.schedule_id:>7}  {r.metric:>9.4f}  {r.error or 'exited cleanly'}")
    print(f"done in {time.monotonic() - started:.1f} s; {failed} of {workers} reporters lost")
    if args.record:
        print(f"recorded into {args.record}: try `actorwire log show {args.record}` or "
              f"`actorwire replay {args.record} --actor tally`")
    return 0
