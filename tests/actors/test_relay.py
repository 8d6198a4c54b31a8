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
    buf.beat(1)
    buf.beat(1)
    report = buf.take()
    assert report == m.RelayReport(ranks=[2, 1], batch_ms=[10.0, 12.0], data_ms=[0.0, 2.0], step_counts=[1, 7],
                                   losses=[0.5, 0.25], beats=[1])
    assert buf.take() is None  # taken: the next report starts empty


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
                                        losses=[0.5, 0.5], beats=[3])
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
    assert {s.target for s in out if isinstance(s.message, m.SyncNow)} == {"worker/0", "worker/1", "worker/2"}


def test_a_relay_cannot_speak_for_a_rank_that_did_not_name_it() -> None:
    """An admitted peer registers a relay and reports batches for every rank: nothing is counted."""
    h = coordinator({0: "relay/a"})
    h.deliver(report(0, 1, 2, beats=(1, 2)), sender="relay/b")  # nobody named relay/b
    h.deliver(report(1, 2), sender="relay/a")  # ranks 1 and 2 report straight to the coordinator
    assert [h.actor.ranks[r].total_steps for r in range(3)] == [0, 0, 0]
    assert h.actor.refused[("relay_report", "reports for ranks that did not name it as their relay")] == 7


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


def test_a_worker_whose_relay_stops_mid_run_trains_every_epoch(system) -> None:  # type: ignore[no-untyped-def]
    """The real runtime: the relay actor stops after the first epoch; the rank's next report to it
    fails, it reports to the coordinator itself, and the run ends cleanly."""
    from actorwire.actors.control._coordinator import Coordinator
    from actorwire.actors.control._relay import Relay
    from actorwire.actors.control._worker import Worker

    system.spawn(Coordinator(world_size=1, run_id=system.run_id, num_epochs=3, dataset_size=32, batch_size=4,
                             sync_every=2, eval_every=0, final_eval=False), "coordinator")
    system.spawn(Relay(interval=0.05), "relay/h0")
    worker = Worker(system=system, rank=0, world_size=1, model_signature="s", join_timeout=10, relay="relay/h0")
    epochs = []
    while (plan := worker.next_plan(timeout=20)) is not None:
        for _ in worker.batches(plan, 4):
            worker.report_timing(batch_ms=1.0, batch_loss=0.5)
        worker.report_epoch(plan)
        epochs.append(plan.epoch)
        if plan.epoch == 0:
            system.stop("relay/h0")
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
