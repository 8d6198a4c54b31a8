"""The rank protocol, sans-IO: every input on a virtual clock, every decision read from its effects."""

from __future__ import annotations

import pytest

from actorwire import messages as m
from actorwire.actors.control import _rank, _rank_effects
from actorwire.actors.control._rank import (
    AbortGroup,
    AllReduce,
    Ended,
    Evaluate,
    FormGroup,
    MakeGroupId,
    RankProtocol,
    RunEpochFn,
    SaveCheckpoint,
    Send,
    WorkerError,
)


def _joined(**kw: float) -> RankProtocol:
    p = RankProtocol(1, 2, **kw)
    p.join_reply(m.JoinAccepted(rank=1, world_size=2), now=0.0)
    return p


def _sent(effects: list[_rank.Effect]) -> list[m.Message]:
    return [e.message for e in effects if isinstance(e, Send)]


def _kinds(effects: list[_rank.Effect]) -> list[str]:
    return [type(e).__name__ for e in effects if not isinstance(e, _rank.Log)]


def _train(p: RankProtocol, batch: int, now: float = 1.0) -> list[range]:
    taken = []
    while (indices := p.take(batch)) is not None:
        taken.append(indices)
        p.batch_done(now, 1.0, 0.5)
    return taken


def test_a_refused_join_raises_naming_the_reason() -> None:
    p = RankProtocol(3, 4)
    with pytest.raises(WorkerError, match="^the coordinator refused rank 3: the run has ended"):
        p.join_reply(m.JoinRejected(reason="the run has ended (all_ranks_lost)"), now=0.0)
    with pytest.raises(WorkerError, match="answered the join with Shutdown"):
        p.join_reply(m.Shutdown(), now=0.0)
    assert not p.joined


def test_a_plan_is_taken_in_batches_then_the_slices_handed_over_wherever_they_lie() -> None:
    """A dead rank's slice before this rank's own was skipped: the cursor ran past its end."""
    p = _joined()
    p.receive(m.StartEpoch(epoch=0, partition_offset=100, partition_size=10), now=0.5)
    p.start_plan(1.0)
    assert p.take(4) == range(100, 104)
    p.receive(m.ExtendPartition(partition_offset=0, partition_size=5, epoch=0), now=1.1)
    assert _train(p, 4) == [range(104, 108), range(108, 110), range(0, 4), range(4, 5)]
    assert p.exhausted
    (metrics,) = _sent(p.report_epoch(2.0))
    assert isinstance(metrics, m.MetricsMsg) and metrics.samples_processed == 15 and metrics.extensions == 1
    assert metrics.batches_processed == 4  # the first take was not reported as done


def test_a_slice_for_a_queued_plan_joins_that_plan() -> None:
    """It became a plan of its own ahead of its epoch's plan, reported as the whole epoch: the
    coordinator aggregated with the rank's own slice never trained (simulator seeds 1227, 1764)."""
    p = _joined()
    p.receive(m.StartEpoch(epoch=1, partition_offset=0, partition_size=13), now=0.5)
    p.receive(m.ExtendPartition(partition_offset=13, partition_size=16, epoch=1), now=0.6)
    assert len(p.plans) == 1
    p.start_plan(1.0)
    assert sum(len(r) for r in _train(p, 8)) == 29


def test_a_slice_after_the_epoch_was_reported_is_a_plan_of_its_own_served_first() -> None:
    p = _joined()
    p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=4), now=0.0)
    p.start_plan(0.0)
    _train(p, 4)
    p.report_epoch(1.0)
    p.receive(m.StartEpoch(epoch=1, partition_offset=0, partition_size=4), now=1.0)
    p.receive(m.ExtendPartition(partition_offset=8, partition_size=2, epoch=0), now=1.1)
    p.start_plan(1.2)
    assert p.current is not None and p.current.epoch == 0 and p.current.is_extension
    _train(p, 4)
    (metrics,) = _sent(p.report_epoch(1.3))
    assert isinstance(metrics, m.MetricsMsg) and metrics.epoch == 0 and metrics.extensions == 1


