"""Which relay the coordinator tells a rank through: the relays the ranks named, those that died,
and one ``Fanout`` per relay for a round of tells; and what of a relay's report the coordinator may
take (:func:`sort_report`).  No I/O: the coordinator tells, watches and logs.

A rank that named a relay at its join hears the coordinator only through it (``Fanout``), so it
hears it in the order told; once that relay is lost, directly.  Kinds a relay does not carry
(``ToRank`` lists those it does) go straight to the rank.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from actorwire.messages import Message
from actorwire.messages.kinds import Fanout, MetricsMsg, RelayReport, SyncAck
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
    """One relay's share of a round: its ``Fanout``, and the ranks it carries tells for (told
    directly if the relay turns out to be gone: :meth:`tells`)."""

    relay: str
    fanout: Fanout
    ranks: list[R]

    def tells(self) -> list[tuple[R, Message]]:
        """What the fan-out carried, rank by rank."""
        messages = self.fanout.messages
        if len(messages) == 1 and len(self.ranks) > 1:
            return [(r, messages[0]) for r in self.ranks]
        return list(zip(self.ranks, messages))


@dataclasses.dataclass
class Relays:
    """The relays ranks named (watched by the coordinator) and those lost."""

    watched: set[str] = dataclasses.field(default_factory=set)
    dead: set[str] = dataclasses.field(default_factory=set)
    #: Broadcasts' grouping of a rank list by relay, kept while the list object is the one given
    #: (the coordinator keeps its lists until the roster changes) and no relay was lost: a tick's
    #: heartbeats and each cycle's broadcasts to 10,000 ranks grouped them again each time (a
    #: quarter of the coordinator's thread in a py-spy of ``bench scale --workers 10000``).
    _grouped: dict[int, tuple[list[Any], list[Any], dict[str, tuple[list[int], list[Any]]]]] = \
        dataclasses.field(default_factory=dict)

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
        (one message when every rank behind it gets the same object).  One pass building each
        relay's columns (an epoch's plans are a tell per rank: 10,000 a round at 10,000 ranks)."""
        direct: list[tuple[R, Message]] = []
        fans: dict[str, tuple[list[int], list[Message], list[R]]] = {}
        fanned = FANNED
        for r, message in told:
            relay = r.relay
            if not relay or type(message) not in fanned:
                direct.append((r, message))
                continue
            group = fans.get(relay)
            if group is None:
                group = fans[relay] = ([], [], [])
            group[0].append(r.rank)
            group[1].append(message)
            group[2].append(r)
        out = []
        for relay, (ids, messages, members) in fans.items():
            first = messages[0]
            same = all(message is first for message in messages)
            out.append(RelayFan(relay, Fanout(ranks=ids, messages=[first] if same else messages), members))
        return direct, out

    def broadcast(self, ranks: list[R], message: Message) -> tuple[list[R], list[RelayFan[R]]]:
        """:meth:`fan` of one message to every rank of ``ranks`` (the same split, in the same order),
        grouped once per list: the caller must not change a list it passed (it makes a new one)."""
        if type(message) not in FANNED:
            return ranks, []
        grouped = self._grouped.get(id(ranks))
        if grouped is None or grouped[0] is not ranks:
            direct: list[R] = []
            by: dict[str, tuple[list[int], list[R]]] = {}
            for r in ranks:
                if r.relay:
                    ids, members = by.setdefault(r.relay, ([], []))
                    ids.append(r.rank)
                    members.append(r)
                else:
                    direct.append(r)
            if len(self._grouped) >= 4:
                self._grouped.clear()
            grouped = self._grouped[id(ranks)] = (ranks, direct, by)  # the list held: its id stays its own
        _, direct, by = grouped
        return direct, [RelayFan(relay, Fanout(ranks=ids, messages=[message]), members)
                        for relay, (ids, members) in by.items()]

    def lost(self, relay: str, ranks: Iterable[R]) -> list[R] | None:
        """``relay`` died: the ranks behind it (each now told directly), or None when it was already
        counted lost."""
        if relay in self.dead:
            return None
        self.dead.add(relay)
        self._grouped.clear()  # their relay changes below
        behind = [r for r in ranks if r.relay == relay]
        for r in behind:
            r.relay = ""
        return behind


@dataclasses.dataclass
class Sorted(typing.Generic[R]):
    """A relay's report, each entry with the rank it is for (:func:`sort_report`)."""

    rows: list[tuple[R, int]]  # a rank's batches, and the index of its row in the report's columns
    beats: list[R]  # ranks that only beat
    told: list[tuple[R, SyncAck | MetricsMsg]]  # the acks, then the epoch reports, in the report's order
    forged: int  # entries for ranks that did not name this relay in their join: dropped


def sort_report(report: RelayReport, relay: str, ranks: Mapping[int, R]) -> Sorted[R] | None:
    """What of ``report``, sent by ``relay``, the coordinator may take: an entry is taken only for a
    rank that named this relay in its join (the runtime proved the join came from that rank; a relay
    that speaks for any other rank, or a sender with no name, is lying).  None when the report's
    columns have different lengths: nothing of it is taken."""
    n = len(report.ranks)
    if not len(report.batch_ms) == len(report.data_ms) == len(report.step_counts) == len(report.losses) == n:
        return None
    if not relay:  # a sender with no name speaks for no rank (a rank with no relay has relay "")
        return Sorted([], [], [], n + len(report.beats) + len(report.acks) + len(report.metrics))
    # Below, the same test in each loop, inline: it runs once per entry of every report.
    out: Sorted[R] = Sorted([], [], [], 0)
    for i, rank in enumerate(report.ranks):
        r = ranks.get(rank)
        if r is None or r.relay != relay:
            out.forged += 1
        else:
            out.rows.append((r, i))
    for rank in report.beats:
        r = ranks.get(rank)
        if r is None or r.relay != relay:
            out.forged += 1
        else:
            out.beats.append(r)
    for told in (*report.acks, *report.metrics):
        r = ranks.get(told.rank)
        if r is None or r.relay != relay:
            out.forged += 1
        else:
            out.told.append((r, told))
    return out
