"""Which relay the coordinator tells a rank through: the relays the ranks named, those that died,
and one ``Fanout`` per relay for a round of tells.  No I/O: the coordinator tells, watches and logs.

A rank that named a relay at its join hears the coordinator only through it (``Fanout``), so it
hears it in the order told; once that relay is lost, directly.  Kinds a relay does not carry
(``ToRank`` lists those it does) go straight to the rank.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable
from typing import Literal, Protocol

from actorwire.messages import Fanout, Message
from actorwire.messages.kinds._control import ToRank

#: What a rank behind a relay is told through it (``Fanout.messages``).
FANNED = frozenset(typing.get_args(ToRank))


class Routed(Protocol):
    """A rank as routing sees it (the coordinator's ``RankState``)."""

    rank: int
    name: str
    relay: str


R = typing.TypeVar("R", bound=Routed)


@dataclasses.dataclass
class RelayFan(typing.Generic[R]):
    """One relay's share of a round: its ``Fanout``, and the tells it carries (told directly if the
    relay turns out to be gone)."""

    relay: str
    fanout: Fanout
    tells: list[tuple[R, Message]]


@dataclasses.dataclass
class Relays:
    """The relays ranks named (watched by the coordinator) and those lost."""

    watched: set[str] = dataclasses.field(default_factory=set)
    dead: set[str] = dataclasses.field(default_factory=set)

    def named(self, relay: str) -> Literal["use", "direct", "watch"]:
        """What to do with the relay a joining rank named: ``use`` it (none named, or one already
        watched), tell the rank ``direct`` (that relay died), or ``watch`` it first (then
        :meth:`watching`; a relay that cannot be watched is not there: direct)."""
        if not relay or relay in self.watched and relay not in self.dead:
            return "use"
        if relay in self.dead:
            return "direct"
        return "watch"

    def watching(self, relay: str) -> None:
        self.watched.add(relay)

    def is_relay(self, name: str) -> bool:
        return name in self.watched

    def fan(self, told: Iterable[tuple[R, Message]]) -> tuple[list[tuple[R, Message]], list[RelayFan[R]]]:
        """A round of tells split into those told directly (in order) and one ``Fanout`` per relay
        (one message when every rank behind it gets the same object)."""
        direct: list[tuple[R, Message]] = []
        fans: dict[str, list[tuple[R, Message]]] = {}
        for r, message in told:
            if not r.relay or type(message) not in FANNED:
                direct.append((r, message))
            else:
                fans.setdefault(r.relay, []).append((r, message))
        out = []
        for relay, tells in fans.items():
            first = tells[0][1]
            same = all(message is first for _, message in tells)
            out.append(RelayFan(relay, Fanout(ranks=[r.rank for r, _ in tells],
                                              messages=[first] if same else [m for _, m in tells]), tells))
        return direct, out

    def lost(self, relay: str, ranks: Iterable[R]) -> list[R] | None:
        """``relay`` died: the ranks behind it (each now told directly), or None when it was already
        counted lost."""
        if relay in self.dead:
            return None
        self.dead.add(relay)
        behind = [r for r in ranks if r.relay == relay]
        for r in behind:
            r.relay = ""
        return behind