def test_a_loss_that_is_not_finite_raises_naming_rank_batch_and_epoch() -> None:
    p = _joined()
    p.receive(m.StartEpoch(epoch=2, partition_offset=0, partition_size=8), now=0.0)
    p.start_plan(0.0)
    p.batch_done(0.1, 1.0, 0.4)
    with pytest.raises(WorkerError, match="^rank 1: the loss of batch 2 of epoch 2 is nan$"):
        p.batch_done(0.2, 1.0, float("nan"))


def test_an_unchanged_learning_rate_is_not_sent_again() -> None:
    p = _joined()
    assert [type(x).__name__ for x in _sent(p.batch_done(0.1, 1.0, 0.5, lr=0.1))] == ["Batch", "LrUpdate"]
    assert [type(x).__name__ for x in _sent(p.batch_done(0.2, 1.0, 0.5, lr=0.1))] == ["Batch"]


def test_batches_within_report_every_are_one_report_of_their_means_and_the_step_count_reached() -> None:
    p = _joined(report_every=0.005)
    assert _sent(p.batch_done(1.0, 2.0, 0.5, data_ms=1.0)) == [m.Batch(rank=1, batch_ms=2.0, step_count=1,
                                                                         batch_loss=0.5, data_ms=1.0)]
    assert p.batch_done(1.001, 4.0, 0.25, param_norm=3.0) == []  # held: within 5 ms of the last report
    assert p.batch_done(1.002, 6.0, 0.75, data_ms=2.0) == []
    assert _sent(p.batch_done(1.006, 8.0, 0.5)) == [m.Batch(rank=1, batch_ms=6.0, step_count=4, batch_loss=0.5,
                                                            data_ms=2.0 / 3, param_norm=3.0)]
    assert _sent(p.batch_done(1.5, 1.0, 0.5)) == [m.Batch(rank=1, batch_ms=1.0, step_count=5, batch_loss=0.5)]
    # Fast batches: at most REPORT_HELD_MAX - 1 held whatever the clock says (the coordinator throttles
    # by count: a rank it hears of late trains past its lead bound).
    assert [p.batch_done(1.5, 1.0, 0.5) for _ in range(_rank.REPORT_HELD_MAX - 1)] == [[]] * (_rank.REPORT_HELD_MAX - 1)
    assert _sent(p.batch_done(1.5, 1.0, 0.5)) == [m.Batch(rank=1, batch_ms=1.0, step_count=5 + _rank.REPORT_HELD_MAX,
                                                          batch_loss=0.5)]


def test_held_batches_are_reported_by_the_tick_after_report_every_or_at_once_before_a_wait() -> None:
    p = _joined(report_every=0.005)
    p.batch_done(1.0, 1.0, 0.5)
    p.batch_done(1.001, 1.0, 0.5)
    assert p.tick(1.004) == []
    assert _sent(p.tick(1.006)) == [m.Batch(rank=1, batch_ms=1.0, step_count=2, batch_loss=0.5)]
    assert p.tick(1.1) == [] and p.report_held(1.1) == []  # nothing held
    assert len(_sent(p.batch_done(1.101, 1.0, 0.5))) == 1
    assert p.batch_done(1.102, 1.0, 0.5) == []
    assert _sent(p.report_held(1.103)) == [m.Batch(rank=1, batch_ms=1.0, step_count=4, batch_loss=0.5)]
    assert p.batch_done(1.104, 1.0, 0.5) == []
    p.receive(m.Shutdown(), now=1.105)
    assert p.report_held(1.106) == [] and p.tick(1.2) == []  # nothing is said after the run ended


def test_the_epoch_report_counts_the_held_batches_and_they_are_not_reported_again() -> None:
    p = _joined(report_every=0.005)
    p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=3), now=0.0)
    p.start_plan(0.0)
    _train(p, 1, now=1.0)  # three batches at once: the first reported, two held
    (metrics,) = _sent(p.report_epoch(1.001))
    assert isinstance(metrics, m.MetricsMsg) and metrics.step_count == 3 and metrics.batches_processed == 3
    assert p.report_held(1.002) == [] and p.tick(2.0) == []


