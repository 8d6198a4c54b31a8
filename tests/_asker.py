"""A member process whose user threads ask on their lines: ``python _asker.py JOIN RUN_ID TELLS THREADS``.

Each of ``THREADS`` threads asks "counter" for its tally (the thread's line to
the root opens), tells it ``TELLS`` heartbeats counting up from 0, asks again,
and so on three times; every reply must count the thread's tells so far.  The
process prints ``ok`` or what was wrong.
"""

from __future__ import annotations

import sys
import threading

from actorwire import messages as m
from actorwire.actors import ActorSystem


def main() -> None:
    join, run_id, tells, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    wrong: list[str] = []
    with ActorSystem(join=join, run_id=run_id) as system:

        def run() -> None:
            step = 0
            for round_ in range(3):
                tally = system.ask("counter", m.SyncNow(), timeout=30, expect=m.SyncAck)
                if tally.rank:  # the counter saw a heartbeat out of order
                    wrong.append(f"round {round_}: {tally.rank} out of order")
                for _ in range(tells):
                    system.tell("counter", m.Heartbeat(rank=0, step_count=step))
                    step += 1

        workers = [threading.Thread(target=run) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        tally = system.ask("counter", m.SyncNow(), timeout=30, expect=m.SyncAck)
        if tally.step_count != 3 * tells * threads:
            wrong.append(f"counted {tally.step_count} heartbeats of {3 * tells * threads}")
    print("ok" if not wrong else "; ".join(wrong), flush=True)


if __name__ == "__main__":
    main()
