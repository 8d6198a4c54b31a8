"""Per-host relays: one report per interval instead of a message per batch, and no rank spoken for
without its say (on a virtual clock)."""

from __future__ import annotations

import pytest

from actorwire import messages as m
from actorwire.actors.control import Relay
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.control._rank import RankProtocol, Send
from actorwire.actors.control._relay import RelayBuffer
from actorwire.actors.testing import ActorHarness

RUN = "run-1"


def batch(rank: int, ms: float = 10.0) -> m.Batch:
    return m.Batch(rank=rank, batch_ms=ms, step_count=1, batch_loss=0.5, data_ms=1.0)


def test_a_buffer_reports_its_batches_in_order_and_its_beats_once() -> None:
    buf = RelayBuffer()
    assert buf.take() is None
    buf.batch(2, 10.0, 1, 0.5)
    buf.batch(1, 12.0, 7, 0.25, data_ms=2.0)
    buf.beat(1)  # said by its batch: not sent again
    buf.beat(3)
    buf.beat(3)
    report = buf.take()
    assert report == m.RelayReport(ranks=[2, 1], batch_ms=[10.0, 12.0], data_ms=[0.0, 2.0], step_counts=[1, 7],
                                   losses=[0.5, 0.25], beats=[3])
    assert buf.take() is None  # taken: the next report starts empty


def test_a_buffer_folds_a_ranks_batches_into_one_entry_and_a_rack_relay_folds_its_hosts_again() -> None:
    """At 100,000 ranks the coordinator's work per entry, not per message, filled it (simulate --scale):
    an entry per rank and report, counted by the rank's step count."""
    host = RelayBuffer()
    host.batch(5, 10.0, 3, 1.0)
    host.batch(6, 20.0, 1, 0.5)
    host.batch(5, 30.0, 4, 0.0, data_ms=2.0)
    report = host.take()
    assert report is not None
    assert report.ranks == [5, 6] and report.step_counts == [4, 1]
    assert report.batch_ms == [20.0, 20.0] and report.losses == [0.5, 0.5] and report.data_ms == [1.0, 0.0]
    rack = RelayBuffer()
    rack.take_report(report)
    rack.batch(5, 40.0, 5, 1.0)
    rack.take_report(m.RelayReport(beats=[6, 9], acks=[m.SyncAck(rank=9, step_count=2, cycle=1)]))
    folded = rack.take()
    assert folded is not None and folded.ranks == [5, 6] and folded.step_counts == [5, 1]
    assert folded.beats == [9] and [a.rank for a in folded.acks] == [9]


def relay() -> ActorHarness:
    h = ActorHarness(Relay(interval=0.1), name="relay/a", peers=["coordinator"])
    h.start()
    return h


def test_a_relay_tells_one_report_per_interval_and_nothing_when_it_heard_nothing() -> None:
    h = relay()
    assert h.advance(0.1) == []
    h.deliver(batch(3), sender="worker/3")
    h.deliver(batch(4), sender="worker/4")
    h.deliver(m.Heartbeat(rank=3, step_count=1), sender="worker/3/heartbeat")
    (out,) = h.advance(0.1)
    assert out.target == "coordinator"
    assert out.message == m.RelayReport(ranks=[3, 4], batch_ms=[10.0, 10.0], data_ms=[1.0, 1.0], step_counts=[1, 1],
                                        losses=[0.5, 0.5], beats=[])  # rank 3's batch says it is alive
    assert h.advance(0.1) == []


def test_a_relay_takes_a_ranks_reports_only_from_that_ranks_actor() -> None:
    h = relay()
    h.deliver(batch(3), sender="mallory")  # a local actor that would speak for rank 3
    h.deliver(batch(3), sender="worker/4")  # another rank
    h.deliver(m.Heartbeat(rank=3, step_count=1), sender="worker/4/heartbeat")
    assert h.advance(0.1) == []
    assert h.actor.refused == {"mallory": 1, "worker/4": 1, "worker/4/heartbeat": 1}