def _in_sync(p: RankProtocol, now: float = 0.1) -> RankProtocol:
    """The run's first sync: the rank takes the run's model (weighs 0) before it may train."""
    (reduce,) = p.receive(m.SyncNow(cycle=1, source=0), now=now)
    assert reduce == AllReduce(cycle=1, steps=0, weight=0) and not p.can_train
    p.sync_done(1, None, now, covered=0)
    assert p.can_train
    return p


def test_a_sync_weighs_the_steps_since_the_last_one_and_acks_with_the_step_count() -> None:
    p = _in_sync(_joined())
    for t in range(3):
        p.batch_done(t, 1.0, 0.5)
    (reduce,) = p.receive(m.SyncNow(cycle=4), now=3.0)
    assert reduce == AllReduce(cycle=4, steps=3, weight=3)
    assert _sent(p.sync_done(4, None, 3.1, covered=7)) == [m.SyncAck(rank=1, step_count=3, covered=7, cycle=4)]
    assert p.steps_since_sync == 0
    (again,) = p.receive(m.SyncNow(cycle=5), now=3.2)
    assert again == AllReduce(cycle=5, steps=0, weight=1)  # holding the model, it counts even with no step


def test_an_evicted_rank_or_one_whose_coordinator_is_gone_ends_as_a_failure() -> None:
    p = _joined()
    effects = p.receive(m.Evicted(detail="rank 1 was counted dead"), now=1.0)
    (ended,) = [e for e in effects if isinstance(e, Ended)]
    assert ended.failed and p.failure == "rank 1: evicted from the run: rank 1 was counted dead; its model is not the run's result"
    assert p.exiting() != [] and p.receive(m.Shutdown(), now=2.0) == []  # the first end holds
    gone = _joined()
    (ended,) = [e for e in gone.receive(m.Down(name="coordinator", reason=m.DownReason.DEAD), now=1.0)
                if isinstance(e, Ended)]
    assert ended.failed and ended.coordinator_gone and "coordinator is down" in (gone.failure or "")
    finished = _joined()
    (ended,) = [e for e in finished.receive(m.Shutdown(), now=1.0) if isinstance(e, Ended)]
    assert not ended.failed and finished.failure is None
    finished.receive(m.Down(name="coordinator", reason=m.DownReason.EXITED), now=2.0)
    assert finished.failure is None  # the coordinator leaving after the end is no failure


def test_a_rank_blocked_while_groups_formed_serves_only_the_newest_session() -> None:
    """A rank frozen after its join found one session per attempt queued and joined each in turn,
    each already given up by the others: the run never finished."""
    session = [m.NewNcclSession(uid=bytes([i]), new_rank=1, new_world_size=2, attempt=i) for i in range(3)]
    queued = [session[0], m.SyncNow(cycle=1), m.StartEpoch(epoch=0, partition_offset=0, partition_size=4),
              session[1], m.SyncNow(cycle=2), session[2], m.SyncNow(cycle=3), m.CoordHeartbeat(seq=1)]
    assert _rank_effects.current(queued) == [queued[2], session[2], m.SyncNow(cycle=3), m.CoordHeartbeat(seq=1)]
    assert _rank_effects.current(queued[1:3]) == queued[1:3]  # no session: nothing is superseded


def test_a_rank_trains_only_once_it_holds_the_run_s_model() -> None:
    """Ranks seeded differently started from different models (torch's DDP broadcasts rank 0's at
    construction), and a rank that rejoined averaged its fresh initialisation into everyone's."""
    source, other = RankProtocol(0, 2), _joined()
    source.join_reply(m.JoinAccepted(rank=0, world_size=2), now=0.0)
    assert not source.can_train and not other.can_train
    (a,) = source.receive(m.SyncNow(cycle=1, source=0), now=0.1)
    (b,) = other.receive(m.SyncNow(cycle=1, source=0), now=0.1)
    assert (a.weight, b.weight) == (1, 0)  # the source's initialisation is the run's model
    other.sync_done(1, "connection reset", 0.2)  # not in a completed sync: still nothing to train on
    assert not other.can_train
    other.group_formed(0, None, 0.3)
    other.receive(m.SyncNow(cycle=2), now=0.4)
    other.sync_done(2, None, 0.5, covered=0)
    assert other.can_train


