"""actorwire.actors.control: the training control plane.

The :class:`Coordinator` actor, the rank side as an embedded :class:`Worker`
(a custom trainer keeps its loop and calls it) or as the :class:`GpuWorker`
actor; docs/control-plane.md describes their protocol.
"""

from __future__ import annotations

from actorwire.actors.control._coordinator import Coordinator, CoordinatorConfig
from actorwire.actors.control._gpu_worker import GpuWorker
from actorwire.actors.control._local import LocalRun, run_local
from actorwire.actors.control._outcome import RunOutcome
from actorwire.actors.control._relay import Relay
from actorwire.actors.control._worker import Plan, Worker, WorkerError
from actorwire.messages._public import publish as _publish

__all__ = ["Coordinator", "CoordinatorConfig", "RunOutcome", "Worker", "WorkerError", "Plan", "GpuWorker", "Relay",
           "run_local", "LocalRun"]
_publish(globals(), __all__)