def test_a_relay_stops_when_the_coordinator_is_gone() -> None:
    h = relay()
    h.deliver(batch(3), sender="worker/3")
    h.down("coordinator")
    h.advance(0.1)
    assert h.ctx.stopped


def test_a_relay_refuses_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        Relay(interval=0)


# -- the coordinator's side ----------------------------------------------------------------


def coordinator(relays: dict[int, str]) -> ActorHarness:
    h = ActorHarness(Coordinator(world_size=3, run_id=RUN, num_epochs=1, dataset_size=300, batch_size=1,
                                 sync_every=2, staleness_timeout=3.0, tick_interval=1.0, metrics_sink="main",
                                 eval_every=0, final_eval=False),
                     name="coordinator", peers=["main", "relay/a", "relay/b"])
    h.start()
    for rank in range(3):
        assert h.ask(m.JoinRequest(rank=rank, world_size=3, run_id=RUN, model_signature="s",
                                   relay=relays.get(rank, "")), sender=f"worker/{rank}") \
            == m.JoinAccepted(rank=rank, world_size=3)
    for rank in range(3):  # the run's first sync: every rank takes rank 0's model
        h.deliver(m.SyncAck(rank=rank, step_count=0, covered=0, cycle=h.actor.sync.cycle), sender=f"worker/{rank}")
    h.take()
    return h


def told(out: list) -> list[tuple[str, m.Message]]:  # type: ignore[type-arg]
    """What the coordinator told each rank (``worker/R``), straight or in a relay's ``Fanout``."""
    pairs: list[tuple[str, m.Message]] = []
    for s in out:
        if isinstance(s.message, m.Fanout):
            one = len(s.message.messages) == 1
            pairs += [(f"worker/{r}", s.message.messages[0 if one else i]) for i, r in enumerate(s.message.ranks)]
        else:
            pairs.append((s.target, s.message))
    return pairs


def report(*ranks: int, beats: tuple[int, ...] = ()) -> m.RelayReport:
    n = len(ranks)
    # step count 0: "not said", each entry one batch (the counting by step count has its own test)
    return m.RelayReport(ranks=list(ranks), batch_ms=[10.0] * n, data_ms=[0.0] * n, step_counts=[0] * n,
                         losses=[0.5] * n, beats=list(beats))


def test_the_coordinator_counts_a_relayed_batch_as_it_counts_a_batch() -> None:
    h = coordinator({0: "relay/a", 1: "relay/a", 2: "relay/b"})
    h.advance(2.0)
    h.deliver(report(0, 0, 1, beats=(1,)), sender="relay/a")
    h.deliver(report(2), sender="relay/b")
    ranks = h.actor.ranks
    assert [ranks[r].total_steps for r in range(3)] == [2, 1, 1]
    assert all(ranks[r].last_seen == 2.0 for r in range(3))
    assert ranks[0].ms_per_batch == 10.0
    h.deliver(report(1, 2), sender="relay/a")  # rank 2 named relay/b: only rank 1 is taken
    h.deliver(report(2), sender="relay/b")
    out = h.take()
    assert {t for t, msg in told(out) if isinstance(msg, m.SyncNow)} == {"worker/0", "worker/1", "worker/2"}
    # one SyncNow for each relay's ranks
    assert sorted((s.target, s.message.ranks) for s in out if isinstance(s.message, m.Fanout)
                  and isinstance(s.message.messages[0], m.SyncNow)) == [("relay/a", [0, 1]), ("relay/b", [2])]


def test_a_relay_cannot_speak_for_a_rank_that_did_not_name_it() -> None:
    """An admitted peer registers a relay and reports batches for every rank: nothing is counted."""
    h = coordinator({0: "relay/a"})
    h.deliver(report(0, 1, 2, beats=(1, 2)), sender="relay/b")  # nobody named relay/b
    h.deliver(report(1, 2), sender="relay/a")  # ranks 1 and 2 report straight to the coordinator
    assert [h.actor.ranks[r].total_steps for r in range(3)] == [0, 0, 0]
    assert h.actor.refused[("relay_report", "reports for ranks that did not name it as their relay")] == 7