def test_a_throttled_rank_takes_no_batch_until_its_next_sync_completes() -> None:
    """The coordinator's ``Throttle`` (the rank ran its lead bound past its last sync) was not a
    message the rank protocol knew: ranks trained on alone while a peer was descheduled."""
    p = _joined()
    p.receive(m.Throttle(), now=0.1)
    assert not p.throttled  # not in a sync yet: nothing to hold back
    p.receive(m.SyncNow(cycle=1), now=0.2)
    p.sync_done(1, None, 0.3, covered=0)
    assert p.can_train
    assert p.receive(m.Throttle(), now=0.4) == []
    assert not p.can_train
    p.receive(m.SetGlobalStep(global_step=3), now=0.5)
    assert not p.can_train  # only the sync frees it
    p.receive(m.SyncNow(cycle=2), now=0.6)
    p.sync_done(2, "peer gone", 0.7)
    assert p.throttled  # a failed reduce frees nothing: the cycle is done again on the new group
    p.group_formed(1, None, 0.8)
    p.receive(m.SyncNow(cycle=3), now=0.9)
    p.sync_done(3, None, 1.0, covered=2)
    assert p.can_train


def test_a_failed_all_reduce_is_reported_at_once_and_the_rank_waits_for_the_new_group() -> None:
    p = _joined()
    p.receive(m.NewNcclSession(uid=b"a", new_rank=1, new_world_size=2, attempt=2), now=0.0)
    p.receive(m.SyncNow(cycle=1), now=1.0)
    assert _sent(p.sync_done(1, "connection reset", 1.5)) == [
        m.SessionFailed(rank=1, attempt=2, reason="collective failed: connection reset")]
    assert p.regrouping and not p.can_train
    # Plans and syncs wait, in order; what forms or ends a group is served.
    assert p.receive(m.StartEpoch(epoch=1, partition_offset=0, partition_size=4), now=1.6) == []
    assert p.receive(m.SyncNow(cycle=2), now=1.7) == []
    assert p.receive(m.ExtendPartition(partition_offset=4, partition_size=4, epoch=1), now=1.7) == []
    assert _kinds(p.receive(m.RequestNewNcclId(attempt=2), now=1.8)) == ["MakeGroupId"]
    (form,) = p.receive(m.NewNcclSession(uid=b"b", new_rank=0, new_world_size=1, attempt=3), now=1.9)
    assert isinstance(form, FormGroup) and p.session_attempt == 3
    replayed = p.group_formed(3, None, 2.0)
    # The kept SyncNow was for the group that is gone: the coordinator asks again on the new one.
    assert not p.regrouping and _kinds(replayed) == []
    assert len(p.plans) == 1 and p.plans[0].extensions == [(4, 4)]


def test_a_regrouping_that_waits_too_long_lets_the_rank_go_on() -> None:
    p = _joined(regroup_wait=60.0, coordinator_timeout=1000.0)
    p.receive(m.SyncNow(cycle=1), now=0.0)
    p.sync_done(1, "timeout", 0.0)
    p.receive(m.StartEpoch(epoch=1, partition_offset=0, partition_size=4), now=1.0)
    assert p.tick(59.0) == [] and p.regrouping
    effects = p.tick(60.0)
    assert not p.regrouping and len(p.plans) == 1
    assert any(isinstance(e, _rank.Log) and e.event == "no new process group in time" for e in effects)


def test_a_failed_formation_is_reported_for_its_attempt_never_raised() -> None:
    p = _joined()
    p.receive(m.NewNcclSession(uid=b"a", new_rank=1, new_world_size=2, attempt=5), now=0.0)
    assert _sent(p.group_formed(5, "Failed to recv, got 0 bytes", 8.0)) == [
        m.SessionFailed(rank=1, attempt=5, reason="Failed to recv, got 0 bytes")]


def test_a_group_id_that_could_not_be_made_sends_nothing() -> None:
    p = _joined()
    assert p.receive(m.RequestNewNcclId(attempt=4), now=0.0) == [MakeGroupId(attempt=4)]
    assert _sent(p.group_id_made(4, None, "address in use")) == []
    assert _sent(p.group_id_made(4, b"uid", None)) == [m.NewNcclIdGenerated(rank=1, uid=b"uid", attempt=4)]


