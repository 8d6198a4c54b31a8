"""The coordinator's relay routing (``_routes.Relays``) on plain ranks: no actors, no sockets."""

from __future__ import annotations

import dataclasses

from actorwire import messages as m
from actorwire.actors.control._routes import FANNED, Relays, sort_report


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
    assert fans[0].tells() == [(a, sync), (b, sync)]  # told directly, in order, if the relay is gone


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


def test_a_broadcast_splits_as_a_round_of_the_same_message_and_regroups_once_a_relay_is_lost() -> None:
    """``broadcast`` keeps its grouping with the list it was given (2.2 ms a broadcast to 10,000
    ranks through ``fan``, 0.025 ms kept); a relay's loss changes the ranks' routes: regrouped."""
    ranks = [Rank(0, "relay/h0"), Rank(1), Rank(2, "relay/h1"), Rank(3, "relay/h0")]
    relays = Relays()
    beat = m.CoordHeartbeat(seq=3)

    def split(direct: list[Rank], fans: list) -> tuple[list[int], list[tuple[str, m.Fanout, list[int]]]]:  # type: ignore[type-arg]
        return [r.rank for r in direct], [(f.relay, f.fanout, [r.rank for r in f.ranks]) for f in fans]

    direct, fans = relays.fan([(r, beat) for r in ranks])
    expected = split([r for r, _ in direct], fans)
    assert split(*relays.broadcast(ranks, beat)) == expected == ([1], [
        ("relay/h0", m.Fanout(ranks=[0, 3], messages=[beat]), [0, 3]),
        ("relay/h1", m.Fanout(ranks=[2], messages=[beat]), [2])])
    assert split(*relays.broadcast(ranks, beat)) == expected  # kept
    _, fans = relays.broadcast(ranks, beat)
    assert fans[0].tells() == [(ranks[0], beat), (ranks[3], beat)]  # to tell them directly
    relays.lost("relay/h0", ranks)
    assert split(*relays.broadcast(ranks, beat)) == ([0, 1, 3], [("relay/h1", m.Fanout(ranks=[2], messages=[beat]), [2])])
    accepted = m.JoinAccepted(rank=0, world_size=4)  # a kind no relay carries: every rank directly
    assert split(*relays.broadcast(ranks, accepted)) == ([0, 1, 2, 3], [])


def test_a_relays_report_is_taken_only_for_the_ranks_that_named_it() -> None:
    """A relay that speaks for a rank behind another relay, for one told directly, or for a rank
    that never joined, is lying: those entries are counted as forged and dropped, the rest kept in
    order (batch rows with their column index, beats, then acks and epoch reports)."""
    mine, other, direct = Rank(0, "relay/h0"), Rank(1, "relay/h1"), Rank(2)
    ranks = {0: mine, 1: other, 2: direct}
    ack, ack_other = m.SyncAck(rank=0, cycle=1, step_count=4), m.SyncAck(rank=1, cycle=1, step_count=4)
    metrics = m.MetricsMsg(rank=0, epoch=0, avg_loss=0.5, batches_processed=4, epoch_ms=9.0, samples_processed=40)
    report = m.RelayReport(ranks=[1, 0, 9], batch_ms=[1.0, 2.0, 3.0], data_ms=[0.0] * 3, step_counts=[3, 4, 5],
                           losses=[0.5] * 3, beats=[2, 0], acks=[ack_other, ack], metrics=[metrics])
    sorted_ = sort_report(report, "relay/h0", ranks)
    assert sorted_ is not None
    assert sorted_.rows == [(mine, 1)]
    assert sorted_.beats == [mine]
    assert sorted_.told == [(mine, ack), (mine, metrics)]
    assert sorted_.forged == 4  # rank 1's row, rank 9's row, rank 2's beat, rank 1's ack
    # A sender with no name speaks for no one, not even for ranks told directly (relay "").
    nameless = sort_report(m.RelayReport(beats=[2]), "", ranks)
    assert nameless is not None and (nameless.beats, nameless.forged) == ([], 1)


def test_a_relays_report_with_columns_of_different_lengths_is_not_taken_at_all() -> None:
    report = m.RelayReport(ranks=[0, 1], batch_ms=[1.0], data_ms=[0.0, 0.0], step_counts=[1, 1], losses=[0.1, 0.1])
    assert sort_report(report, "relay/h0", {0: Rank(0, "relay/h0"), 1: Rank(1, "relay/h0")}) is None