def test_a_rank_counted_dead_that_speaks_through_its_relay_is_told_to_leave() -> None:
    """Its batches and beats came through the relay, and the coordinator dropped them without a word:
    it was never told to leave, as it is when it speaks to the coordinator itself."""
    h = coordinator({0: "relay/a", 1: "relay/a"})
    h.down("worker/1", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    h.down("worker/0", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    h.take()
    h.deliver(report(1, beats=(0,)), sender="relay/a")
    h.deliver(report(1, beats=(0,)), sender="relay/a")
    evicted = sorted((t, type(msg).__name__) for t, msg in told(h.take()) if isinstance(msg, m.Evicted))
    assert evicted == [("worker/0", "Evicted"), ("worker/1", "Evicted")]  # each once
    assert h.actor.ranks[1].total_steps == 0


def test_a_report_with_columns_of_different_lengths_is_refused_whole() -> None:
    h = coordinator({0: "relay/a"})
    bad = m.RelayReport(ranks=[0, 0], batch_ms=[10.0], data_ms=[0.0, 0.0], step_counts=[1, 1], losses=[0.5, 0.5])
    h.deliver(bad, sender="relay/a")
    assert h.actor.ranks[0].total_steps == 0
    assert h.actor.refused[("relay_report", "its columns have different lengths")] == 2


def test_a_relayed_heartbeat_is_taken_before_the_run_starts_and_a_batch_is_not() -> None:
    h = ActorHarness(Coordinator(world_size=2, run_id=RUN, num_epochs=1, dataset_size=20, batch_size=1,
                                 staleness_timeout=3.0, tick_interval=1.0), name="coordinator", peers=["relay/a"])
    h.start()
    h.ask(m.JoinRequest(rank=0, world_size=2, run_id=RUN, relay="relay/a"), sender="worker/0")
    h.advance(2.0)
    h.deliver(report(0, beats=(0,)), sender="relay/a")
    assert h.actor.ranks[0].last_seen == 2.0 and h.actor.ranks[0].total_steps == 0


# -- the rank's side -----------------------------------------------------------------------


def test_a_rank_with_a_relay_names_it_in_its_join_and_sends_its_batches_there() -> None:
    p = RankProtocol(0, 1, relay="relay/a")
    assert p.join_request(run_id=RUN, model_signature="s").relay == "relay/a"
    assert p.reports_to == "relay/a"
    p.join_reply(m.JoinAccepted(rank=0, world_size=1), now=0.0)
    effects = p.batch_done(1.0, 10.0, 0.5)
    assert [(type(e.message), e.to) for e in effects if isinstance(e, Send)] == [(m.Batch, "relay/a")]
    assert RankProtocol(0, 1).reports_to == "coordinator"


def test_a_rank_whose_relay_is_gone_reports_to_the_coordinator_itself() -> None:
    """A relay's death ended every rank behind it: a tell to the relay that failed was taken for the
    coordinator's death (the rank left the run, its batches and heartbeats lost with the relay)."""
    p = RankProtocol(0, 1, relay="relay/a")
    p.join_reply(m.JoinAccepted(rank=0, world_size=1), now=0.0)
    assert p.receive(m.Down(name="somebody/else", reason=m.DownReason.EXITED), now=0.5) == []
    effects = p.receive(m.Down(name="relay/a", reason=m.DownReason.DEAD), now=1.0)
    assert [type(e).__name__ for e in effects] == ["Log"] and p.ended is None and p.failure is None
    assert p.reports_to == "coordinator" and p.relay == ""
    sends = [e for e in p.batch_done(2.0, 10.0, 0.5) if isinstance(e, Send)]
    assert [(type(e.message), e.to) for e in sends] == [(m.Batch, "")]  # "" is the coordinator
    assert p.relay_gone("again") == []  # said once


def _train_behind_a_relay(system, stop_relay_after_epoch_0: bool = False, sink: str = ""):  # type: ignore[no-untyped-def]
    """A coordinator, a relay ``relay/h0`` and one real Worker behind it on ``system``, trained three
    epochs (the relay stopped after the first, if asked); the Worker not finished yet.  Returns the
    coordinator, the worker and the epochs it trained."""
    from actorwire.actors.control._coordinator import Coordinator
    from actorwire.actors.control._relay import Relay
    from actorwire.actors.control._worker import Worker

    coordinator = Coordinator(world_size=1, run_id=system.run_id, num_epochs=3, dataset_size=32, batch_size=4,
                              sync_every=2, eval_every=0, final_eval=False, metrics_sink=sink)
    system.spawn(coordinator, "coordinator")
    system.spawn(Relay(interval=0.05), "relay/h0")
    worker = Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10, relay="relay/h0")
    epochs = []
    while (plan := worker.next_plan(timeout=20)) is not None:
        for _ in worker.batches(plan, 4):
            worker.report_timing(batch_ms=1.0, batch_loss=0.5)
        worker.report_epoch(plan)
        epochs.append(plan.epoch)
        if stop_relay_after_epoch_0 and plan.epoch == 0:
            system.stop("relay/h0")
    return coordinator, worker, epochs


def test_a_worker_whose_relay_stops_mid_run_trains_every_epoch(system) -> None:  # type: ignore[no-untyped-def]
    """The real runtime: the relay actor stops after the first epoch; the rank's next report to it
    fails, it reports to the coordinator itself, and the run ends cleanly."""
    _, worker, epochs = _train_behind_a_relay(system, stop_relay_after_epoch_0=True)
    worker.finish()
    assert epochs == [0, 1, 2] and worker.protocol.relay == ""


def test_batches_a_relay_still_holds_are_counted_when_the_ranks_metrics_say_so_and_never_twice() -> None:
    """Counted one per report, a relay's batches came after the rank's MetricsMsg (straight to the
    coordinator): the epoch was closed and the run ended before a sync covered them, and the ranks
    finished with different parameters (the simulator with relays, 252 of 500 seeds)."""
    h = coordinator({0: "relay/a", 1: "relay/a"})
    h.advance(2.0)
    ranks = h.actor.ranks
    h.deliver(m.RelayReport(ranks=[0, 0], batch_ms=[10.0] * 2, data_ms=[0.0] * 2, step_counts=[1, 2], losses=[0.5] * 2,
                            beats=[]), sender="relay/a")
    assert ranks[0].total_steps == 2
    h.deliver(m.MetricsMsg(rank=0, epoch=0, avg_loss=0.5, batches_processed=5, epoch_ms=50.0, samples_processed=5,
                           step_count=5), sender="worker/0")
    assert ranks[0].total_steps == 5 and ranks[0].steps_since_sync == 5  # 3 the relay still holds
    h.deliver(m.RelayReport(ranks=[0, 0, 0], batch_ms=[10.0] * 3, data_ms=[0.0] * 3, step_counts=[3, 4, 5],
                            losses=[0.5] * 3, beats=[]), sender="relay/a")
    assert ranks[0].total_steps == 5  # not twice
    h.deliver(m.Batch(rank=0, batch_ms=10.0, step_count=6, batch_loss=0.5), sender="worker/0")
    assert ranks[0].total_steps == 6


def test_a_failed_send_ends_the_run_only_when_it_was_to_the_coordinator() -> None:
    p = RankProtocol(0, 1, relay="relay/a")
    p.join_reply(m.JoinAccepted(rank=0, world_size=1), now=0.0)
    batch = m.Batch(rank=0, batch_ms=1.0, step_count=1, batch_loss=0.5)
    effects = p.send_failed("relay/a", batch, "actor 'relay/a' is exited")
    assert [e for e in effects if isinstance(e, Send)] == [Send(batch)] and p.ended is None
    p.send_failed("", batch, "actor 'coordinator' is dead")
    assert p.failure is not None and "coordinator is gone" in p.failure


# -- the coordinator tells the ranks through their relays (a control plane that scales with hosts) --


def relay_of(*ranks: int) -> ActorHarness:
    h = ActorHarness(Relay(interval=0.1), name="relay/a", peers=["coordinator", *(f"worker/{r}" for r in ranks)])
    h.start()
    return h


def test_a_relay_tells_each_rank_what_the_coordinator_fanned_out_in_order() -> None:
    h = relay_of(3, 4)
    h.deliver(m.Fanout(ranks=[3, 4], messages=[m.SyncNow(cycle=2)]), sender="coordinator")
    h.deliver(m.Fanout(ranks=[3, 4], messages=[m.StartEpoch(epoch=1, partition_offset=0, partition_size=5),
                                               m.StartEpoch(epoch=1, partition_offset=5, partition_size=5)]),
              sender="coordinator")
    out = [(s.target, s.message) for s in h.take()]
    assert out == [("worker/3", m.SyncNow(cycle=2)), ("worker/4", m.SyncNow(cycle=2)),
                   ("worker/3", m.StartEpoch(epoch=1, partition_offset=0, partition_size=5)),
                   ("worker/4", m.StartEpoch(epoch=1, partition_offset=5, partition_size=5))]


def test_a_relay_takes_a_fanout_only_from_its_coordinator_and_only_with_matching_lists() -> None:
    """A local actor must not speak for the coordinator through the relay."""
    h = relay_of(3, 4)
    h.deliver(m.Fanout(ranks=[3], messages=[m.Shutdown()]), sender="mallory")
    h.deliver(m.Fanout(ranks=[3, 4, 5], messages=[m.Shutdown(), m.Shutdown()]), sender="coordinator")
    assert h.take() == []
    assert h.actor.refused == {"mallory": 1, "coordinator": 1}


def test_a_relay_reports_its_hosts_acks_at_once_when_every_rank_told_the_sync_acked() -> None:
    h = relay_of(3, 4)
    h.deliver(m.Fanout(ranks=[3, 4], messages=[m.SyncNow(cycle=2)]), sender="coordinator")
    h.take()
    ack3, ack4 = (m.SyncAck(rank=r, step_count=5, covered=10, cycle=2) for r in (3, 4))
    h.deliver(ack3, sender="worker/3")
    assert h.take() == []  # rank 4 still owes its ack: it waits (at most the interval)
    h.deliver(m.SyncAck(rank=4, step_count=5, cycle=2), sender="worker/3")  # not rank 4's actor
    assert h.take() == []
    h.deliver(ack4, sender="worker/4")
    (out,) = h.take()
    assert out.target == "coordinator" and out.message.acks == [ack3, ack4]


def test_a_relay_reports_its_hosts_epoch_reports_at_once_when_every_rank_with_a_plan_reported() -> None:
    h = relay_of(3, 4)
    h.deliver(m.Fanout(ranks=[3, 4], messages=[m.StartEpoch(epoch=0, partition_offset=0, partition_size=5),
                                               m.StartEpoch(epoch=0, partition_offset=5, partition_size=5)]),
              sender="coordinator")
    h.take()
    reports = [m.MetricsMsg(rank=r, epoch=0, avg_loss=0.5, batches_processed=5, epoch_ms=10.0, samples_processed=5,
                            step_count=5, seq=1) for r in (3, 4)]
    h.deliver(reports[0], sender="worker/3")
    assert h.take() == []
    h.deliver(reports[1], sender="worker/4")
    (out,) = h.take()
    assert out.message.metrics == reports
    h.deliver(m.Fanout(ranks=[3], messages=[m.SyncNow(cycle=3)]), sender="coordinator")
    h.take()
    h.deliver(m.SyncAck(rank=3, step_count=5, cycle=3), sender="worker/3")  # no plan owed: the ack completes it
    assert len(h.take()) == 1


def test_the_coordinator_tells_ranks_behind_a_relay_in_one_fanout_per_relay() -> None:
    """At 10,000 ranks every SyncNow, SetGlobalStep, StartEpoch and EpochAggregated was a message per
    rank through the coordinator's process (bench scale: 0.86 of the batch rate)."""
    h = coordinator({0: "relay/a", 1: "relay/a"})
    h.advance(2.0)
    h.deliver(report(0, 0, 1, 1), sender="relay/a")
    h.deliver(m.Batch(rank=2, batch_ms=10.0, step_count=2, batch_loss=0.5), sender="worker/2")
    h.deliver(m.Batch(rank=2, batch_ms=10.0, step_count=2, batch_loss=0.5), sender="worker/2")
    out = h.take()
    fans = [s for s in out if isinstance(s.message, m.Fanout) and isinstance(s.message.messages[0], m.SyncNow)]
    assert [(s.target, s.message.ranks, len(s.message.messages)) for s in fans] == [("relay/a", [0, 1], 1)]
    assert [s.target for s in out if isinstance(s.message, m.SyncNow)] == ["worker/2"]  # no relay: straight


def test_a_relayed_ack_and_epoch_report_count_as_the_ranks_own_and_a_forged_one_does_not() -> None:
    h = ActorHarness(Coordinator(world_size=2, run_id=RUN, num_epochs=1, dataset_size=4, batch_size=1, sync_every=100,
                                 eval_every=0, final_eval=False, tick_interval=1.0, metrics_sink="main",
                                 form_group=False),
                     name="coordinator", peers=["main", "relay/a", "relay/b"])
    h.start()
    for rank in range(2):
        h.ask(m.JoinRequest(rank=rank, world_size=2, run_id=RUN, relay="relay/a"), sender=f"worker/{rank}")
    cycle = h.actor.sync.cycle
    forged = m.RelayReport(acks=[m.SyncAck(rank=r, step_count=0, covered=0, cycle=cycle) for r in (0, 1)])
    h.deliver(forged, sender="relay/b")  # nobody named relay/b
    assert h.actor.sync.in_progress
    h.deliver(m.RelayReport(acks=forged.acks), sender="relay/a")
    assert not h.actor.sync.in_progress  # the run's first sync closed
    h.take()
    reports = [m.MetricsMsg(rank=r, epoch=0, avg_loss=0.5, batches_processed=2, epoch_ms=1.0, samples_processed=2,
                            step_count=2, seq=1) for r in (0, 1)]
    h.deliver(m.RelayReport(ranks=[0, 0, 1, 1], batch_ms=[1.0] * 4, data_ms=[0.0] * 4, step_counts=[1, 2, 1, 2],
                            losses=[0.5] * 4, metrics=reports), sender="relay/a")
    out = h.take()
    assert [s.message.messages[0] for s in out if isinstance(s.message, m.Fanout)] == [m.SyncNow(cycle=cycle + 1)]
    assert sorted(h.actor.reports.by_epoch[0]) == [0, 1]
    assert h.actor.refused[("relay_report", "reports for ranks that did not name it as their relay")] == 2


def test_a_report_told_again_after_the_relay_died_is_counted_once_in_any_phase() -> None:
    h = coordinator({0: "relay/a"})
    h.actor.epoch = 0
    once = m.MetricsMsg(rank=0, epoch=0, avg_loss=0.5, batches_processed=1, epoch_ms=1.0, samples_processed=1,
                        step_count=1, seq=1)
    h.deliver(m.RelayReport(metrics=[once]), sender="relay/a")
    h.deliver(once, sender="worker/0")  # sent again: the rank does not know whether the relay passed it on
    assert h.actor.reports.by_epoch[0][0] == once and h.actor.ranks[0].metrics_seq == 1
    assert not h.actor.refused_from_live


def test_a_relays_death_makes_the_coordinator_tell_its_ranks_directly_what_it_may_have_lost() -> None:
    h = coordinator({0: "relay/a", 1: "relay/a"})
    h.advance(2.0)
    h.deliver(report(0, 0, 1, 1), sender="relay/a")
    h.deliver(m.Batch(rank=2, batch_ms=10.0, step_count=2, batch_loss=0.5), sender="worker/2")
    h.deliver(m.Batch(rank=2, batch_ms=10.0, step_count=2, batch_loss=0.5), sender="worker/2")
    h.take()  # the SyncNow of the cycle in progress went to relay/a, which dies with it
    out = h.down("relay/a", m.DownReason.DEAD, "status -9")
    again = [(s.target, s.message) for s in out]
    plan0 = m.StartEpoch(epoch=0, partition_offset=0, partition_size=100)
    assert ("worker/0", plan0) in again and ("worker/0", h.actor.sync_said) in again
    assert ("worker/1", h.actor.sync_said) in again
    assert all(target.startswith("worker/") for target, _ in again)
    assert [r.relay for r in h.actor.ranks.values()] == ["", "", ""]
    h.deliver(report(0), sender="relay/a")  # a late report of the dead relay is not taken
    assert h.actor.ranks[0].total_steps == 2


def test_a_rank_with_a_relay_acks_and_reports_through_it_and_says_them_again_when_it_dies() -> None:
    p = RankProtocol(0, 1, relay="relay/a")
    p.join_reply(m.JoinAccepted(rank=0, world_size=1), now=0.0)
    (reduce,) = p.receive(m.SyncNow(cycle=1, source=0), now=0.1)
    (ack,) = p.sync_done(reduce.cycle, None, now=0.2, covered=0)
    assert isinstance(ack, Send) and ack.to == "relay/a" and isinstance(ack.message, m.SyncAck)
    p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=2), now=0.3)
    p.start_plan(0.3)
    p.batch_done(0.4, 1.0, 0.5)
    (report,) = p.report_epoch(0.5)
    assert isinstance(report, Send) and report.to == "relay/a" and report.message.seq == 1
    effects = p.receive(m.Down(name="relay/a", reason=m.DownReason.DEAD), now=1.0)
    assert [(e.message, e.to) for e in effects if isinstance(e, Send)] == [(ack.message, ""), (report.message, "")]
    # What the coordinator told again after the relay died is taken once.
    assert p.receive(m.SyncNow(cycle=1, source=0), now=1.1) == []
    assert p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=2), now=1.1) == [] and not p.plans
    p.receive(m.ExtendPartition(partition_offset=7, partition_size=1, epoch=0), now=1.2)
    p.receive(m.ExtendPartition(partition_offset=7, partition_size=1, epoch=0), now=1.2)
    assert len(p.plans) == 1
    agg = m.EpochAggregated(metrics=m.EpochMetrics(epoch=0, avg_loss=0.5, epoch_ms=1.0))
    p.receive(agg, now=1.3)
    p.receive(agg, now=1.3)
    assert len(p.aggregated) == 1


