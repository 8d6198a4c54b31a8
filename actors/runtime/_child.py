"""Entry point of a child process: build the actors of a spec and serve until told to stop.

Exit status: 0 after a clean exit (the root left, or every actor stopped);
1 if the actors could not be built; 2 on a malformed spec; 3 when an actor
stopped short of its work (``Context.stop(failure)``, or a handler raised and
stopped it: a rank evicted or refused), so a launcher sees it as a failure.
"""

from __future__ import annotations

import sys

import msgspec

from actorwire.actors.runtime._launch import ChildSpec, load_actor, set_process_title
from actorwire.actors.runtime._system import ActorSystem
from actorwire.transport.internal import get_logger


def main(argv: list[str]) -> int:
    log = get_logger(role="child")
    try:
        spec = msgspec.json.decode(argv[0], type=ChildSpec)
    except (IndexError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.error("bad child spec", reason=str(exc))
        return 2
    set_process_title([a.name for a in spec.actors])
    system = ActorSystem(run_id=spec.run_id, join=spec.join, node_id=spec.node_id, rank=spec.rank,
                         takeover=spec.takeover)
    try:
        for actor_spec in spec.actors:
            system.spawn(load_actor(actor_spec), actor_spec.name)
    except Exception:
        log.exception("could not start the actors")
        system.shutdown()
        return 1
    system.wait()
    system.shutdown()
    if system.failures:
        log.error("actors stopped short of their work; exit status 3", failures=system.failures)
        return 3
    return 0


if __name__ == "__main__":
    from actorwire.transport import configure_logging

    configure_logging()  # a program of ours: it may configure its process
    sys.exit(main(sys.argv[1:]))
