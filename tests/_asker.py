"""A member process whose user threads ask on their lines: ``python _asker.py JOIN RUN_ID TELLS THREADS``.

Each of ``THREADS`` threads asks "counter" for its tally (the thread's line to
the root opens), tells it ``TELLS`` heartbeats counting up from 0, asks again,
and so on three times, then asks once more; no reply may find a heartbeat out of
order.  Once every thread's last ask is answered, all their tells are handled
(FIFO holds per sending thread, so an ask is answered after that thread's tells),
and the main thread's tally must count them all.  The process prints ``ok`` or
what was wrong.
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
        # A user thread's sender name carries its thread ident, which Python gives again to a thread
        # started after another ended: a thread that finished all its rounds before the last one
        # started would lend that one its name, and the counter would see its step 0 after step 599
        # (it did, under load). The threads wait for each other before they end, so three live at once.
        together = threading.Barrier(threads)

        def run() -> None:
            step = 0
            for round_ in range(4):
                tally = system.ask("counter", m.SyncNow(), timeout=30, expect=m.SyncAck)
                if tally.rank:  # the counter saw a heartbeat out of order
                    wrong.append(f"round {round_}: {tally.rank} out of order")
                if round_ == 3:
                    together.wait(60)
                    return  # the last ask: answered once this thread's tells are handled
                for _ in range(tells):
                    system.tell("counter", m.Heartbeat(rank=0, step_count=step))
                    step += 1

        workers = [threading.Thread(target=run) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        # Another thread, so another stream: asked before the workers' last asks were answered,
        # this could overtake their last tells (a test run under load counted 1600 of 1800).
        tally = system.ask("counter", m.SyncNow(), timeout=30, expect=m.SyncAck)
        if tally.step_count != 3 * tells * threads:
            wrong.append(f"counted {tally.step_count} heartbeats of {3 * tells * threads}")
    print("ok" if not wrong else "; ".join(wrong), flush=True)


if __name__ == "__main__":
    main()