def test_a_rank_whose_relay_is_up_says_nothing_again_once_the_cycle_closed_and_the_epoch_aggregated() -> None:
    p = RankProtocol(0, 1, relay="relay/a")
    p.join_reply(m.JoinAccepted(rank=0, world_size=1), now=0.0)
    (reduce,) = p.receive(m.SyncNow(cycle=1, source=0), now=0.1)
    p.sync_done(reduce.cycle, None, now=0.2, covered=0)
    p.receive(m.SetGlobalStep(global_step=0), now=0.3)
    p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=1), now=0.3)
    p.start_plan(0.3)
    p.batch_done(0.4, 1.0, 0.5)
    p.report_epoch(0.5)
    p.receive(m.EpochAggregated(metrics=m.EpochMetrics(epoch=0, avg_loss=0.5, epoch_ms=1.0)), now=0.6)
    effects = p.receive(m.Down(name="relay/a", reason=m.DownReason.DEAD), now=1.0)
    assert [e for e in effects if isinstance(e, Send)] == []


def test_a_rank_that_acked_the_cycle_in_progress_is_told_neither_it_nor_a_global_step_when_its_relay_dies() -> None:
    """A global step told while a cycle runs is short of what the ranks that acked already averaged
    (simulator --relays seeds 14989 and 19662: SetGlobalStep(94) after a reduce that covered 99)."""
    h = coordinator({0: "relay/a", 1: "relay/a"})
    h.advance(2.0)
    h.deliver(report(0, 0, 1, 1), sender="relay/a")
    h.deliver(m.Batch(rank=2, batch_ms=10.0, step_count=2, batch_loss=0.5), sender="worker/2")
    h.deliver(m.Batch(rank=2, batch_ms=10.0, step_count=2, batch_loss=0.5), sender="worker/2")
    cycle = h.actor.sync.cycle
    assert h.actor.sync.in_progress
    h.deliver(m.RelayReport(acks=[m.SyncAck(rank=0, step_count=2, covered=6, cycle=cycle)]), sender="relay/a")
    h.take()
    again = [(s.target, s.message) for s in h.down("relay/a", m.DownReason.DEAD, "status -9")]
    assert [type(msg).__name__ for target, msg in again if target == "worker/0"] == ["StartEpoch"]
    assert [type(msg).__name__ for target, msg in again if target == "worker/1"] == ["StartEpoch", "SyncNow"]


