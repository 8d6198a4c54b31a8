"""The simulator's constants, the simulated model, faults and outcomes."""

from __future__ import annotations

import collections
import dataclasses

from actorwire.messages import ActorwireError

COORD = "coordinator"
SINK = "main"
LAUNCHER = "launcher"  # the node the simulated launcher reports rank exits from
RUNTIME_STALENESS = 3.0  # the runtime declares a silent process dead after this
EXIT_DETECTION = (0.001, 0.05)  # how long the launcher takes to see a process exit
AGENT_STOP_S = 0.3  # torchrun's agent stops the other workers this long after one died
FORMATION_TIMEOUT = 8.0  # a rank waits this long for a group to form (gloo's timeout)
SESSION_WAIT = 60.0  # after a failed all-reduce, a rank waits this long for a new group

FAULTS = ("kill", "kill_before_join", "pause_short", "pause_long", "slow", "delay", "kill_two", "hang")
#: Drawn from a stream of their own (``FAULTS`` must not change: the seeds of the tests name runs).
MORE_FAULTS = ("partition_short", "partition_long", "kill_coordinator")
JOIN_GIVE_UP = 10.0  # a rank whose join is never answered gives up after this (its join timeout)
#: Every rank has left this long after the coordinator died: a hang, a stop, a join's timeout.
COORDINATOR_LOSS_BOUND = 40.0


PARAMS = 4  # the simulated model's parameter count


@dataclasses.dataclass
class SimModel:
    """A rank's model: a parameter vector and what it is made of.

    ``params`` move by each batch, deterministically from the epoch and the sample indices, and are
    averaged at each sync by the weights the real all-reduce uses (``reduce_weight``).  The history
    says what they hold: ``origin`` (which initialisation), ``base`` (the samples, by epoch, and the
    steps that the last reduce or the initial model brought) and ``delta`` (what this rank trained
    since).  The simulator compares histories where the real code could only compare bits.
    """

    params: list[float]
    origin: frozenset[int]
    base: collections.Counter[tuple[int, int]] = dataclasses.field(default_factory=collections.Counter)
    base_steps: int = 0
    delta: collections.Counter[tuple[int, int]] = dataclasses.field(default_factory=collections.Counter)
    delta_steps: int = 0

    @classmethod
    def initial(cls, origin: int) -> SimModel:
        return cls([origin + 0.25 * j for j in range(PARAMS)], frozenset({origin}))

    def train(self, epoch: int, indices: range) -> None:
        for i in indices:
            for j in range(PARAMS):
                self.params[j] -= 0.01 * (((i * 31 + j * 17 + epoch * 7) % 13) - 6)
            self.delta[(epoch, i)] += 1
        self.delta_steps += 1

    def history(self) -> tuple[frozenset[int], collections.Counter[tuple[int, int]], int]:
        return self.origin, self.base, self.base_steps

    def holds(self) -> collections.Counter[tuple[int, int]]:
        return self.base + self.delta


class InvariantBroken(ActorwireError, AssertionError):
    """A rule of the control plane did not hold; the text says which and when."""


@dataclasses.dataclass
class Fault:
    kind: str
    at: float
    rank: int
    other: int = -1
    duration: float = 0.0

    def __str__(self) -> str:
        extra = f" and {self.other}" if self.other >= 0 else ""
        lasting = f" for {self.duration:.2f} s" if self.duration else ""
        return f"{self.kind} rank {self.rank}{extra} at {self.at:.2f} s{lasting}"


@dataclasses.dataclass
class Outcome:
    seed: int
    ended_by: str  # "shutdown", or the save reason
    detail: str
    at: float
    epochs: int
    faults: list[Fault]
    messages: int

    def line(self) -> str:
        faults = "; ".join(map(str, self.faults)) or "no fault"
        return (f"seed {self.seed}: {self.ended_by} at {self.at:.1f} s after {self.epochs} epoch(s), "
                f"{self.messages} messages ({faults})")
