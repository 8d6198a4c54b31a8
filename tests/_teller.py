"""A member process that sends as "worker/1", as a rank restarted by torchrun does.

argv: join endpoint, run id, first step, count.  It sends ``count`` heartbeats
numbered from ``first step`` to "counter", asks "counter" for its tally, prints
the reply's ``step_count`` and leaves.
"""

from __future__ import annotations

import sys

from actorwire import messages as m
from actorwire.actors import ActorSystem


def main() -> None:
    join, run_id, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with ActorSystem(join=join, run_id=run_id) as system:
        inbox = system.inbox("worker/1")
        for step in range(first, first + count):
            inbox.tell("counter", m.Heartbeat(rank=0, step_count=step))
        tally = inbox.ask("counter", m.SyncNow(), timeout=30, expect=m.SyncAck)
        print(tally.rank, tally.step_count, flush=True)


if __name__ == "__main__":
    main()