def test_a_rank_waiting_to_rejoin_is_not_told_the_cycle_in_progress_when_its_relay_dies() -> None:
    """A restarted rank waits for the next epoch outside the group, and a cycle's ``SyncNow`` goes
    only to the ranks in the run.  When its relay died, the coordinator told it the cycle in
    progress all the same: it would enter an all-reduce of a group it is not in."""
    h = coordinator({0: "relay/a", 1: "relay/a"})
    h.advance(2.0)
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.take()
    assert h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="s", relay="relay/a"),
                 sender="worker/1") == m.JoinAccepted(rank=1, world_size=3)
    assert h.actor.ranks[1].waiting
    h.deliver(report(0, 0), sender="relay/a")
    for _ in range(3):
        h.deliver(m.Batch(rank=2, batch_ms=10.0, step_count=2, batch_loss=0.5), sender="worker/2")
    assert h.actor.sync.in_progress
    assert "worker/1" not in [t for t, msg in told(h.take()) if isinstance(msg, m.SyncNow)]
    again = told(h.down("relay/a", m.DownReason.DEAD, "status -9"))
    assert [type(msg).__name__ for target, msg in again if target == "worker/0"] == [
        "StartEpoch", "ExtendPartition", "SyncNow"]
    assert not [msg for target, msg in again if target == "worker/1" and isinstance(msg, m.SyncNow)]


