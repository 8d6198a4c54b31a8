"""The coordinator's roster: the ranks it knows, by number and by actor name, and who of them is in
the run.  A typed machine with no I/O and no clock.

Who is in the run is asked on nearly every message (each ``SyncAck``, each join, each tick), so the
answer is kept and built again only after a rank's ``alive``, ``exited`` or ``waiting`` changed:
each :class:`~._ledger.RankState` calls :meth:`Roster.changed` when one does.  Built per message,
it made every ``SyncAck`` and every join cost a sort of all ranks, quadratic in N; the list of live
ranks, sorted twice a tick, was 13% of the coordinator at 20,000 ranks (py-spy).
"""

from __future__ import annotations

from collections.abc import Callable

from actorwire.actors.control._ledger import RankState


class Roster:
    """Every rank the coordinator heard join (its latest incarnation), and who is in the run."""

    __slots__ = ("ranks", "by_name", "in_run", "_on_change", "_alive", "_alive_ids", "_live")

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self.ranks: dict[int, RankState] = {}
        self.by_name: dict[str, int] = {}  # actor name -> rank
        #: How many ranks are in the run (``len(alive())``), kept as ranks change: a join must not sort all.
        self.in_run = 0
        self._on_change = on_change  # what else depends on who is in the run (the sync gate)
        self._alive: list[RankState] | None = None
        self._alive_ids: frozenset[int] = frozenset()
        self._live: list[RankState] | None = None

    def add(self, r: RankState) -> None:
        """A rank joined: ``r`` is its incarnation from now on, counted as it changes.  An earlier
        incarnation still in the run must have been let go first (``alive = False``)."""
        self.ranks[r.rank] = r
        r.on_change = self.changed
        self.changed(r, False)
        self.by_name[r.name] = r.rank

    def of(self, name: str) -> RankState | None:
        """The rank whose actor is ``name``, if any."""
        rank = self.by_name.get(name)
        return None if rank is None else self.ranks.get(rank)

    def alive(self) -> list[RankState]:
        """The ranks in the run (alive, not left, not waiting for the next epoch), by number.  Kept
        until a rank changes: callers must not change the list."""
        cached = self._alive
        if cached is None:
            cached = self._alive = [self.ranks[k] for k in sorted(self.ranks) if self.ranks[k].in_run]
            self._alive_ids = frozenset(r.rank for r in cached)
        return cached

    def alive_ids(self) -> frozenset[int]:
        """The numbers of the ranks in the run."""
        self.alive()
        return self._alive_ids

    def reachable(self) -> list[RankState]:
        """Every live rank, by number, those waiting to take part included (they get heartbeats too)."""
        if self._live is None:
            self._live = [r for r in sorted(self.ranks.values(), key=lambda r: r.rank) if r.alive and not r.exited]
        return self._live

    def changed(self, r: RankState, was_in: bool) -> None:
        """``r``'s alive, exited or waiting changed (it was in the run before: ``was_in``)."""
        self._on_change()
        self._live = None
        if r.in_run != was_in:
            self._alive = None
            self.in_run += 1 if r.in_run else -1
