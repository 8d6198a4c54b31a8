"""The coordinator's record of losses: which ranks were lost and why, which came back, when ranks
died while the run went on, and the whole-group restarts.  A typed machine with no I/O and no clock
(the time of a death is passed in).  It is what the run's last line says (``RunOutcome``) and what
tells a launcher's cascade (every rank stopped within a second) from deaths one by one.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Losses:
    """Who was lost, when and why, and who came back."""

    #: Ranks lost before the run began (rank -> why); a new incarnation's join takes its rank off.
    at_start: dict[int, str] = dataclasses.field(default_factory=dict)
    #: Ranks lost while the run went on (rank -> "lost in epoch E (why)"), kept when they rejoin.
    running: dict[int, str] = dataclasses.field(default_factory=dict)
    #: Ranks that joined again while the run went on, and were not lost again since.
    rejoined: set[int] = dataclasses.field(default_factory=set)
    #: When each rank was lost while the run went on.
    deaths: list[float] = dataclasses.field(default_factory=list)
    #: One line per whole-group restart the run resumed from.
    restarts: list[str] = dataclasses.field(default_factory=list)

    def joined(self, rank: int, *, rejoin: bool) -> None:
        """A new incarnation of ``rank`` joined: what was lost of it at the start is back; ``rejoin``:
        the run was going on (it takes part from the next epoch)."""
        self.at_start.pop(rank, None)
        if rejoin:
            self.rejoined.add(rank)

    def lost_before_start(self, rank: int, why: str) -> str:
        self.at_start[rank] = why
        return why

    def lost_running(self, rank: int, epoch: int, why: str) -> None:
        self.running[rank] = f"lost in epoch {epoch} ({why})"
        self.rejoined.discard(rank)

    def died(self, now: float) -> None:
        self.deaths.append(now)

    def recent(self, now: float, window: float) -> list[float]:
        """The deaths within ``window`` seconds of ``now``."""
        return [t for t in self.deaths if now - t <= window]

    def lost(self) -> dict[int, str]:
        """Every rank lost, before or during the run, and why."""
        return {**self.at_start, **self.running}

    def text(self) -> str:
        """The losses in one line: each rank and why (and whether it rejoined), then the restarts."""
        losses = "; ".join(f"rank {rank} {why}" + (", rejoined" if rank in self.rejoined else "")
                           for rank, why in sorted(self.lost().items()))
        if self.restarts:
            losses += "; " + "; ".join(self.restarts)
        return losses
