"""A member process whose training code raises inside ``with Worker(...)``.

argv: join endpoint, run id, death dir.  It hosts an inbox "victim" (for the
root to watch), prints "ready", waits for a line on stdin, then raises.
"""

from __future__ import annotations

import sys

from actorwire.actors import ActorSystem
from actorwire.actors.control import Worker


def main() -> None:
    join, run_id, death_dir = sys.argv[1:4]
    system = ActorSystem(join=join, run_id=run_id)
    system.inbox("victim")
    with Worker(system=system, rank=0, world_size=1, death_dir=death_dir, join_timeout=30):
        print("ready", flush=True)
        sys.stdin.readline()
        raise RuntimeError("the training step failed")


if __name__ == "__main__":
    main()
