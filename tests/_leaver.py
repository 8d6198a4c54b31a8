"""A member that leaves cleanly behind a backlog: ``python _leaver.py JOIN RUN_ID N``.

It opens ``N`` inboxes, each tells "sink" one heartbeat, and it exits cleanly: its shutdown
unregisters the ``N`` names and says ``NodeExiting``, one message each, and the process ends
while the root may still be reading them.  It prints ``ready`` once the inboxes are registered.
"""

from __future__ import annotations

import sys

from actorwire import messages as m
from actorwire.actors import ActorSystem


def main() -> None:
    join, run_id, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with ActorSystem(join=join, run_id=run_id) as system:
        boxes = [system.inbox(f"box/{k}") for k in range(n)]
        print("ready", flush=True)
        for box in boxes:
            box.tell("sink", m.Heartbeat(rank=0, step_count=1))


if __name__ == "__main__":
    main()
