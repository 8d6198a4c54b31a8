"""The demo's training process with a fault at one named point: it SIGKILLs or SIGSTOPs itself there.

A real signal to a real process, at a moment chosen by code rather than by a timer outside, so
every case of the fault matrix hits the phase it names. The environment says where:
``FAULT`` (the point, see ``POINTS``), ``FAULT_RANKS`` (launch ranks, comma-separated, or
``any``: whichever rank gets there, for eval and checkpoint, which run on one elected rank),
``FAULT_SIGNAL`` (``KILL``, ``STOP`` or ``HANG``; ``HANG``, and the point ``hang_in_sync``, send
none: the training thread sleeps ``FAULT_HANG_S`` there, inside its all-reduce for
``hang_in_sync``, while its heartbeats go on) and ``FAULT_FILE`` (where the wall time of the signal is
written, for the detection times; one file per rank, ``<FAULT_FILE>.<rank>``). While
``<FAULT_FILE>.hold`` exists, every batch takes 100 ms more: the test holds the run back so that a
restarted rank's start-up (importing torch) cannot outlast it on a loaded machine.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

POINTS = ("startup", "join", "formation", "training", "sync", "eval", "checkpoint", "weights", "shutdown",
          "hang_in_sync")


def main() -> int:
    from actorwire.actors.cli import _demo_train
    from actorwire.actors.control import _rank_ops, _worker
    from actorwire.actors.weights._sender import WeightSender
    from actorwire.transport.comm import GlooCommunicator

    rank = int(os.environ["ACTORWIRE_RANK"])
    point = os.environ.get("FAULT", "")
    wanted = os.environ.get("FAULT_RANKS", "")
    mine = wanted == "any" or str(rank) in wanted.split(",")
    signum = signal.SIGSTOP if os.environ.get("FAULT_SIGNAL") == "STOP" else signal.SIGKILL
    if point and point not in (*POINTS, "none"):
        raise SystemExit(f"FAULT must be one of {', '.join(POINTS)}, got {point!r}")
    done = False

    def fault(where: str) -> None:
        nonlocal done
        if done or not mine or where != point:
            return
        done = True
        if wanted == "any":  # the first rank there, of all processes: the others go on
            try:
                os.close(os.open(os.environ["FAULT_FILE"] + ".claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
        path = f"{os.environ['FAULT_FILE']}.{rank}"
        with open(path + ".tmp", "w") as f:
            f.write(repr(time.time()))
        os.replace(path + ".tmp", path)  # the test never reads a half-written time
        if where == "hang_in_sync" or os.environ.get("FAULT_SIGNAL") == "HANG":
            # The training thread frozen (as ptrace froze it in an outside fault matrix), its
            # heartbeat and I/O threads running on.
            time.sleep(float(os.environ.get("FAULT_HANG_S", "15")))
            return
        os.kill(os.getpid(), signum)

    def wrap(owner: Any, name: str, before: str | None = None, after: str | None = None,
             when: Any = None) -> None:
        original = getattr(owner, name)

        def hooked(*args: Any, **kwargs: Any) -> Any:
            if before and (when is None or when()):
                fault(before)
            result = original(*args, **kwargs)
            if after and (when is None or when()):
                fault(after)
            return result

        setattr(owner, name, hooked)

    state = {"epoch": -1, "batches": 0, "reduces": 0}

    def in_epoch_1() -> bool:
        return state["epoch"] == 1

    original_next_plan = _worker.Worker.next_plan

    def next_plan(self: Any, *args: Any, **kwargs: Any) -> Any:
        plan = original_next_plan(self, *args, **kwargs)
        if plan is not None:
            state["epoch"], state["batches"] = plan.epoch, 0
        return plan

    _worker.Worker.next_plan = next_plan  # type: ignore[method-assign]
    original_timing = _worker.Worker.report_timing

    hold = os.environ["FAULT_FILE"] + ".hold" if "FAULT_FILE" in os.environ else None

    def report_timing(self: Any, *args: Any, **kwargs: Any) -> Any:
        original_timing(self, *args, **kwargs)
        if hold is not None and os.path.exists(hold):
            time.sleep(0.1)
        state["batches"] += 1
        if in_epoch_1() and state["batches"] == 10:
            fault("training")

    _worker.Worker.report_timing = report_timing  # type: ignore[method-assign]
    wrap(_worker.Worker, "__init__", after="join")
    wrap(GlooCommunicator, "init", before="formation")
    original_reduce = GlooCommunicator.all_reduce_sum

    def all_reduce_sum(self: Any, tensor: Any) -> Any:
        state["reduces"] += 1
        if in_epoch_1():
            fault("sync")
            fault("hang_in_sync")
        return original_reduce(self, tensor)

    GlooCommunicator.all_reduce_sum = all_reduce_sum  # type: ignore[method-assign]
    wrap(_rank_ops, "run_eval", before="eval")
    wrap(_rank_ops, "run_checkpoint", before="checkpoint")
    wrap(WeightSender, "send_weights", before="weights", when=in_epoch_1)
    wrap(_worker.Worker, "drain_pending_shutdown", after="shutdown")
    fault("startup")  # torch is imported and the data not yet made: the rank has not joined
    return _demo_train.main()


if __name__ == "__main__":
    from actorwire.transport import configure_logging

    configure_logging()
    sys.exit(main())