def test_a_worker_behind_a_live_relay_hears_the_coordinator_through_it_and_finishes_whole(system) -> None:  # type: ignore[no-untyped-def]
    """The real runtime, the relay alive all along: the plans, syncs and the end reach the rank in the
    relay's Fanout, its acks and reports come in the relay's report, and every epoch is trained.
    (One rank: a Worker owns its process's runtime, and finish() shuts it down.)"""
    sink = system.inbox("main")
    coordinator, worker, epochs = _train_behind_a_relay(system, sink="main")
    # Never fell back: the relay carried it all (asked before finish(), whose Exiting lets the
    # coordinator stop, and the relay after it).
    assert worker.protocol.relay == "relay/h0" and coordinator.ranks[0].relay == "relay/h0"
    aggregates = []  # the metrics sink's, with the per-rank lists (read before finish() closes the runtime)
    while len(aggregates) < 3 and (got := sink.get(timeout=10)) is not None:
        if isinstance(got.message, m.EpochMetrics):
            aggregates.append(got.message)
    worker.finish()
    assert epochs == [0, 1, 2]
    assert [h.epoch for h in coordinator.reports.history] == [0, 1, 2]
    assert [a.epoch for a in aggregates] == [0, 1, 2] and sum(aggregates[-1].per_rank_samples) == 32
    assert not coordinator.refused_from_live and not coordinator.relays.dead
