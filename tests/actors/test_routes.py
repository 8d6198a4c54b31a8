"""The coordinator's relay routing (``_routes.Relays``) on plain ranks: no actors, no sockets."""

from __future__ import annotations

import dataclasses

from actorwire import messages as m
from actorwire.actors.control._routes import FANNED, Relays


@dataclasses.dataclass
class Rank:
    rank: int
    relay: str = ""

    @property
    def name(self) -> str:
        return f"worker/{self.rank}"


def test_a_round_goes_in_one_fanout_per_relay_with_one_message_when_all_get_the_same() -> None:
    a, b, c, d = Rank(0, "relay/h0"), Rank(1, "relay/h0"), Rank(2, "relay/h1"), Rank(3)
    sync = m.SyncNow(cycle=4)
    direct, fans = Relays().fan([(a, sync), (b, sync), (c, sync), (d, sync)])
    assert direct == [(d, sync)]
    assert [(f.relay, f.fanout) for f in fans] == [("relay/h0", m.Fanout(ranks=[0, 1], messages=[sync])),
                                                   ("relay/h1", m.Fanout(ranks=[2], messages=[sync]))]
    assert fans[0].tells == [(a, sync), (b, sync)]  # told directly, in order, if the relay is gone


def test_different_messages_go_one_per_rank_in_the_order_told_and_unfanned_kinds_go_straight() -> None:
    a, b = Rank(0, "relay/h0"), Rank(1, "relay/h0")
    plans = [m.StartEpoch(epoch=1, partition_offset=0, partition_size=5),
             m.StartEpoch(epoch=1, partition_offset=5, partition_size=5)]
    accepted = m.JoinAccepted(rank=1, world_size=2)
    assert type(accepted) not in FANNED
    direct, fans = Relays().fan([(a, plans[0]), (b, accepted), (b, plans[1])])
    assert direct == [(b, accepted)]
    assert fans[0].fanout == m.Fanout(ranks=[0, 1], messages=plans)


def test_a_named_relay_is_watched_once_and_a_dead_one_is_never_used_again() -> None:
    relays = Relays()
    assert relays.named("") == "use"  # no relay: told directly, nothing to watch
    assert relays.named("relay/h0") == "watch"
    relays.watching("relay/h0")
    assert relays.named("relay/h0") == "use" and relays.is_relay("relay/h0")
    ranks = [Rank(0, "relay/h0"), Rank(1, "relay/h1"), Rank(2, "relay/h0")]
    behind = relays.lost("relay/h0", ranks)
    assert behind == [Rank(0), Rank(2)] and ranks[1].relay == "relay/h1"  # their relay cleared
    assert relays.lost("relay/h0", ranks) is None  # counted once
    assert relays.named("relay/h0") == "direct"  # a rank that names it later is told directly
