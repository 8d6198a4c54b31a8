"""A root process that hosts a ``Hog`` (tests/_actors.py) named "hog".

argv: bind address ("" for ipc only).  Prints its endpoint and run id on one
line, then serves until stdin closes.
"""

from __future__ import annotations

import sys

from _actors import Hog

from actorwire.actors import ActorSystem, RuntimeConfig


def main() -> None:
    bind = sys.argv[1] or None
    with ActorSystem(config=RuntimeConfig(heartbeat_interval=0.2, staleness_timeout=1.0), bind=bind) as system:
        system.spawn(Hog(), "hog")
        print(system.endpoint, system.run_id, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
