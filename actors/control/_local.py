"""``run_local``: a coordinator in this process and N local ranks of one's own training script."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from typing import Any

from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.control._outcome import RunOutcome
from actorwire.messages import Message
from actorwire.messages.kinds import Down


@dataclasses.dataclass(frozen=True)
class LocalRun:
    """How a :func:`run_local` run ended: the coordinator's outcome (``outcome.line``,
    ``outcome.exit_code``) and each rank's process exit status, in rank order."""

    outcome: RunOutcome
    exit_codes: list[int]


def run_local(argv: list[str], world_size: int, *, num_epochs: int, dataset_size: int,
              on_message: Callable[[Message], None] | None = None, env: dict[str, str] | None = None,
              exit_timeout: float = 60.0, **settings: Any) -> LocalRun:
    """Run ``argv`` (e.g. ``[sys.executable, "train.py"]``) as ranks 0..world_size-1 of one run.

    A :class:`Coordinator` runs in this process with ``num_epochs``, ``dataset_size`` and any other
    :class:`~._ledger.CoordinatorConfig` field in ``settings``; each rank is a child process that
    finds the run, its rank and the world size in its environment (``Worker()`` needs no
    arguments for them), and whose exit, even before it joined, is reported to the coordinator.
    ``on_message`` sees what the coordinator tells the run's owner (``JoinAccepted``,
    ``EpochMetrics``, ``EvalBroadcast``, ``ShutdownWithSave``, ...), on this thread.  Returns once
    the coordinator ended the run and every rank exited (one still running ``exit_timeout`` seconds
    after the run's end is killed).  Ctrl-C ends every rank and leaves nothing behind.
    """
    from actorwire.actors.runtime._system import ActorSystem

    settings = {"form_group": True, "metrics_sink": "main", **settings}
    with ActorSystem() as system:
        coordinator = Coordinator(world_size=world_size, run_id=system.run_id, num_epochs=num_epochs,
                                  dataset_size=dataset_size, launcher_node=system.node_id, **settings)
        inbox = system.inbox(settings["metrics_sink"])
        system.spawn(coordinator, "coordinator")
        inbox.watch("coordinator")
        try:
            children = [system.launch(list(argv), rank=rank, watcher="coordinator",
                                      env={"ACTORWIRE_WORLD_SIZE": str(world_size), **(env or {})})
                        for rank in range(world_size)]
            while True:
                got = inbox.get(timeout=1.0)
                if got is None:
                    continue
                if isinstance(got.message, Down) and got.message.name == "coordinator":
                    break
                if on_message is not None:
                    on_message(got.message)
            codes = []
            for child in children:
                try:
                    codes.append(child.wait(exit_timeout))
                except subprocess.TimeoutExpired:
                    child.kill()
                    codes.append(child.wait(10))
        except KeyboardInterrupt:
            system.interrupt()
            raise
    return LocalRun(outcome=coordinator.outcome(), exit_codes=codes)
