"""A deterministic simulator of the control plane: the coordinator and N ranks in one process.

The real :class:`~actorwire.actors.control._coordinator.Coordinator` runs under
the test kit's virtual clock; each rank runs the real
:class:`~actorwire.actors.control._rank.RankProtocol` (the code the Worker and
the GpuWorker run), whose effects (batches, the all-reduce, group formation,
eval, checkpoint) are played in simulated time, and the network
between them delivers every message after a seeded delay, in order per link.
A seeded schedule of faults hits the ranks at any moment (kill, pause,
slowness, a delayed link), and the runtime's part is modelled too: a killed
process is reported to the coordinator (``Down``, and ``RankExited`` from its
launcher), a silent one after the runtime's staleness timeout.

After every step the invariants are checked:

* the run ends, by ``Shutdown`` or ``ShutdownWithSave`` with a reason, within a
  deadline computed from the configuration (no stall);
* every sample of every aggregated epoch was trained, and no two ranks the
  coordinator still counts trained the same sample in one epoch;
* no dead rank is believed alive past the staleness timeout (plus the
  coordinator's tick);
* a rank that left cleanly (``Exiting``) is never counted as a failure;
* no message a live rank sends is refused as out of phase (``stopping`` aside);
* no coordinator handler raises;
* the model (see :class:`SimModel`): every rank trains from the run's one initial model (a rank's
  own initialisation is never trained on, nor averaged in); every rank that finishes holds the same
  parameters; each announced global step equals the steps that the reduce before it covered, and
  the last one the steps the final model holds; every sample of every epoch is in the final model
  exactly once, except what a rank trained after its last completed sync and then took to its
  death: the rest of its epoch (from that sync on) is handed to the survivors, so only samples of
  an epoch that had already ended when it died are lost with it (``lost_with_dead``).

``actorwire simulate --seeds N`` runs seeds 0..N-1; a failing seed prints the
one command that replays it (``actorwire simulate --seed S``), which is exact:
the same seed gives the same run, message for message.
"""

from __future__ import annotations

from actorwire.actors.control._simulate._model import (
    COORD,
    FAULTS,
    FORMATION_TIMEOUT,
    MORE_FAULTS,
    SINK,
    Fault,
    InvariantBroken,
    Outcome,
    SimModel,
)
from actorwire.actors.control._simulate._rank import SimRank
from actorwire.actors.control._simulate._runner import Simulation, replay_command, run_seeds, simulate

__all__ = ["COORD", "FAULTS", "FORMATION_TIMEOUT", "MORE_FAULTS", "SINK", "Fault", "InvariantBroken", "Outcome",
           "SimModel", "SimRank", "Simulation", "replay_command", "run_seeds", "simulate"]