def test_eval_checkpoint_and_abort_are_effects_whose_results_are_sent() -> None:
    p = _joined()
    ask = m.ExecuteEval(schedule_id=1, epoch=2, target_rank=1)
    assert p.receive(ask, now=0.0) == [Evaluate(ask)]
    result = m.EvalResult(rank=1, schedule_id=1, epoch=2, metric=0.5, elapsed_ms=3.0)
    assert _sent(p.evaluated(result)) == [result]
    save = m.Checkpoint(version=3, target_rank=1)
    assert p.receive(save, now=0.0) == [SaveCheckpoint(save)]
    assert p.receive(m.DeclareDead(rank=0), now=0.0) == [AbortGroup()]


def test_the_epoch_callback_runs_on_the_rank_holding_its_role_only() -> None:
    p = _joined()
    p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=4), now=0.0)
    p.receive(m.StartEpoch(epoch=1, partition_offset=0, partition_size=4), now=0.0)
    assert p.start_plan(0.0) == []
    p.receive(m.SetEpochCallbackRole(rank=1), now=0.0)
    p.report_epoch(0.5)
    assert p.start_plan(1.0) == [RunEpochFn(epoch=1)]


@pytest.mark.parametrize("end", [m.Shutdown(), m.ShutdownWithSave(reason=m.SaveReason.ALL_RANKS_LOST, detail="x")])
def test_the_end_of_the_run_is_said_once_and_nothing_is_done_after_it(end: m.Message) -> None:
    p = _joined()
    effects = p.receive(end, now=1.0)
    assert [e for e in effects if isinstance(e, Ended)] == [Ended(end, effects[-1].why)]  # type: ignore[arg-type,union-attr]
    assert p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=4), now=2.0) == []
    assert p.receive(m.SyncNow(cycle=1), now=2.0) == [] and p.start_plan(2.0) == [] and not p.can_train
    assert p.receive(m.Shutdown(), now=3.0) == []
    assert _sent(p.exiting()) == [m.Exiting(rank=1)] and p.exiting() == []


def test_the_coordinators_down_or_silence_ends_the_run_with_nobody_to_say_exiting_to() -> None:
    p = _joined()
    assert p.receive(m.Down(name="weights/r0/consumer/0", reason=m.DownReason.DEAD), now=1.0) == []
    (ended,) = [e for e in p.receive(m.Down(name="coordinator", reason=m.DownReason.DEAD), now=1.0)
                if isinstance(e, Ended)]
    assert ended.coordinator_gone



def test_a_silent_coordinator_is_warned_about_not_taken_for_dead() -> None:
    """Load is not death: 30 s without CoordHeartbeat ended the rank while its coordinator, saturated,
    was alive. The silence is a warning (at each doubling); the end is the runtime's Down."""
    q = _joined(coordinator_timeout=5.0)
    q.receive(m.CoordHeartbeat(seq=1), now=3.0)
    assert q.tick(8.0) == []
    (warned,) = q.tick(8.1)
    assert isinstance(warned, _rank.Log) and warned.level == "warning" and warned.fields["silent_s"] == 5.1
    assert q.tick(12.0) == [] and q.ended is None  # not again before 10 s of silence
    assert [type(e).__name__ for e in q.tick(13.2)] == ["Log"]
    q.receive(m.CoordHeartbeat(seq=2), now=14.0)  # it speaks: the next warning is 5 s away again
    assert q.tick(18.0) == [] and len(q.tick(19.1)) == 1
    (ended,) = [e for e in q.receive(m.Down(name="coordinator", reason=m.DownReason.UNREACHABLE), now=20.0)
                if isinstance(e, Ended)]
    assert ended.coordinator_gone


def test_no_sync_is_entered_after_exiting_was_said() -> None:
    p = _joined()
    p.exiting()
    assert p.receive(m.SyncNow(cycle=1), now=0.0) == []


def test_report_epoch_before_a_plan_is_a_usage_error() -> None:
    with pytest.raises(m.UsageError, match="before next_plan"):
        _joined().report_epoch(0.0)


# -- the protocol recorded and replayed like an actor ---------------------------------------


