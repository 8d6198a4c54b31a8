"""The coordinator's group formation, as a machine: no I/O, the clock passed in.

After a loss (or a rejoin) the survivors form a new process group: the coordinator asks the
fastest untried survivor for a new group id (``RequestNewNcclId``), sends every survivor the session
(``NewNcclSession``, numbered by ``attempt``), and when members report that the formation failed
(``SessionFailed``) it forms it again, once every member of the failed attempt has given up (or
``rendezvous_timeout`` passed since the first did).  This object keeps that state and decides; the
coordinator sends the messages.  Tests: tests/actors/test_groups.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from actorwire.actors.control._ledger import RankState, by_speed

#: Rounds of asking every survivor for a group id before the run gives up.
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Rendezvous:
    """One search for a rank to make a new group's id: the rank asked, since when, every rank asked
    in this round, and the round (each round waits twice as long as the one before)."""

    generator: int
    since: float
    tried: frozenset[int]
    round: int = 0

    @property
    def attempt(self) -> int:
        """How many ranks were asked before the generator in this round (``RequestNewNcclId.attempt``)."""
        return len(self.tried) - 1


class NoGenerator:
    """``GroupFormation.ask`` found nobody left to ask: every survivor was asked in every round."""


NO_GENERATOR = NoGenerator()


@dataclasses.dataclass(eq=False)
class GroupFormation:
    rendezvous_timeout: float
    #: The search for a group id in progress, if any.
    search: Rendezvous | None = None
    #: The last session sent (``NewNcclSession.attempt``), and the last whose failure started a new one.
    attempt: int = 0
    reformed_after: int = -1
    #: The ranks of the session last sent, those that said it failed, and since when.
    members: set[int] = dataclasses.field(default_factory=set)
    failed: set[int] = dataclasses.field(default_factory=set)
    failed_since: float | None = None
    #: Since when the run waits for a new group (a loss or a rejoin), and the attempt then: the first
    #: sync completed on a later session is the group formed again.
    regroup: tuple[float, int] | None = None

    def searching(self, ranks: Mapping[int, RankState]) -> bool:
        """A search is in progress and its generator is alive."""
        if self.search is None:
            return False
        generator = ranks.get(self.search.generator)
        return generator is not None and generator.alive

    def ask(self, survivors: list[RankState], ranks: Mapping[int, RankState], now: float, *,
            fresh: bool = False, move_on: bool = False) -> RankState | NoGenerator | None:
        """The rank to ask for a new group id (the search now names it); None when the search in
        progress stands (its generator is alive: one attempt at a time, made for the survivors of
        that moment); ``NO_GENERATOR`` when every survivor was asked in every round.  ``fresh``:
        forget who was tried; ``move_on``: the current generator is silent, go to the next one."""
        if not survivors:
            return None
        if not fresh and not move_on and self.searching(ranks):
            return None
        tried = set(self.search.tried) if self.search and not fresh else set()
        rounds = self.search.round if self.search and not fresh else 0
        candidates = [r for r in by_speed(survivors) if r.rank not in tried]
        if not candidates and rounds + 1 < ROUNDS:
            # Every survivor was asked and none answered in time: under load (or while a rank still
            # sits in the last formation's timeout) it may yet.  Ask them all again, waiting twice
            # as long (simulator: the only survivor was blocked in a formation that waited for a
            # stopped peer, and the run ended).
            rounds, tried = rounds + 1, set()
            candidates = by_speed(survivors)
        if not candidates:
            return NO_GENERATOR
        generator = candidates[0]
        self.search = Rendezvous(generator=generator.rank, since=now, tried=frozenset(tried | {generator.rank}),
                                 round=rounds)
        return generator

    def timed_out(self, ranks: Mapping[int, RankState], now: float) -> bool:
        """The search's generator is gone or silent past its round's wait."""
        rv = self.search
        if rv is None:
            return False
        generator = ranks.get(rv.generator)
        return generator is None or not generator.alive or now - rv.since > self.rendezvous_timeout * 2 ** rv.round

    def session_failed(self, rank: int, attempt: int, now: float) -> bool:
        """A member said ``attempt`` failed; whether that may start a new formation (False for a report
        of a superseded attempt, or of one a new formation already answers)."""
        if attempt < self.attempt or attempt <= self.reformed_after:
            return False
        if attempt == self.attempt:
            self.failed.add(rank)
            if self.failed_since is None:
                self.failed_since = now
        return True

    def reform(self, ranks: Mapping[int, RankState], alive: frozenset[int], now: float) -> set[int] | None:
        """Whether to form the group again now: once every live member of the failed attempt said it
        failed, or ``rendezvous_timeout`` passed since the first did.  Re-formed at the first report,
        the members still inside the attempt's formation (it blocks until its timeout) joined the
        next a timeout late, the early ones timed out of it waiting for them, and so on for good
        (the fault matrix's join-hang case).  Returns the members not heard from (the search is
        dropped: the caller asks afresh), or None."""
        if self.failed_since is None or self.searching(ranks):
            return None  # nothing failed, or a formation already in progress answers this report too
        waiting = (self.members & alive) - self.failed
        if waiting and now - self.failed_since < self.rendezvous_timeout:
            return None
        self.reformed_after = self.attempt
        self.failed_since = None
        self.search = None
        return waiting

    def session(self, survivors: list[RankState]) -> int:
        """A new session for ``survivors`` (the search answered); its attempt number."""
        self.attempt += 1
        self.members = {s.rank for s in survivors}
        self.failed = set()
        self.failed_since = None
        self.search = None
        return self.attempt

    def lost(self, now: float) -> None:
        """A rank was lost or rejoined: the run waits for a new group from now (if not already)."""
        if self.regroup is None:
            self.regroup = (now, self.attempt)

    def formed_again(self, now: float) -> float | None:
        """A sync completed: the seconds since the loss when it completed on a group formed after
        it (and the wait is over), else None."""
        if self.regroup is None or self.attempt <= self.regroup[1]:
            return None
        seconds = now - self.regroup[0]
        self.regroup = None
        return seconds

    def restarted(self) -> None:
        """A whole-group restart: no session of the old group counts."""
        self.members, self.failed, self.failed_since = set(), set(), None