def _recorded_run(tmp_path, protocol_cls=RankProtocol):  # type: ignore[no-untyped-def]
    from actorwire.actors.control._rank_record import PROTOCOL_CLASS, RecordedProtocol, protocol_config
    from actorwire.transport.recording import LogHeader, SegmentWriter

    inner = protocol_cls(1, 2)
    header = LogHeader(run_id="r", actor="worker/1", actor_class=PROTOCOL_CLASS, config=protocol_config(inner))
    p = RecordedProtocol(inner, SegmentWriter(tmp_path, header), "worker/1")
    p.join_reply(m.JoinAccepted(rank=1, world_size=2), 0.0)
    env = m.Envelope(sender="coordinator", target="worker/1", seq=1)
    p.receive(m.StartEpoch(epoch=0, partition_offset=0, partition_size=6), 0.5, envelope=env)
    p.start_plan(1.0)
    while (indices := p.take(4)) is not None:
        for effect in p.batch_done(1.5, 2.0, 0.25):
            if isinstance(effect, Send):
                p.sent(effect, "coordinator", 7)
    p.receive(m.SyncNow(cycle=1), 2.0, envelope=env)
    p.sync_done(1, None, 2.5)
    p.report_epoch(3.0)
    p.close()
    return indices


def test_a_recorded_protocol_replays_exactly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from actorwire.actors import replay
    from actorwire.actors.runtime._replay import load_records
    from actorwire.transport.recording import Call, Clock, In, Out

    _recorded_run(tmp_path)
    header, records = load_records(tmp_path)
    assert header.actor_class.endswith(":RankProtocol") and header.config["rank"] == 1
    assert [r.method for r in records if isinstance(r, Call)][:3] == ["join_reply", "start_plan", "take"]
    assert [type(r.message).__name__ for r in records if isinstance(r, In)] == ["StartEpoch", "SyncNow"]
    assert [r.value for r in records if isinstance(r, Clock)] == [0.5, 2.0]  # the clock it was given
    assert {type(r.message).__name__ for r in records if isinstance(r, Out)} == {"Batch"}
    report = replay(tmp_path)
    assert report.ok, report.summary()
    assert report.messages == len([r for r in records if isinstance(r, (Call, In))])


def test_a_changed_protocol_diverges_at_the_call_that_changed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from actorwire.actors import replay

    _recorded_run(tmp_path)

    original = _rank.RankProtocol.batch_done

    def changed(self, now, batch_ms, loss, **kw):  # type: ignore[no-untyped-def]  # the "new code"
        return original(self, now, batch_ms * 2, loss, **kw)

    try:
        _rank.RankProtocol.batch_done = changed  # type: ignore[method-assign]
        report = replay(tmp_path)
    finally:
        _rank.RankProtocol.batch_done = original  # type: ignore[method-assign]
    assert not report.ok
    first = report.divergences[0]
    assert first.kind == "batch_done" and "batch_ms" in first.expected and "4.0" in first.got


def test_only_the_coordinator_its_relay_or_the_runtime_is_heard() -> None:
    """The one place the rule lives (both drivers ask it): the coordinator's word, the relay's
    fanout and the runtime's ``Down`` are taken; anything else is counted by sender, the first from
    each logged once."""
    p = RankProtocol(1, 2, relay="relay/h1")
    assert p.refusal("coordinator", m.Shutdown()) is None
    assert p.refusal("relay/h1", m.Shutdown()) is None
    assert p.refusal("liar/1", m.Down(name="coordinator", reason=m.DownReason.DEAD)) is None
    first = p.refusal("liar/1", m.Evicted(detail="forged"))
    assert first is not None and [type(e) for e in first] == [_rank.Log]
    assert first[0].level == "warning" and first[0].fields["sender"] == "liar/1" and first[0].fields["kind"] == "evicted"
    assert p.refusal("liar/1", m.Shutdown()) == []  # counted, not logged again
    assert p.refusal(None, m.Shutdown()) is not None  # a sender with no name is nobody's word
    assert p.refused == {"liar/1": 2, "?": 1}
    assert p.ended is None and p.failure is None  # refusing told the rank nothing
