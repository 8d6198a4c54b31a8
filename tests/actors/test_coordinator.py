"""The coordinator's rules, on a virtual clock (the control plane and its failure modes)."""

from __future__ import annotations

import json
import pathlib

import pytest

from actorwire import messages as m
from actorwire.actors.control._coordinator import FINAL_EVAL, Coordinator
from actorwire.actors.testing import ActorHarness

RUN = "run-1"


def make(world: int = 3, **overrides) -> ActorHarness:
    # Without form_group (the default forms the group at the start): the rules below, group aside.
    config = dict(world_size=world, run_id=RUN, num_epochs=2, dataset_size=90, batch_size=1, sync_every=2,
                  staleness_timeout=3.0, tick_interval=1.0, metrics_sink="main", form_group=False,
                  launcher_node="launcher")
    config.update(overrides)
    h = ActorHarness(Coordinator(**config), name="coordinator", peers=["main"])
    h.start()
    return h


def join_all(h: ActorHarness, world: int = 3, *, seed: bool = True, evaluators: range | list[int] | None = None) -> list:
    """Every rank joins (``evaluators``: the ranks with an eval function, every one by default); with
    ``seed``, the first sync (every rank takes rank 0's model) completes and its messages are taken
    out of the outbox (``test_the_first_sync_gives_every_rank_one_model``)."""
    out = []
    for rank in range(world):
        reply = h.ask(m.JoinRequest(rank=rank, world_size=world, run_id=RUN, model_signature="sig",
                                    evaluates=evaluators is None or rank in evaluators), sender=f"worker/{rank}")
        assert reply == m.JoinAccepted(rank=rank, world_size=world)
    seeding = [s for s in h.outbox if isinstance(s.message, m.SyncNow)]
    if seed and seeding:  # (with form_group the first sync waits for the group: the test forms it)
        assert all(s.message.source == 0 for s in seeding)
        for s in seeding:
            rank = int(s.target.split("/")[1])
            h.deliver(m.SyncAck(rank=rank, step_count=0, covered=0, cycle=s.message.cycle), sender=s.target)
        h.ctx.outbox[:] = [s for s in h.outbox if not isinstance(s.message, (m.SyncNow, m.SetGlobalStep))]
    return out


def settle(h: ActorHarness) -> None:
    """Every rank acks the SyncNow in the outbox with the steps it reported (the outbox is kept)."""
    for s in [s for s in h.outbox if isinstance(s.message, m.SyncNow)]:
        rank = int(s.target.split("/")[1])
        state = h.actor.ranks[rank]
        if state.alive and h.actor.sync.armed_at is not None and s.message.cycle == h.actor.sync.cycle:
            h.deliver(m.SyncAck(rank=rank, step_count=state.total_steps, cycle=s.message.cycle), sender=s.target)


def sent(h: ActorHarness, kind: type) -> list[tuple[str, m.Message]]:
    return [(s.target, s.message) for s in h.take() if isinstance(s.message, kind)]


def batch(h: ActorHarness, rank: int, n: int = 1, ms: float = 10.0) -> list:
    out = []
    for _ in range(n):
        out += h.deliver(m.Batch(rank=rank, batch_ms=ms, step_count=0, batch_loss=0.5), sender=f"worker/{rank}")
    return out


def metrics(h: ActorHarness, rank: int, epoch: int, batches: int = 30, loss: float = 0.5) -> list:
    return h.deliver(m.MetricsMsg(rank=rank, epoch=epoch, avg_loss=loss, batches_processed=batches, epoch_ms=100.0,
                                  samples_processed=batches, share_complete_ms=100.0,
                                  scalars={"acc": m.ScalarSum(sum=batches * 0.5, count=batches)}),
                     sender=f"worker/{rank}")


# -- join ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (m.JoinRequest(rank=0, world_size=3, run_id="other", model_signature="sig"),
         "wrong run id"),  # never the run's own id: a refusal must not hand it out
        (m.JoinRequest(rank=0, world_size=4, run_id=RUN, model_signature="sig"),
         "world size 4 does not match the run's 3"),
        (m.JoinRequest(rank=5, world_size=3, run_id=RUN, model_signature="sig"),
         "rank 5 is out of range for world size 3"),
        (m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="sig", dataset_size=60),
         "rank 1 has 60 samples, fewer than the run's dataset_size 90: its slices would run past its data"),
    ],
)
def test_join_mismatch_is_refused_with_a_reason(request_: m.JoinRequest, reason: str) -> None:
    h = make()
    assert h.ask(request_, sender="worker/0") == m.JoinRejected(reason=reason)


def test_a_join_from_an_unregistered_sender_claims_nothing() -> None:
    h = make()
    assert h.ask(m.JoinRequest(rank=0, world_size=3, run_id=RUN, model_signature="sig"), sender="~intruder/1") == \
        m.JoinRejected(reason="the sender '~intruder/1' is not a registered actor")
    # Rank 0 is still free for the real rank, and the coordinator's tick still runs.
    assert h.ask(m.JoinRequest(rank=0, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/0") == \
        m.JoinAccepted(rank=0, world_size=3)
    h.advance(2.0)  # the tick runs without failing


def test_model_signature_and_duplicate_rank() -> None:
    h = make()
    assert h.ask(m.JoinRequest(rank=0, world_size=3, run_id=RUN, model_signature="a"), sender="worker/0") == \
        m.JoinAccepted(rank=0, world_size=3)
    assert h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="b"), sender="worker/1") == \
        m.JoinRejected(reason="model signature 'b' does not match 'a'")
    assert h.ask(m.JoinRequest(rank=0, world_size=3, run_id=RUN, model_signature="a"), sender="worker/9") == \
        m.JoinRejected(reason="rank 0 already joined (from 'worker/0')")


def test_full_membership_starts_epoch_zero_with_equal_shares() -> None:
    h = make()
    join_all(h)
    plans = sent(h, m.StartEpoch)
    assert plans[0] == ("main", m.StartEpoch(epoch=0, partition_offset=0, partition_size=90))  # progress for the sink
    assert plans[1:] == [(f"worker/{r}", m.StartEpoch(epoch=0, partition_offset=30 * r, partition_size=30))
                         for r in range(3)]
    assert {t for t in h.ctx.watched} == {"worker/0", "worker/1", "worker/2"}


def test_uneven_dataset_gives_leftovers_to_the_first_ranks() -> None:
    h = make(dataset_size=10)
    join_all(h)
    sizes = [p.partition_size for t, p in sent(h, m.StartEpoch) if t != "main"]
    assert sizes == [4, 3, 3]


# -- sync cadence ------------------------------------------------------------------------


def test_sync_now_when_every_rank_did_its_quota_then_global_step() -> None:
    h = make()
    join_all(h)
    h.take()
    batch(h, 0, 2)
    batch(h, 1, 2)
    assert sent(h, m.SyncNow) == []  # rank 2 has not done its quota
    batch(h, 2, 2)
    assert [t for t, _ in sent(h, m.SyncNow)] == ["worker/0", "worker/1", "worker/2"]
    for rank in range(3):
        h.deliver(m.SyncAck(rank=rank, step_count=2), sender=f"worker/{rank}")
    assert sent(h, m.SetGlobalStep) == [(f"worker/{r}", m.SetGlobalStep(global_step=6)) for r in range(3)]


def test_batches_reported_between_a_rank_s_ack_and_the_cycle_s_end_wait_for_the_next_sync() -> None:
    """The cycle's end set every rank's steps since the sync to 0: a rank that acked first and trained
    on had those batches added to the global step but not counted as waiting, and when they were its
    last the final sync was skipped (ranks ended with different parameters under a real SLURM)."""
    h = make(world=2, num_epochs=1, dataset_size=8, sync_every=2, eval_every=0, final_eval=False)
    join_all(h, world=2)
    batch(h, 0, 2)
    batch(h, 1, 2)
    assert h.actor.sync.armed_at is not None
    h.deliver(m.SyncAck(rank=0, step_count=2, covered=4, cycle=h.actor.sync.cycle), sender="worker/0")
    batch(h, 0, 2)  # rank 0 trains its last two batches while rank 1 is still in the reduce
    h.take()
    h.deliver(m.SyncAck(rank=1, step_count=2, covered=4, cycle=h.actor.sync.cycle), sender="worker/1")
    assert sent(h, m.SetGlobalStep) == [(f"worker/{r}", m.SetGlobalStep(global_step=4)) for r in range(2)]
    assert h.actor.ranks[0].steps_since_sync == 2  # not in the model yet
    batch(h, 1, 2)
    for rank in range(2):
        metrics(h, rank, 0, batches=4)
    assert h.actor.phase == "running" and [t for t, _ in sent(h, m.SyncNow)] == ["worker/0", "worker/1"]
    for rank in range(2):
        h.deliver(m.SyncAck(rank=rank, step_count=4, covered=4, cycle=h.actor.sync.cycle), sender=f"worker/{rank}")
    assert h.actor.global_step == 8 and h.actor.phase == "stopping"


def test_a_rank_that_runs_ahead_of_a_slow_peer_is_throttled_until_the_next_sync() -> None:
    """Ranks trained on alone while a peer was descheduled (an epoch and more between two averages
    under a loaded SLURM); the coordinator never said stop.  Past twice its quota (at least quota
    + 4 batches) a rank is told ``Throttle`` once, the next ``SyncNow`` frees it."""
    h = make(world=2, sync_every=4, dataset_size=200)
    join_all(h, world=2)
    h.take()
    batch(h, 0, 7)
    assert sent(h, m.Throttle) == []
    batch(h, 0, 1)  # 8 = twice its quota: rank 1, with none, holds the gate
    assert sent(h, m.Throttle) == [("worker/0", m.Throttle())]
    batch(h, 0, 1)  # one more in flight: not told twice
    assert sent(h, m.Throttle) == []
    batch(h, 1, 4)
    assert [t for t, _ in sent(h, m.SyncNow)] == ["worker/0", "worker/1"]
    assert not h.actor.ranks[0].throttled


def test_an_ack_says_what_the_reduce_covered_even_for_a_rank_lost_before_its_ack() -> None:
    """A rank stopped after the reduce took its steps and before its ack arrived is in the model: the
    reduce's own count (``covered``, summed in the collective) makes the global step, not the acks."""
    h = make()
    join_all(h)
    for rank in range(3):
        batch(h, rank, 2)
    cycle = h.actor.sync.cycle
    h.deliver(m.SyncAck(rank=0, step_count=2, covered=6, cycle=cycle), sender="worker/0")
    h.deliver(m.SyncAck(rank=2, step_count=2, covered=6, cycle=cycle), sender="worker/2")
    h.down("worker/1", m.DownReason.UNREACHABLE, "no heartbeat")  # its ack never came
    (request,) = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"u"), sender=request.target)
    assert h.actor.global_step == 6
    h.deliver(m.SyncAck(rank=0, step_count=1, covered=6, cycle=cycle - 1), sender="worker/0")  # stale: no change
    assert h.actor.global_step == 6


def test_a_rank_s_step_count_is_believed_only_up_to_the_samples_it_was_given(
        caplog: pytest.LogCaptureFixture) -> None:
    """``Batch.step_count``, ``SyncAck.step_count`` and ``covered`` moved the global step and the sync
    gate by whatever a proven rank said: one that claimed a billion steps made the run's global step
    a billion.  Each step takes a sample at least: a count past the samples handed to the rank is
    counted up to them, with one warning."""
    h = make()  # 90 samples: 30 a rank
    join_all(h)
    h.take()
    h.deliver(m.Batch(rank=0, batch_ms=1.0, step_count=10**9, batch_loss=0.5), sender="worker/0")
    assert h.actor.ranks[0].total_steps == 30
    for rank in (1, 2):
        batch(h, rank, 2)
    cycle = h.actor.sync.cycle
    h.deliver(m.SyncAck(rank=0, step_count=10**9, covered=10**9, cycle=cycle), sender="worker/0")
    for rank in (1, 2):
        h.deliver(m.SyncAck(rank=rank, step_count=2, covered=10**9, cycle=cycle), sender=f"worker/{rank}")
    assert h.actor.global_step == 34  # rank 0's 30 samples as steps, the others' 2 each
    assert h.actor.ranks[0].synced_steps == 30
    warned = [r.getMessage() for r in caplog.records if "more steps than the samples it was given" in r.getMessage()]
    assert len(warned) == 1 and all(f in warned[0] for f in ("rank=0", f"said={10**9}", "given=30")), warned


def test_a_rank_that_rejoins_takes_the_model_before_it_trains() -> None:
    """Its first sync names no source: it weighs 0 there, and the coordinator arms that sync as soon as
    the rank is in the run and its group formed, whatever the quotas say."""
    h = make(num_epochs=3)
    join_all(h)
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/1")
    assert not h.actor.ranks[1].has_model and h.actor.ranks[0].has_model
    for rank in (0, 2):  # the survivors finish epoch 0 and the slice of rank 1's rest each was handed
        h.deliver(m.MetricsMsg(rank=rank, epoch=0, avg_loss=0.5, batches_processed=45, epoch_ms=100.0,
                               samples_processed=45, share_complete_ms=100.0, extensions=1), sender=f"worker/{rank}")
    request = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)][-1]  # the group for epoch 1
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"u"), sender=request.target)
    syncs = [(s.target, s.message) for s in h.outbox if isinstance(s.message, m.SyncNow)]
    assert [t for t, _ in syncs] == ["worker/0", "worker/1", "worker/2"] and syncs[0][1].source is None
    settle(h)
    assert h.actor.ranks[1].has_model and h.actor.sync.armed_at is None


def test_sync_ack_is_not_a_batch() -> None:
    h = make()
    join_all(h)
    for rank in range(3):
        batch(h, rank, 2)
    for rank in range(3):
        h.deliver(m.SyncAck(rank=rank, step_count=2), sender=f"worker/{rank}")
    assert h.actor.global_step == 6  # acks do not inflate the step (flodl failure mode 13)
    assert [r.total_steps for r in h.actor.ranks.values()] == [2, 2, 2]


def test_adaptive_policy_gives_faster_ranks_more_batches() -> None:
    h = make(sync_policy="adaptive", sync_every=4)
    join_all(h)
    batch(h, 0, 4, ms=10.0)
    batch(h, 1, 4, ms=20.0)
    batch(h, 2, 4, ms=40.0)
    for rank in range(3):
        h.deliver(m.SyncAck(rank=rank, step_count=4), sender=f"worker/{rank}")
    quota = h.actor.sync.quota
    assert quota[2] <= quota[1] <= quota[0]  # the slowest anchors, faster ranks get more
    assert quota[0] >= 2 * quota[2]


def test_adaptive_anchor_grows_when_sync_overhead_is_high() -> None:
    h = make(sync_policy="adaptive", sync_every=2)
    join_all(h)
    for rank in range(3):
        batch(h, rank, 2)
    h.advance(0.1)  # a short window...
    before = h.actor.sync.anchor
    h.advance(0.5)  # ...and a slow reduce: overhead far above 10%
    for rank in range(3):
        h.deliver(m.SyncAck(rank=rank, step_count=2), sender=f"worker/{rank}")
    assert before < h.actor.sync.anchor <= 2 * before


# -- metrics and epochs ----------------------------------------------------------------


def test_epoch_metrics_are_batch_weighted_and_broadcast() -> None:
    h = make(eval_every=0, final_eval=False)
    join_all(h)
    h.take()
    metrics(h, 0, 0, batches=10, loss=1.0)
    metrics(h, 1, 0, batches=30, loss=0.2)
    assert sent(h, m.EpochAggregated) == []
    metrics(h, 2, 0, batches=20, loss=0.5)
    out = h.take()
    aggregated = [s.message for s in out if isinstance(s.message, m.EpochAggregated)]
    assert len(aggregated) == 3
    summary = aggregated[0].metrics
    agg = next(s.message for s in out if s.target == "main" and isinstance(s.message, m.EpochMetrics))
    assert agg.avg_loss == summary.avg_loss == pytest.approx((10 * 1.0 + 30 * 0.2 + 20 * 0.5) / 60)
    assert agg.scalars == summary.scalars == {"acc": pytest.approx(0.5)}
    assert agg.per_rank_batch_share == pytest.approx([10 / 60, 30 / 60, 20 / 60])
    # The ranks get the summary only: the per-rank lists, O(N) bytes to each of N ranks, go to the sink.
    assert summary == m.EpochMetrics(epoch=0, avg_loss=agg.avg_loss, epoch_ms=agg.epoch_ms, scalars=agg.scalars)
    assert [s.message for s in out if s.target == "main"] == [
        agg, m.StartEpoch(epoch=1, partition_offset=0, partition_size=90)]
    # The next epoch is dispatched right after.
    assert [s.message.epoch for s in out if isinstance(s.message, m.StartEpoch)] == [1, 1, 1, 1]


def test_partition_proportional_to_throughput_once_calibrated() -> None:
    h = make(eval_every=0, final_eval=False)
    join_all(h)
    batch(h, 0, 1, ms=10.0)
    batch(h, 1, 1, ms=20.0)
    batch(h, 2, 1, ms=20.0)
    h.take()
    for rank in range(3):
        metrics(h, rank, 0)
    assert not [s for s in h.outbox if isinstance(s.message, m.StartEpoch)]  # the epoch ends once synced
    settle(h)
    sizes = [p.partition_size for t, p in sent(h, m.StartEpoch) if t != "main"]
    assert sizes == [45, 23, 22] or sizes == [45, 22, 23]
    assert sum(sizes) == 90


# -- deaths ---------------------------------------------------------------------------------


def test_dead_rank_remainder_split_among_survivors() -> None:
    h = make()
    join_all(h)
    batch(h, 0, 2)
    batch(h, 2, 2)
    batch(h, 1, 10)  # it acks the sync the quotas armed after 10 batches: those are in the model
    for rank, steps in ((0, 2), (2, 2), (1, 10)):
        h.deliver(m.SyncAck(rank=rank, step_count=steps, cycle=h.actor.sync.cycle), sender=f"worker/{rank}")
    h.take()
    h.down("worker/1", m.DownReason.DEAD, "killed")
    out = h.take()
    extends = [(s.target, s.message) for s in out if isinstance(s.message, m.ExtendPartition)]
    first, second = m.ExtendPartition(partition_offset=40, partition_size=10, epoch=0), \
        m.ExtendPartition(partition_offset=50, partition_size=10, epoch=0)
    # The sink (the user's view) sees where the lost rank's samples went.
    assert extends == [("worker/0", first), ("main", first), ("worker/2", second), ("main", second)]
    # Survivors re-form the process group: the fastest survivor generates the id.
    (request,) = [s for s in out if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"store:1234"), sender=request.target)
    sessions = sent(h, m.NewNcclSession)
    assert sessions == [("worker/0", m.NewNcclSession(uid=b"store:1234", new_rank=0, new_world_size=2, attempt=1)),
                        ("worker/2", m.NewNcclSession(uid=b"store:1234", new_rank=1, new_world_size=2, attempt=1))]


def test_a_silent_rank_is_slow_not_dead_until_the_runtime_says_down(caplog: pytest.LogCaptureFixture) -> None:
    """Silence is load (a C call holding the GIL, a saturated host): the runtime, which judges the
    process by libzmq's heartbeats, is the one that says a rank is gone."""
    h = make()
    join_all(h)
    h.take()
    for _ in range(20):
        h.advance(1.0)
        batch(h, 0)
        h.deliver(m.Heartbeat(rank=1, step_count=0), sender="worker/1")
    assert [r.rank for r in h.actor.alive()] == [0, 1, 2]  # rank 2 silent for 20 s: slow
    warned = [r for r in caplog.records if "rank silent" in r.getMessage()]
    assert len(warned) == 3 and all("rank=2" in r.getMessage() for r in warned)  # past 3, 6 and 12 s
    h.down("worker/2", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    assert [r.rank for r in h.actor.alive()] == [0, 1]


def test_clean_exit_is_latched_and_never_a_death() -> None:
    h = make(eval_every=0, final_eval=False, num_epochs=1)
    join_all(h)
    for rank in range(3):
        metrics(h, rank, 0)
    assert h.actor.phase == "stopping"
    h.take()
    h.deliver(m.Exiting(rank=1), sender="worker/1")
    h.down("worker/1", m.DownReason.EXITED)
    h.advance(10.0)  # well past staleness
    out = h.take()
    assert not any(isinstance(s.message, (m.ExtendPartition, m.RequestNewNcclId, m.ShutdownWithSave)) for s in out)
    assert h.actor.failures == 0


def test_error_exit_without_exiting_is_a_death() -> None:
    h = make()
    join_all(h)
    h.down("worker/2", m.DownReason.DEAD, "status 1")
    assert h.actor.failures == 1


def test_role_failover_elects_the_fastest_live_rank() -> None:
    h = make()
    join_all(h)
    batch(h, 0, 1, ms=50.0)
    batch(h, 1, 1, ms=30.0)
    batch(h, 2, 1, ms=10.0)
    assert h.actor.roles.eval == 0  # elected before calibration: lowest rank
    h.down("worker/0", m.DownReason.DEAD)
    assert h.actor.roles.eval == 2 and h.actor.roles.checkpoint == 2


@pytest.mark.parametrize(
    ("overrides", "kill", "reason"),
    [
        ({"max_failures": 1}, [1], m.SaveReason.MAX_FAILURE_EXCEEDED),
        ({"backend": "nccl"}, [1, 2], m.SaveReason.SINGLE_SURVIVOR),
        ({}, [0, 1, 2], m.SaveReason.ALL_RANKS_LOST),
    ],
)
def test_unrecoverable_runs_save_and_shut_down(tmp_path: pathlib.Path, overrides: dict, kill: list[int],
                                               reason: m.SaveReason) -> None:
    h = make(save_stem=str(tmp_path / "ckpt"), **overrides)
    join_all(h)
    batch(h, 0, 3)
    h.take()
    for rank in kill:
        h.down(f"worker/{rank}", m.DownReason.DEAD)
    saves = [(s.target, s.message) for s in h.take() if isinstance(s.message, m.ShutdownWithSave)]
    survivors = 3 - len(kill)
    assert [t for t, _ in saves] == [f"worker/{r}" for r in range(3) if r not in kill] + ["main"]
    assert {msg.reason for _, msg in saves} == {reason}
    # One line for people, naming the rank and when: the sink (the user's view) gets it too.
    assert saves[-1][1].detail.startswith(f"rank {kill[-1]} lost in epoch 0 (dead")
    meta = json.loads((tmp_path / "ckpt.meta.json").read_text())
    assert meta["save_reason"] == reason.value and meta["world_size_at_save"] == survivors


def test_save_is_never_broadcast_twice(tmp_path: pathlib.Path) -> None:
    h = make(backend="nccl", save_stem=str(tmp_path / "c"))
    join_all(h)
    h.down("worker/1", m.DownReason.DEAD)
    h.down("worker/2", m.DownReason.DEAD)
    h.down("worker/0", m.DownReason.DEAD)
    assert h.actor.end.saved is m.SaveReason.SINGLE_SURVIVOR


def test_reduce_stall_saves_and_shuts_down() -> None:
    h = make(reduce_stall_timeout=10.0)
    join_all(h)
    for rank in range(3):
        batch(h, rank, 2)
    h.take()
    for _ in range(12):  # ranks stay alive but never acknowledge
        h.advance(1.0)
        for rank in range(3):
            h.deliver(m.Heartbeat(rank=rank), sender=f"worker/{rank}")
    assert [s.message for s in h.take() if isinstance(s.message, m.ShutdownWithSave)][0].reason is \
        m.SaveReason.REDUCE_STALL


def test_rendezvous_generator_death_moves_to_the_next_candidate() -> None:
    h = make(world=4)
    join_all(h, world=4)
    h.down("worker/3", m.DownReason.DEAD)
    (first,) = [s.target for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    h.down(first, m.DownReason.DEAD)  # the generator dies before answering
    h.advance(1.0)
    requests = [s.target for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    assert requests and first not in requests
    # An id from a rank that is not the generator is dropped.
    other = next(f"worker/{r.rank}" for r in h.actor.alive() if f"worker/{r.rank}" != requests[-1])
    h.deliver(m.NewNcclIdGenerated(rank=int(other[-1]), uid=b"x"), sender=other)
    assert sent(h, m.NewNcclSession) == []


def test_rendezvous_timeout_tries_the_next_candidate() -> None:
    h = make(world=3, rendezvous_timeout=5.0)
    join_all(h)
    h.down("worker/2", m.DownReason.DEAD)
    (first,) = [s.target for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    for _ in range(6):
        h.advance(1.0)
        for r in h.actor.alive():
            h.deliver(m.Heartbeat(rank=r.rank), sender=r.name)
    second = [s.target for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    assert second and second[0] != first


# -- eval, checkpoint, intents, endings ---------------------------------------------------------


def test_intent_is_folded_in_at_the_next_epoch_on_the_elected_rank() -> None:
    h = make(eval_every=0, checkpoint_every=0, final_eval=False, num_epochs=3)
    join_all(h)
    h.deliver(m.Intent(rank=2, kind=m.IntentKind.CHECKPOINT_NOW), sender="worker/2")
    h.deliver(m.Intent(rank=1, kind=m.IntentKind.EVAL_NOW), sender="worker/1")
    h.take()
    for rank in range(3):
        metrics(h, rank, 0)
    out = h.take()
    assert [(s.target, s.message) for s in out if isinstance(s.message, (m.Checkpoint, m.ExecuteEval))] == [
        ("worker/0", m.Checkpoint(version=1, target_rank=0)),
        ("worker/0", m.ExecuteEval(schedule_id=1, epoch=1, target_rank=0)),
    ]


def _epoch_ends(h: ActorHarness, epoch: int) -> list[m.Message]:
    """Every rank reports ``epoch`` and acks the epoch's last sync; what the coordinator said."""
    for rank in range(3):
        metrics(h, rank, epoch)
    settle(h)
    return [s.message for s in h.take()]


def test_eval_result_becomes_eval_broadcast() -> None:
    h = make(num_epochs=3, eval_every=1, checkpoint_every=0, final_eval=False)
    join_all(h)
    h.take()
    (asked,) = [x for x in _epoch_ends(h, 0) if isinstance(x, m.ExecuteEval)]
    assert asked.schedule_id == 1 and asked.target_rank == 0
    h.deliver(m.EvalResult(rank=0, schedule_id=1, epoch=1, metric=0.9, elapsed_ms=5.0), sender="worker/0")
    broadcasts = sent(h, m.EvalBroadcast)
    assert [t for t, _ in broadcasts] == ["worker/0", "worker/1", "worker/2", "main"]
    (asked,) = [x for x in _epoch_ends(h, 1) if isinstance(x, m.ExecuteEval)]
    h.deliver(m.EvalResult(rank=0, schedule_id=asked.schedule_id, epoch=2, metric=float("nan"), elapsed_ms=5.0,
                           error="boom"), sender="worker/0")
    assert sent(h, m.EvalBroadcast) == []


def test_an_eval_answer_nobody_asked_for_is_not_told_to_every_rank(caplog: pytest.LogCaptureFixture) -> None:
    """A rank that lies: any proven rank's ``EvalResult`` went to every rank and the sink as the
    run's eval, one nobody asked of it, one for an eval asked of another rank, the same answer twice."""
    h = make(num_epochs=3, eval_every=1, checkpoint_every=0, final_eval=False)
    join_all(h)
    h.take()
    h.deliver(m.EvalResult(rank=2, schedule_id=7, epoch=1, metric=1.0, elapsed_ms=1.0), sender="worker/2")
    (asked,) = [x for x in _epoch_ends(h, 0) if isinstance(x, m.ExecuteEval)]
    assert asked.target_rank == 0
    h.deliver(m.EvalResult(rank=2, schedule_id=asked.schedule_id, epoch=1, metric=1.0, elapsed_ms=1.0),
              sender="worker/2")
    assert sent(h, m.EvalBroadcast) == []
    assert "an eval answer nobody asked this rank for; ignored" in caplog.text
    h.deliver(m.EvalResult(rank=0, schedule_id=asked.schedule_id, epoch=1, metric=0.9, elapsed_ms=1.0),
              sender="worker/0")
    assert [x.metric for _, x in sent(h, m.EvalBroadcast)] == [0.9] * 4
    h.deliver(m.EvalResult(rank=0, schedule_id=asked.schedule_id, epoch=1, metric=0.1, elapsed_ms=1.0),
              sender="worker/0")
    assert sent(h, m.EvalBroadcast) == []  # answered once


def test_a_checkpoint_answer_from_a_rank_not_asked_is_not_what_a_restart_loads() -> None:
    """A written checkpoint's path is what every rank of a restarted group loads: a proven rank that
    was not asked could name its own file, take the checkpoint role, or fail the checkpoint in
    progress over to another rank."""
    h = make(num_epochs=3, checkpoint_every=1, eval_every=0, final_eval=False)
    join_all(h)
    h.take()
    (asked,) = [x for x in _epoch_ends(h, 0) if isinstance(x, m.Checkpoint)]
    assert asked.target_rank == 0 and asked.version == 1
    h.deliver(m.CheckpointResult(rank=2, version=1, elapsed_ms=1.0, path="/tmp/theirs.pt"), sender="worker/2")
    h.deliver(m.CheckpointResult(rank=1, version=1, elapsed_ms=1.0, error="disk full"), sender="worker/1")
    assert h.actor.roles.written is None and h.actor.roles.checkpoint == 0
    assert sent(h, m.Checkpoint) == []  # no retry for a failure nobody asked of rank 1
    h.deliver(m.CheckpointResult(rank=0, version=1, elapsed_ms=1.0, path="/ck/epoch-1.pt"), sender="worker/0")
    assert h.actor.roles.written is not None and h.actor.roles.written.path == "/ck/epoch-1.pt"
    h.deliver(m.CheckpointResult(rank=0, version=1, elapsed_ms=1.0, path="/tmp/again.pt"), sender="worker/0")
    assert h.actor.roles.written.path == "/ck/epoch-1.pt"  # answered once


def test_failed_checkpoint_is_retried_on_the_next_live_rank() -> None:
    h = make(checkpoint_every=1, eval_every=0, final_eval=False)
    join_all(h)
    for rank in range(3):
        metrics(h, rank, 0)
    (first,) = sent(h, m.Checkpoint)
    h.deliver(m.CheckpointResult(rank=0, version=1, elapsed_ms=1.0, error="disk full"), sender="worker/0")
    (retry,) = sent(h, m.Checkpoint)
    assert retry == ("worker/1", m.Checkpoint(version=1, target_rank=1))
    h.deliver(m.CheckpointResult(rank=1, version=1, elapsed_ms=1.0), sender="worker/1")
    assert h.actor.roles.checkpoint == 1  # sticky after success


def test_shutdown_only_after_the_last_sync_and_the_final_eval() -> None:
    h = make(num_epochs=1, eval_every=0)
    join_all(h)
    batch(h, 0, 1)
    batch(h, 1, 1)
    h.take()
    for rank in range(3):
        metrics(h, rank, 0)
    out = h.take()
    assert [s.message for s in out if isinstance(s.message, m.SyncNow)]  # a final consensus reduce first
    assert not [s for s in out if isinstance(s.message, m.Shutdown)]
    for rank in range(3):
        h.deliver(m.SyncAck(rank=rank, step_count=1), sender=f"worker/{rank}")
    (final,) = [s.message for s in h.take() if isinstance(s.message, m.ExecuteEval)]
    assert final.schedule_id == FINAL_EVAL and final.final
    h.deliver(m.EvalResult(rank=0, schedule_id=FINAL_EVAL, epoch=1, metric=0.8, elapsed_ms=1.0), sender="worker/0")
    shutdowns = sent(h, m.Shutdown)
    assert [t for t, _ in shutdowns] == ["worker/0", "worker/1", "worker/2"]
    for rank in range(3):
        h.deliver(m.Exiting(rank=rank), sender=f"worker/{rank}")
    assert h.ctx.stopped


def test_coordinator_heartbeat_every_tick() -> None:
    h = make()
    join_all(h)
    h.take()
    h.advance(3.0)
    beats = [s for s in h.take() if isinstance(s.message, m.CoordHeartbeat)]
    assert len(beats) == 9


def test_reports_from_an_impostor_are_ignored() -> None:
    h = make()
    join_all(h)
    h.deliver(m.Batch(rank=1, batch_ms=1.0, step_count=0, batch_loss=0.0), sender="worker/0")
    assert h.actor.ranks[1].total_steps == 0


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="sync_policy must be 'fixed' or 'adaptive', got 'random'"):
        Coordinator(world_size=2, run_id="r", num_epochs=1, dataset_size=4, sync_policy="random")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_live_run_ends_cleanly_and_the_coordinator_replays_exactly(tmp_path: pathlib.Path) -> None:
    from _actors import ScriptedWorker

    from actorwire.actors import ActorSystem, replay

    with ActorSystem(record=str(tmp_path), run_id=RUN) as system:
        inbox = system.inbox("main")
        system.spawn(Coordinator(world_size=3, run_id=RUN, num_epochs=3, dataset_size=60, sync_every=4,
                                 metrics_sink="main", tick_interval=0.05), "coordinator")
        inbox.watch("coordinator")
        for rank in range(3):
            system.spawn(ScriptedWorker(rank=rank, world_size=3, run_id=RUN), f"worker/{rank}")
        seen: list[m.Message] = []
        while True:
            got = inbox.get(timeout=30)
            assert got is not None, f"the run did not finish; saw {seen}"
            seen.append(got.message)
            if isinstance(got.message, m.Down):
                break
    epochs = [x.epoch for x in seen if isinstance(x, m.EpochMetrics)]
    assert epochs == [0, 1, 2]
    assert seen[-1] == m.Down(name="coordinator", reason=m.DownReason.EXITED)
    assert any(isinstance(x, m.EvalBroadcast) for x in seen)
    report = replay(tmp_path, actor="coordinator")
    assert report.ok, report.summary()
    assert report.messages > 60


def test_run_starts_with_the_ranks_that_joined_in_time() -> None:
    h = make(join_timeout=5.0)
    h.ask(m.JoinRequest(rank=0, world_size=3, run_id=RUN, model_signature="s"), sender="worker/0")
    h.ask(m.JoinRequest(rank=2, world_size=3, run_id=RUN, model_signature="s"), sender="worker/2")
    h.take()
    for _ in range(2):  # a joined rank beats while it waits
        h.advance(2.0)
        for rank in (0, 2):
            h.deliver(m.Heartbeat(rank=rank, step_count=0), sender=f"worker/{rank}/heartbeat")
    assert sent(h, m.StartEpoch) == [] and h.actor.phase == "joining"
    h.advance(2.0)
    plans = [(t, p) for t, p in sent(h, m.StartEpoch) if t != "main"]
    assert plans == [("worker/0", m.StartEpoch(epoch=0, partition_offset=0, partition_size=45)),
                     ("worker/2", m.StartEpoch(epoch=0, partition_offset=45, partition_size=45))]


# -- start-up faults ------------------------------------------------------------------------


def _join(h: ActorHarness, *ranks: int, world: int = 3) -> None:
    for rank in ranks:
        assert h.ask(m.JoinRequest(rank=rank, world_size=world, run_id=RUN, model_signature="s"),
                     sender=f"worker/{rank}") == m.JoinAccepted(rank=rank, world_size=world)


def _saves(h: ActorHarness) -> list[tuple[str, m.ShutdownWithSave]]:
    return [(s.target, s.message) for s in h.take() if isinstance(s.message, m.ShutdownWithSave)]


def test_a_rank_whose_process_exited_before_joining_is_not_waited_for() -> None:
    """34 of 34 demo runs stalled for a minute when a worker died before it joined."""
    h = make()
    _join(h, 0, 2)
    h.take()
    h.deliver(m.RankExited(rank=1, returncode=-9, detail="killed by signal 9"), sender="~launcher/1")
    out = h.take()
    plans = [(s.target, s.message) for s in out if isinstance(s.message, m.StartEpoch) and s.target != "main"]
    assert plans == [("worker/0", m.StartEpoch(epoch=0, partition_offset=0, partition_size=45)),
                     ("worker/2", m.StartEpoch(epoch=0, partition_offset=45, partition_size=45))]
    # The workers were launched for three: the coordinator forms the group of two itself.
    assert any(isinstance(s.message, m.RequestNewNcclId) for s in out)
    assert h.actor.losses.at_start == {1: "killed by signal 9 before it joined"}
    # A new incarnation of rank 1 (restarted by its launcher) may join the running run; it waits for
    # the next epoch. (A delayed join of the dead incarnation is refused by ctx.watch: its name is
    # gone from the registry; see test_a_join_from_an_unregistered_sender_claims_nothing.)
    reply = h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="s"), sender="worker/1")
    assert reply == m.JoinAccepted(rank=1, world_size=3)
    assert [r.rank for r in h.actor.alive()] == [0, 2] and h.actor.ranks[1].waiting


def test_too_few_ranks_left_to_start_ends_the_run_at_once_naming_rank_and_phase() -> None:
    h = make(min_world_size=3)
    _join(h, 0)
    h.take()
    h.deliver(m.RankExited(rank=2, returncode=1, detail="exited with status 1"), sender="~launcher/1")
    saves = _saves(h)
    assert [t for t, _ in saves] == ["worker/0", "main"]
    reason, detail = saves[0][1].reason, saves[0][1].detail
    assert reason is m.SaveReason.TOO_FEW_RANKS
    assert detail == ("rank 2 exited with status 1 before it joined; 1 of 3 ranks joined and 1 may "
                      "still, fewer than min_world_size 3 (phase joining)")
    assert h.actor.phase == "stopping"


def test_a_joined_rank_that_dies_while_others_join_does_not_end_the_run() -> None:
    h = make()
    _join(h, 0)
    h.down("worker/0", m.DownReason.DEAD, "status -9")
    _join(h, 1, 2)
    assert h.actor.end.saved is None and h.actor.phase == "running"
    plans = [t for t, msg in sent(h, m.StartEpoch) if t != "main"]
    assert plans == ["worker/1", "worker/2"]


def test_a_joined_rank_lost_while_waiting_is_lost_at_start_but_silence_alone_is_not() -> None:
    h = make(min_world_size=2)
    _join(h, 0, 1)
    h.take()
    h.advance(4.0)  # both silent past the 3 s staleness while they wait: slow, still joined
    assert h.actor.losses.at_start == {}
    h.down("worker/0", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    assert set(h.actor.losses.at_start) == {0}
    h.down("worker/1", m.DownReason.DEAD, "status -9")  # one left and one may still join, fewer than 2
    assert [msg.reason for _, msg in _saves(h)] == [m.SaveReason.TOO_FEW_RANKS]


def test_an_exit_report_for_a_joined_rank_is_its_death_and_its_down_is_not_a_second() -> None:
    h = make()
    join_all(h)
    h.deliver(m.RankExited(rank=1, returncode=-9, detail="killed"), sender="~launcher/1")
    h.down("worker/1", m.DownReason.DEAD)
    assert h.actor.failures == 1 and not h.actor.ranks[1].alive


def test_an_exit_report_is_believed_only_from_the_launcher_s_node(caplog: pytest.LogCaptureFixture) -> None:
    """Any proven peer could send ``RankExited`` for a live rank, signed by one of its own threads
    (``~<its node>/<thread>``) or one of its actors, and the coordinator counted that rank dead and
    handed its share to the others.  Only the node named ``launcher_node`` is believed, and with none
    named no report is."""
    h = make()
    join_all(h)
    h.take()
    for sender in ("~node-of-rank-2/7", "worker/2", "~launcher2/1", "~launcher"):
        h.deliver(m.RankExited(rank=1, returncode=-9, detail="killed by signal 9"), sender=sender)
    assert h.actor.failures == 0 and h.actor.ranks[1].alive
    assert not any(isinstance(s.message, m.RankLost) for s in h.take())
    warned = [r for r in caplog.records if "other than its launcher" in r.getMessage()]
    assert len(warned) == 4 and "node-of-rank-2" in warned[0].getMessage()
    h.deliver(m.RankExited(rank=1, returncode=-9, detail="killed by signal 9"), sender="~launcher/1")
    assert h.actor.failures == 1 and not h.actor.ranks[1].alive

    nobody = make(launcher_node="")  # none named: not even a launcher's report is believed
    _join(nobody, 0, 2)
    nobody.deliver(m.RankExited(rank=1, returncode=-9, detail="killed by signal 9"), sender="~launcher/1")
    assert nobody.actor.losses.at_start == {} and nobody.actor.phase.name == "JOINING"


def test_a_clean_exit_report_is_not_a_death() -> None:
    """``Exiting`` after the run ended latches a clean exit: the process's end afterwards, even one a
    signal ended during teardown, is not a death, and the rank finished with the final model."""
    h = make(num_epochs=1, eval_every=0, final_eval=False)
    join_all(h)
    _finish(h, [1])
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.deliver(m.RankExited(rank=1, returncode=-9, detail="killed by signal 9"), sender="~launcher/1")
    assert h.actor.failures == 0 and 1 in h.actor.outcome().finished


def test_ranks_that_never_showed_up_count_as_lost_at_the_join_timeout() -> None:
    h = make(join_timeout=5.0, staleness_timeout=30.0, min_world_size=2)
    _join(h, 0)
    h.take()
    h.advance(6.0)
    saves = _saves(h)
    assert [msg.reason for _, msg in saves] == [m.SaveReason.TOO_FEW_RANKS] * 2
    assert "rank 1 did not join within 5 s; rank 2 did not join within 5 s" in saves[0][1].detail


def test_min_world_size_is_validated() -> None:
    with pytest.raises(ValueError, match=r"min_world_size must be between 1 and world_size \(2\), got 3"):
        Coordinator(world_size=2, run_id="r", num_epochs=1, dataset_size=4, min_world_size=3)


def test_a_restarted_rank_rejoins_at_the_next_epoch_and_gets_a_share_again() -> None:
    """A rank restarted by torchrun or SLURM after a kill was refused for good (the name was taken,
    then 'the run has started')."""
    h = make(form_group=True, num_epochs=3)
    join_all(h)
    h.take()
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.take()
    assert h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/1") == \
        m.JoinAccepted(rank=1, world_size=3)
    assert h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/9") == \
        m.JoinRejected(reason="rank 1 already joined (from 'worker/1')")  # one live incarnation at a time
    h.advance(1.0)
    assert "worker/1" in [t for t, _ in sent(h, m.CoordHeartbeat)]  # it hears the coordinator while it waits
    for rank in (0, 2):  # the survivors finish epoch 0 and the slice of rank 1's rest each was handed
        h.deliver(m.MetricsMsg(rank=rank, epoch=0, avg_loss=0.5, batches_processed=45, epoch_ms=100.0,
                               samples_processed=45, share_complete_ms=100.0, extensions=1), sender=f"worker/{rank}")
    out = h.take()
    plans = {s.target: s.message for s in out if isinstance(s.message, m.StartEpoch) and s.target != "main"}
    assert set(plans) == {"worker/0", "worker/1", "worker/2"} and all(p.epoch == 1 for p in plans.values())
    assert any(isinstance(s.message, m.RequestNewNcclId) for s in out)  # the group takes it in


def test_a_rank_that_rejoined_in_the_last_epoch_takes_the_final_model_even_while_a_group_forms() -> None:
    """The rank lost in the last epoch came back while the survivors' group was still forming: the
    run ended with it waiting, without the model (it would write its own initialisation as the
    result), and the outcome counted it among the ranks that finished with the final model."""
    h = make(num_epochs=1)
    join_all(h)
    h.take()
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    assert h.actor.groups.search is not None  # the survivors' group forms
    h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/1")
    h.take()

    def answer_the_final_eval() -> list:
        asked = [s for s in h.outbox if isinstance(s.message, m.ExecuteEval) and s.message.final]
        for s in asked:
            h.deliver(m.EvalResult(rank=0, schedule_id=FINAL_EVAL, epoch=1, metric=0.8, elapsed_ms=1.0),
                      sender=s.target)
        return asked

    for rank in (0, 2):
        h.deliver(m.MetricsMsg(rank=rank, epoch=0, avg_loss=0.5, batches_processed=45, epoch_ms=100.0,
                               samples_processed=45, share_complete_ms=100.0, extensions=1), sender=f"worker/{rank}")
    answer_the_final_eval()
    out = h.take()
    assert not [s for s in out if isinstance(s.message, m.Shutdown)], \
        "the run ended while a rank that rejoined in the last epoch waited without the model"
    request = [s for s in out if isinstance(s.message, m.RequestNewNcclId)][-1]  # a group with it in
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"u", attempt=request.message.attempt),
              sender=request.target)
    syncs = [(s.target, s.message) for s in h.outbox if isinstance(s.message, m.SyncNow)]
    assert [t for t, _ in syncs] == ["worker/0", "worker/1", "worker/2"]  # it takes the final model
    settle(h)
    assert h.actor.ranks[1].has_model
    assert answer_the_final_eval()
    assert [t for t, _ in sent(h, m.Shutdown)] == ["worker/0", "worker/1", "worker/2"]


def test_a_rank_declared_dead_that_speaks_again_is_told_to_leave_once() -> None:
    """Stopped past the staleness timeout, then continued: it waited for plans that never came (a
    revived SIGSTOPped worker crashed)."""
    h = make()
    join_all(h)
    h.take()
    for _ in range(4):  # ranks 0 and 2 beat; rank 1 is stopped, and the runtime says so
        h.advance(1.0)
        for rank in (0, 2):
            h.deliver(m.Heartbeat(rank=rank, step_count=0), sender=f"worker/{rank}/heartbeat")
    h.down("worker/1", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    assert not h.actor.ranks[1].alive
    h.take()
    batch(h, 1)
    batch(h, 1)
    out = h.take()
    assert [(s.target, s.message) for s in out if isinstance(s.message, m.Evicted)] == [
        ("worker/1", m.Evicted(detail="rank 1 was counted dead (unreachable: no connection for 1.6 s, in epoch 0) "
                                      "and its share went to the others; the run goes on without it"))]
    assert not [s for s in out if isinstance(s.message, m.Shutdown)]  # not the end a finished rank hears


def test_a_rank_declared_dead_whose_heartbeat_thread_speaks_is_told_to_leave(caplog: pytest.LogCaptureFixture) -> None:
    """Cut off past the runtime's timeout, then reconnected while its training thread waits for a plan:
    only its heartbeat thread speaks.  Each beat was logged as a report "from an actor that is not
    that rank" (the rank's own thread, called an impostor every second) and the rank was never told
    to leave: it waited for plans that never came until it gave up on the coordinator."""
    h = make()
    join_all(h)
    h.take()
    h.down("worker/1", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    h.take()
    for _ in range(3):
        h.advance(1.0)
        h.deliver(m.Heartbeat(rank=1, step_count=0), sender="worker/1/heartbeat")
    evicted = [(s.target, s.message) for s in h.take() if isinstance(s.message, m.Evicted)]
    assert evicted == [("worker/1", m.Evicted(detail="rank 1 was counted dead (unreachable: no connection for 1.6 s, "
                                                      "in epoch 0) and its share went to the others; the run goes "
                                                      "on without it"))]  # once
    assert "not that rank" not in caplog.text
    h.deliver(m.Heartbeat(rank=1, step_count=0), sender="worker/7/heartbeat")  # another rank's thread still is
    assert "report from an actor that is not that rank" in caplog.text


def test_a_rank_that_leaves_before_the_run_ended_has_its_share_trained_by_the_others() -> None:
    """A loop that stopped early and called finish(): its Exiting latched a clean exit, the rank left
    the run without a word, and the epoch ended with its share not in the model (all 30 of its
    samples of epoch 0's 90 here: no sync took the 3 batches it trained), the summary none the wiser."""
    h = make(num_epochs=2)
    join_all(h)
    h.take()
    batch(h, 1, 3)
    h.take()
    h.deliver(m.Exiting(rank=1), sender="worker/1")
    out = h.take()
    handed = [msg for t, msg in ((s.target, s.message) for s in out) if isinstance(msg, m.ExtendPartition)
              and t.startswith("worker/")]
    assert sum(e.partition_size for e in handed) == 30 and {e.epoch for e in handed} == {0}
    (lost,) = [s.message for s in out if isinstance(s.message, m.RankLost)]
    assert lost.rank == 1 and lost.reason == "left before the run ended (Exiting)"
    h.down("worker/1", m.DownReason.EXITED, "status 0")  # its process ends: no second loss
    assert h.actor.failures == 1 and [r.rank for r in h.actor.alive()] == [0, 2]
    for rank in (0, 2):  # its share done by the others: only then does the epoch end
        metrics(h, rank, 0)
    assert not [s for s in h.take() if isinstance(s.message, m.EpochAggregated)]


def test_a_tick_goes_on_past_a_rank_whose_name_is_already_gone(caplog: pytest.LogCaptureFixture) -> None:
    """A heartbeat broadcast raised at the first rank that had just gone down, and the rest of the
    tick (the silence and rendezvous checks) did not run."""
    h = make(staleness_timeout=1.5)
    join_all(h)
    h.ctx.known.discard("worker/0")  # its process died; its Down has not been handled yet
    h.advance(2.0)
    warned = {r.getMessage() for r in caplog.records if "rank silent" in r.getMessage()}
    assert len(warned) == 3  # the silence check still ran for every rank


def test_joined_ranks_get_coordinator_heartbeats_while_waiting() -> None:
    h = make()
    h.ask(m.JoinRequest(rank=0, world_size=3, run_id=RUN, model_signature="s"), sender="worker/0")
    h.take()
    h.advance(2.0)
    assert [t for t, _ in sent(h, m.CoordHeartbeat)] == ["worker/0", "worker/0"]


def test_epoch_waits_for_a_handed_over_remainder() -> None:
    h = make(eval_every=0, final_eval=False)
    join_all(h)
    metrics(h, 0, 0)  # rank 0 is done with its slice...
    batch(h, 1, 5)
    h.down("worker/1", m.DownReason.DEAD)  # ...when rank 1 dies with 25 samples left
    metrics(h, 2, 0)
    assert h.actor.epoch == 0 and not h.actor.reports.history  # the remainder is still being trained on
    h.deliver(m.MetricsMsg(rank=0, epoch=0, avg_loss=0.4, batches_processed=13, epoch_ms=10.0, samples_processed=13,
                           extensions=1), sender="worker/0")
    assert not h.actor.reports.history  # rank 2's share of the remainder is not reported yet
    h.deliver(m.MetricsMsg(rank=2, epoch=0, avg_loss=0.4, batches_processed=12, epoch_ms=10.0, samples_processed=12,
                           extensions=1), sender="worker/2")
    assert [e.epoch for e in h.actor.reports.history] == [0] and h.actor.epoch == 1
    [(sink, aggregate)] = sent(h, m.EpochMetrics)
    assert sink == "main" and aggregate.per_rank_samples == [43, 0, 42]


def test_a_failed_session_is_formed_again() -> None:
    h = make(form_group=True)
    join_all(h)
    (request,) = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    gen = int(request.target[-1])
    h.deliver(m.NewNcclIdGenerated(rank=gen, uid=b"a"), sender=request.target)
    first = sent(h, m.NewNcclSession)
    assert {s.attempt for _, s in first} == {1}
    h.deliver(m.SessionFailed(rank=2, attempt=1, reason="timeout"), sender="worker/2")
    h.deliver(m.SessionFailed(rank=0, attempt=1, reason="timeout"), sender="worker/0")
    # Not yet: rank 1 may still be inside the attempt's formation. Re-formed at the first report, the
    # ranks still inside it joined the next one a formation timeout late, forever (a rank frozen after
    # its join hung the run on real processes).
    assert sent(h, m.RequestNewNcclId) == []
    h.deliver(m.SessionFailed(rank=1, attempt=1, reason="timeout"), sender="worker/1")
    (again,) = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(again.target[-1]), uid=b"b"), sender=again.target)
    assert {(s.uid, s.attempt) for _, s in sent(h, m.NewNcclSession)} == {(b"b", 2)}
    h.deliver(m.SessionFailed(rank=0, attempt=1, reason="late"), sender="worker/0")  # stale: ignored
    assert sent(h, m.RequestNewNcclId) == []


def test_a_member_that_never_reports_its_failed_formation_holds_the_new_one_back_only_so_long() -> None:
    h = make(form_group=True, rendezvous_timeout=5.0)
    join_all(h)
    (request,) = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"a"), sender=request.target)
    h.take()
    h.deliver(m.SessionFailed(rank=0, attempt=1, reason="timeout"), sender="worker/0")
    h.advance(4.0)
    assert sent(h, m.RequestNewNcclId) == []
    h.advance(2.0)  # rendezvous_timeout since the first report: formed again without rank 1 and 2's word
    assert len(sent(h, m.RequestNewNcclId)) == 1


def test_every_rank_failing_one_attempt_starts_one_new_attempt() -> None:
    """With one rank late at formation, each of the others timed out and said so; each report started
    a rendezvous of its own, and each new store closed the one just announced: every rank was lost."""
    h = make(form_group=True)
    join_all(h)
    (request,) = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"a"), sender=request.target)
    h.take()
    for rank in range(3):
        h.deliver(m.SessionFailed(rank=rank, attempt=1, reason="timeout"), sender=f"worker/{rank}")
    assert len(sent(h, m.RequestNewNcclId)) == 1


def test_a_sync_broken_by_a_death_is_redone_on_the_new_group() -> None:
    h = make()
    join_all(h)
    for rank in range(3):
        batch(h, rank, 2)
    h.deliver(m.SyncAck(rank=0, step_count=2), sender="worker/0")  # rank 0 got through before the death
    h.take()
    h.down("worker/1", m.DownReason.DEAD)
    (request,) = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"u"), sender=request.target)
    out = h.take()
    kinds = [(s.target, type(s.message).__name__) for s in out if s.target != "main"]
    assert kinds == [("worker/0", "NewNcclSession"), ("worker/2", "NewNcclSession"),
                     ("worker/0", "SyncNow"), ("worker/2", "SyncNow")]
    h.deliver(m.SyncAck(rank=0, step_count=2), sender="worker/0")
    assert h.actor.sync.armed_at is not None  # rank 2 has not acked the new cycle yet
    h.deliver(m.SyncAck(rank=2, step_count=2), sender="worker/2")
    assert h.actor.sync.armed_at is None


def test_heartbeat_thread_of_a_rank_is_accepted() -> None:
    h = make()
    join_all(h)
    h.advance(2.0)
    h.deliver(m.Heartbeat(rank=1, step_count=3), sender="worker/1/heartbeat")
    assert h.actor.ranks[1].last_seen == 2.0
    h.deliver(m.Heartbeat(rank=1, step_count=3), sender="worker/2/heartbeat")  # not rank 1's thread
    assert h.actor.ranks[1].last_seen == 2.0


# -- phases: the transition table ------------------------------------------------------------


def _state(h: ActorHarness) -> tuple:
    c = h.actor
    return (c.phase, c.epoch, c.global_step, c.sync.cycle, c.sync.armed_at, dict(c.sync.quota), c.roles.pending_eval,
            [(r.rank, r.steps_since_sync, r.total_steps, r.epoch_steps, r.reported_epoch, r.ms_per_batch)
             for r in c.ranks.values()], {e: dict(v) for e, v in c.reports.by_epoch.items()})


@pytest.mark.parametrize("report", [
    m.Batch(rank=0, batch_ms=10.0, step_count=1, batch_loss=0.5),
    m.SyncAck(rank=0, step_count=1),
    m.MetricsMsg(rank=0, epoch=0, avg_loss=0.5, batches_processed=1, epoch_ms=1.0, samples_processed=1,
                 share_complete_ms=1.0),
    m.EvalResult(rank=0, schedule_id=1, epoch=0, metric=0.5, elapsed_ms=1.0),
])
def test_a_report_before_the_run_started_is_refused_and_changes_nothing(report: m.Message,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A rank reporting work no plan asked for: the handlers took it (a Batch counted steps)."""
    h = make(world=2)
    h.ask(m.JoinRequest(rank=0, world_size=2, run_id=RUN, model_signature="sig"), sender="worker/0")
    before = _state(h)
    assert h.deliver(report, sender="worker/0") == []
    assert _state(h) == before and h.actor.phase == "joining"
    assert h.actor.refused == {(type(report).wire_tag(), "joining"): 1}
    line = next(r for r in caplog.records if "refused" in r.getMessage())
    assert type(report).wire_tag() in line.getMessage() and "joining" in line.getMessage()
    assert "rank=0" in line.getMessage()


def test_a_batch_after_every_epoch_was_aggregated_is_refused() -> None:
    h = make(world=1, num_epochs=1, dataset_size=2, sync_every=100, final_eval=False, eval_every=0)
    join_all(h, world=1)
    batch(h, 0, 2)
    metrics(h, 0, 0, batches=2)
    assert h.actor.phase == "running" and h.actor.sync.armed_at is not None  # the epoch's last sync is out
    settle(h)
    assert h.actor.phase == "stopping" and h.actor.global_step == 2
    h.take()
    before = _state(h)
    assert batch(h, 0, 1) == [] and _state(h) == before
    assert h.actor.refused == {("batch", "stopping"): 1}
    h.deliver(m.SyncAck(rank=0, step_count=2), sender="worker/0")
    assert h.actor.phase == "stopping" and h.actor.global_step == 2
    assert batch(h, 0, 1) == [] and h.actor.refused[("batch", "stopping")] == 2


def test_the_table_holds_every_move_and_refuses_any_other() -> None:
    from actorwire.actors.control._phases import TRANSITIONS, BadTransition, Event, Phase, next_phase

    assert next_phase(Phase.JOINING, Event.ALL_IN) is Phase.RUNNING
    with pytest.raises(BadTransition, match="^no move from phase stopping on ALL_IN$"):
        next_phase(Phase.STOPPING, Event.ALL_IN)
    reachable = {Phase.JOINING} | set(TRANSITIONS.values())
    assert reachable == set(Phase)


def test_every_message_the_coordinator_handles_is_taken_in_some_phase() -> None:
    from actorwire.actors.control._phases import ACCEPTED

    taken = set().union(*ACCEPTED.values())
    assert set(Coordinator._handlers) <= taken
    assert taken <= set(Coordinator._handlers)  # and the table names nothing without a handler


def test_the_docs_show_the_diagram_drawn_from_the_table() -> None:
    from conftest import ROOT

    from actorwire.actors.control._phases import diagram

    text = (ROOT / "docs" / "control-plane.md").read_text()
    assert diagram() in text, "run: python -m actorwire.actors.control._phases, and paste it into the docs"


def test_a_death_while_the_run_is_stopping_is_no_loss_and_no_save() -> None:
    """A rank killed during the teardown of a finished run turned it into ShutdownWithSave."""
    h = make(world=2, num_epochs=1, dataset_size=2, sync_every=100, final_eval=False, eval_every=0)
    join_all(h, world=2)
    for rank in (0, 1):
        batch(h, rank, 1)
        metrics(h, rank, 0, batches=1)
    for rank in (0, 1):  # the final consensus sync
        h.deliver(m.SyncAck(rank=rank, step_count=1), sender=f"worker/{rank}")
    h.take()
    assert h.actor.phase == "stopping"
    h.deliver(m.Exiting(rank=0), sender="worker/0")
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    assert h.actor.end.saved is None and sent(h, m.ShutdownWithSave) == []


def test_a_late_report_of_a_rank_counted_dead_is_refused_quietly() -> None:
    """A rank stopped past the staleness timeout and continued sends what it was doing (simulator
    seeds 3324 and 11784): refused, but it is no live rank's mistake."""
    h = make(world=2, num_epochs=1, dataset_size=4, sync_every=100, final_eval=False, eval_every=0)
    join_all(h, world=2)
    h.advance(2.5)
    batch(h, 0, 2)  # rank 0 trains its share; rank 1 is stopped past the runtime's timeout
    h.advance(1.5)
    h.down("worker/1", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    assert not h.actor.ranks[1].alive
    batch(h, 0, 2)  # and rank 1's remainder
    h.deliver(m.MetricsMsg(rank=0, epoch=0, avg_loss=0.5, batches_processed=4, epoch_ms=1.0, samples_processed=4,
                           share_complete_ms=1.0, extensions=1), sender="worker/0")
    settle(h)
    assert h.actor.phase == "stopping"
    batch(h, 1, 1)
    assert h.actor.refused[("batch", "stopping")] == 1 and not h.actor.refused_from_live


# -- status ---------------------------------------------------------------------------------


def test_status_shows_the_phase_the_epoch_and_every_rank() -> None:
    h = make()
    join_all(h)
    batch(h, 1, n=3, ms=20.0)
    h.advance(2.0)
    detail = h.actor.status(h.ctx.clock)
    assert detail.phase == "running" and detail.epoch == 0
    assert [(r.rank, r.state, r.steps) for r in detail.ranks] == [(0, "training", 0), (1, "training", 3),
                                                                 (2, "training", 0)]
    one = detail.ranks[1]
    assert one.ms_per_batch == pytest.approx(20.0) and one.silent_s == pytest.approx(2.0)
    h.deliver(m.Exiting(rank=2), sender="worker/2")
    assert h.actor.status(h.ctx.clock).ranks[2].state == "exited"


# -- how a run ends ----------------------------------------------------------------------------


def _finish(h: ActorHarness, ranks: list[int]) -> None:
    """Every live rank reports the epoch and acks its last sync; then ``ranks`` say ``Exiting``."""
    for r in h.actor.alive():
        metrics(h, r.rank, h.actor.epoch, batches=0)
    settle(h)
    assert h.actor.phase.value == "stopping"
    for rank in ranks:
        h.deliver(m.Exiting(rank=rank), sender=f"worker/{rank}")


def test_the_outcome_of_a_run_is_one_line_and_an_exit_code() -> None:
    """After a recovered death the CLI said 'every epoch trained by 0 of 3 ranks' (it counted the ranks
    in the run after they had all left) and the launch paths disagreed on the exit status."""
    clean = make(num_epochs=1, eval_every=0, final_eval=False)
    join_all(clean)
    _finish(clean, [0, 1, 2])
    outcome = clean.actor.outcome()
    assert (outcome.exit_code, outcome.finished) == (0, [0, 1, 2])
    assert outcome.line == "run ended cleanly: every epoch trained (1/1); 3 of 3 ranks finished with the final model"

    recovered = make(num_epochs=1, eval_every=0, final_eval=False)
    join_all(recovered)
    recovered.down("worker/1", m.DownReason.DEAD, "status -9")
    for rank in (0, 2):
        recovered.deliver(m.MetricsMsg(rank=rank, epoch=0, avg_loss=0.5, batches_processed=45, epoch_ms=1.0,
                                       samples_processed=45, share_complete_ms=1.0, extensions=1),
                          sender=f"worker/{rank}")
    settle(recovered)
    for rank in (0, 2):
        recovered.deliver(m.Exiting(rank=rank), sender=f"worker/{rank}")
    outcome = recovered.actor.outcome()
    assert outcome.exit_code == 0 and outcome.lost == {1: "lost in epoch 0 (dead: status -9)"}
    assert outcome.line == ("run ended: every epoch trained (1/1), recovered from 1 lost rank(s) (rank 1 lost in "
                            "epoch 0 (dead: status -9)); 2 of 3 ranks finished with the final model")

    too_few = make(num_epochs=2, min_world_size=3)
    join_all(too_few)
    too_few.down("worker/2", m.DownReason.DEAD, "status -9")
    outcome = too_few.actor.outcome()
    assert outcome.exit_code == 1 and too_few.actor.end.saved is m.SaveReason.TOO_FEW_RANKS
    assert outcome.line.startswith("run did not finish: 0 of 2 epochs trained (too_few_ranks: rank 2 lost in epoch 0")


def test_every_rank_lost_at_once_says_the_launcher_stopped_the_survivors() -> None:
    """Under torchrun one SIGKILL ended the run with 'all_ranks_lost' and nothing said why: torchrun's
    agent stops every worker of the group when one dies."""
    h = make()
    join_all(h)
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.advance(0.4)
    h.down("worker/0", m.DownReason.EXITED, "status -15")
    h.down("worker/2", m.DownReason.EXITED, "status -15")
    (saved,) = [msg for _, msg in sent(h, m.ShutdownWithSave)][:1]
    assert saved.reason is m.SaveReason.ALL_RANKS_LOST
    assert "all 3 ranks were lost within 0.4 s: the launcher stopped the survivors (torchrun's agent" in saved.detail
    lone = make(world=1)
    join_all(lone, world=1)
    lone.down("worker/0", m.DownReason.DEAD, "status -9")
    (saved,) = [msg for _, msg in sent(lone, m.ShutdownWithSave)][:1]
    assert "launcher stopped" not in saved.detail  # one rank's own death is just that


# -- whole-group restarts (torchrun --max-restarts) -----------------------------------------------


def _train_epoch(h: ActorHarness, epoch: int, ranks: list[int], per_rank: int = 30) -> None:
    """Each rank trains ``per_rank`` batches two at a time, every sync acked, then reports the epoch."""
    for _ in range(per_rank // 2):
        for rank in ranks:
            batch(h, rank, 2)
        settle(h)
    for rank in ranks:
        metrics(h, rank, epoch, batches=per_rank)
    settle(h)


def _form_group(h: ActorHarness) -> None:
    (request,) = [s for s in h.take() if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"g"), sender=request.target)


def _stopped_by_torchrun(h: ActorHarness) -> None:
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.advance(0.4)
    h.down("worker/0", m.DownReason.EXITED, "status -15")
    h.down("worker/2", m.DownReason.EXITED, "status -15")


def test_a_group_restarted_by_its_launcher_resumes_from_the_last_checkpoint_and_finishes() -> None:
    """torchrun stops every worker when one dies and, with --max-restarts, starts them all again; the
    coordinator had already ended the run, and the new workers waited 120 s for it and failed."""
    h = make(num_epochs=3, checkpoint_every=1, restart_wait=60.0, eval_every=0, final_eval=False)
    join_all(h)
    _train_epoch(h, 0, [0, 1, 2])
    (target, checkpoint) = sent(h, m.Checkpoint)[0]
    assert checkpoint.version == 1 and h.actor.global_step == 90
    h.deliver(m.CheckpointResult(rank=checkpoint.target_rank, version=1, elapsed_ms=1.0, path="/ck/epoch-1.pt"),
              sender=target)
    for rank in range(3):  # part of epoch 1, in the model of ranks that are about to die with it
        batch(h, rank, 2)
    settle(h)
    assert h.actor.global_step == 96
    _stopped_by_torchrun(h)
    assert sent(h, m.ShutdownWithSave) == [] and h.actor.phase.value == "restarting"
    h.advance(10.0)  # torchrun's agent takes a while to start the group again
    for rank in range(3):
        reply = h.ask(m.JoinRequest(rank=rank, world_size=3, run_id=RUN, model_signature="sig"),
                      sender=f"worker/{rank}")
        assert reply == m.JoinAccepted(rank=rank, world_size=3, resume_from="/ck/epoch-1.pt", resume_epoch=1)
    assert h.actor.phase.value == "running"
    assert h.actor.global_step == 90  # the steps of epoch 1 died with the ranks: trained again
    assert [e.epoch for e in h.actor.reports.history] == [0]
    out = h.take()
    plans = {s.target: s.message.epoch for s in out if isinstance(s.message, m.StartEpoch) and s.target != "main"}
    assert plans == {"worker/0": 1, "worker/1": 1, "worker/2": 1}
    (request,) = [s for s in out if isinstance(s.message, m.RequestNewNcclId)]
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"g"), sender=request.target)
    (seed,) = {s.message.source for s in h.outbox if isinstance(s.message, m.SyncNow)}
    assert seed is not None  # one rank's (restored) model is the run's again before anyone trains
    settle(h)
    _train_epoch(h, 1, [0, 1, 2])
    _train_epoch(h, 2, [0, 1, 2])
    assert h.actor.global_step == 270  # every epoch once in the final model
    for rank in range(3):
        h.deliver(m.Exiting(rank=rank), sender=f"worker/{rank}")
    outcome = h.actor.outcome()
    assert outcome.exit_code == 0 and outcome.epochs == 3
    assert "every rank was lost in epoch 1 and started again; resumed at epoch 1 from checkpoint " \
           "/ck/epoch-1.pt" in outcome.line


def test_a_restart_without_a_checkpoint_starts_the_run_over() -> None:
    h = make(num_epochs=2, restart_wait=60.0, eval_every=0, final_eval=False)
    join_all(h)
    _train_epoch(h, 0, [0, 1, 2])
    _stopped_by_torchrun(h)
    for rank in range(3):
        assert h.ask(m.JoinRequest(rank=rank, world_size=3, run_id=RUN, model_signature="sig"),
                     sender=f"worker/{rank}") == m.JoinAccepted(rank=rank, world_size=3)
    assert h.actor.global_step == 0 and h.actor.reports.history == [] and h.actor.epoch == 0


def test_a_restart_that_does_not_come_ends_the_run_at_restart_wait_saying_so() -> None:
    h = make(num_epochs=2, restart_wait=30.0)
    join_all(h)
    _stopped_by_torchrun(h)
    h.advance(29.0)
    assert sent(h, m.ShutdownWithSave) == []
    h.advance(2.0)
    (saved,) = [msg for _, msg in sent(h, m.ShutdownWithSave)]
    assert saved.reason is m.SaveReason.ALL_RANKS_LOST
    assert saved.detail == ("every rank was lost in epoch 0 and 0 of 3 came back within restart_wait 30 s "
                            "(min_world_size 1)")
    assert h.actor.outcome().exit_code == 1


def test_at_restart_wait_the_ranks_that_came_back_go_on() -> None:
    h = make(num_epochs=2, restart_wait=30.0)
    join_all(h)
    _stopped_by_torchrun(h)
    for rank in (0, 2):
        h.ask(m.JoinRequest(rank=rank, world_size=3, run_id=RUN, model_signature="sig"), sender=f"worker/{rank}")
    assert h.actor.phase.value == "restarting"
    h.advance(31.0)
    assert h.actor.phase.value == "running" and sorted(r.rank for r in h.actor.alive()) == [0, 2]


def test_without_restart_wait_every_rank_stopped_says_how_to_recover() -> None:
    h = make()
    join_all(h)
    _stopped_by_torchrun(h)
    (saved,) = [msg for _, msg in sent(h, m.ShutdownWithSave)][:1]
    assert "run torchrun with --max-restarts N and the coordinator with --restart-wait SECONDS" in saved.detail


def test_restart_wait_is_validated() -> None:
    with pytest.raises(Exception, match="restart_wait must be >= 0 seconds, got -1"):
        Coordinator(world_size=1, run_id=RUN, num_epochs=1, dataset_size=1, restart_wait=-1)


def test_the_defaults_form_the_group_at_the_start_and_ask_evals_only_of_ranks_that_can() -> None:
    """With the defaults every run logged "all-reduce failed; asking for a new group" three times at the
    start (no group was formed) and "eval failed; not retried ... no eval function given" after every
    epoch (evals went to ranks without an eval function)."""
    for evaluators in ([], [1]):
        h = ActorHarness(Coordinator(world_size=2, run_id=RUN, num_epochs=2, dataset_size=10, metrics_sink="main"),
                         name="coordinator", peers=["main"])
        h.start()
        for rank in range(2):
            h.ask(m.JoinRequest(rank=rank, world_size=2, run_id=RUN, evaluates=rank in evaluators),
                  sender=f"worker/{rank}")
        assert len(sent(h, m.RequestNewNcclId)) == 1  # the group is formed before anyone trains
        for rank in range(2):
            metrics(h, rank, 0, batches=0)
        asked = [target for target, _ in sent(h, m.ExecuteEval)]
        assert asked == [f"worker/{r}" for r in evaluators]


def test_the_docs_table_lists_every_setting_with_its_default() -> None:
    """`Coordinator(**config)` had no documented parameters: its docstring pointed to a page that did not list them."""
    import re

    import msgspec

    from actorwire.actors.control import CoordinatorConfig

    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "control-plane.md").read_text()
    section = page.split("## The coordinator's settings", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", section, re.M))
    want = {f.name: "required" if f.required else f"`{f.default!r}`" for f in msgspec.structs.fields(CoordinatorConfig)}
    assert rows == want


@pytest.mark.parametrize(("config", "error"), [
    (dict(wrold_size=3), "Coordinator: no setting named 'wrold_size'; the settings are world_size, run_id,"),
    (dict(world_size="three"), "Coordinator: Expected `int`, got `str` - at `$.world_size`"),
    (dict(num_epochs=None), "Coordinator: num_epochs must be given"),
])
def test_a_bad_setting_is_one_error_naming_it(config: dict, error: str) -> None:
    from actorwire.transport._errors import InvalidArgument

    full = dict(world_size=3, run_id=RUN, num_epochs=2, dataset_size=9)
    full.update(config)
    if config.get("num_epochs", 0) is None:
        del full["num_epochs"]
    if "wrold_size" in config:
        del full["world_size"]
    with pytest.raises(InvalidArgument) as info:
        Coordinator(**full)
    assert str(info.value).startswith(error)


def test_the_run_s_owner_hears_of_a_loss_and_of_the_group_formed_again_with_how_long_it_took() -> None:
    """After `demo --kill-rank 1` the story was split between the table and raw log lines: no line
    said that the group re-formed, with which ranks, how fast."""
    h = make()
    join_all(h)
    for rank in range(3):
        batch(h, rank, 1)
    h.take()
    h.advance(0.5)
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    out = h.take()
    (lost,) = [s.message for s in out if s.target == "main" and isinstance(s.message, m.RankLost)]
    assert lost == m.RankLost(rank=1, epoch=0, reason="dead: status -9", world_size=2)
    (request,) = [s for s in out if isinstance(s.message, m.RequestNewNcclId)]
    h.advance(1.5)
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"u", attempt=0), sender=request.target)
    assert [s for s in h.outbox if isinstance(s.message, m.GroupFormed)] == []  # formed only once a sync went through
    for rank in (0, 2):
        batch(h, rank, 1)
    settle(h)
    (formed,) = [s.message for s in h.take() if s.target == "main" and isinstance(s.message, m.GroupFormed)]
    assert formed == m.GroupFormed(ranks=[0, 2], world_size=2, seconds=1.5)


def test_a_lone_nccl_survivor_waits_to_see_whether_the_launcher_stops_it_too_when_restarts_are_expected() -> None:
    """The simulator (--torchrun): under NCCL the agent's stops left one survivor for a moment, the
    run saved as single_survivor at once, and the group torchrun started again found it over."""
    h = make(backend="nccl", restart_wait=60.0)
    join_all(h)
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.advance(0.2)
    h.down("worker/0", m.DownReason.EXITED, "status -15")
    assert sent(h, m.ShutdownWithSave) == []  # one left: not yet the end
    h.advance(0.1)
    h.down("worker/2", m.DownReason.EXITED, "status -15")
    assert h.actor.phase.value == "restarting"  # every rank went: a restart

    alone = make(backend="nccl", restart_wait=60.0)
    join_all(alone)
    alone.down("worker/1", m.DownReason.DEAD, "status -9")
    alone.down("worker/0", m.DownReason.DEAD, "status -9")
    alone.advance(4.0)
    assert sent(alone, m.ShutdownWithSave) == []
    alone.advance(2.0)  # the survivor is still there: a real lone survivor, the run ends as before
    (saved,) = [msg for target, msg in sent(alone, m.ShutdownWithSave) if target == "main"]
    assert saved.reason is m.SaveReason.SINGLE_SURVIVOR


def test_a_rank_restarted_while_the_run_finishes_rejoins_and_takes_the_final_model() -> None:
    """A rank died after the last epoch (during the final eval) and its launcher restarted it: the
    new incarnation was refused ("the run has started; rank 1 cannot join now") and exited 1, so a
    run that trained every epoch ended with a failed task (a failed SLURM job, a torchrun restart)."""
    h = make(num_epochs=1)
    join_all(h)
    h.take()
    for rank in range(3):
        metrics(h, rank, 0)
    assert h.actor.phase.value == "finishing"
    [asked] = [s for s in h.take() if isinstance(s.message, m.ExecuteEval) and s.message.final]
    h.down("worker/1", m.DownReason.DEAD, "status -9")
    h.take()
    reply = h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/1")
    assert reply == m.JoinAccepted(rank=1, world_size=3)
    h.deliver(m.EvalResult(rank=0, schedule_id=FINAL_EVAL, epoch=1, metric=0.8, elapsed_ms=1.0), sender=asked.target)
    out = h.take()
    assert not [s for s in out if isinstance(s.message, m.Shutdown)], "the run ended without the restarted rank"
    request = [s for s in out if isinstance(s.message, m.RequestNewNcclId)][-1]  # a group with it in
    h.deliver(m.NewNcclIdGenerated(rank=int(request.target[-1]), uid=b"u", attempt=request.message.attempt),
              sender=request.target)
    syncs = [s.target for s in h.outbox if isinstance(s.message, m.SyncNow)]
    assert syncs == ["worker/0", "worker/1", "worker/2"]  # the sync that gives it the final model
    settle(h)
    assert h.actor.ranks[1].has_model
    assert [t for t, _ in sent(h, m.Shutdown)] == ["worker/0", "worker/1", "worker/2"]
    h.down("worker/2", m.DownReason.DEAD, "status -9")  # once Shutdown is out, the run is over
    assert h.ask(m.JoinRequest(rank=2, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/2") == \
        m.JoinRejected(reason="the run has ended; rank 2 cannot join now")


def test_a_second_join_of_a_live_rank_while_the_run_finishes_names_who_holds_it() -> None:
    """It was refused with "the run has started; rank 1 cannot join now", which sends whoever reads
    it looking for a launch that came too late rather than a second process with the same rank."""
    h = make(num_epochs=1)
    join_all(h)
    for rank in range(3):
        metrics(h, rank, 0)
    assert h.actor.phase.value == "finishing"
    assert h.ask(m.JoinRequest(rank=1, world_size=3, run_id=RUN, model_signature="sig"), sender="worker/9") == \
        m.JoinRejected(reason="rank 1 already joined (from 'worker/1')")
    assert h.actor.ranks[1].name == "worker/1" and h.actor.ranks[1].alive


def test_the_final_eval_is_taken_only_from_the_live_rank_it_was_asked_of() -> None:
    """The run's end waits for the final eval's answer: any proven rank's answer ended it, one not
    asked (a buggy or lying peer) or one counted dead after it was asked (its share, and the eval,
    went to another rank), and everyone was told Shutdown while the eval that counts still ran."""
    h = make(num_epochs=1)
    join_all(h)
    h.take()
    for rank in range(3):
        metrics(h, rank, 0)
    [asked] = [s for s in h.take() if isinstance(s.message, m.ExecuteEval) and s.message.final]
    assert asked.target == "worker/0"

    def answer(rank: int) -> list:
        h.deliver(m.EvalResult(rank=rank, schedule_id=FINAL_EVAL, epoch=1, metric=0.8, elapsed_ms=1.0),
                  sender=f"worker/{rank}")
        return [s for s in h.take() if isinstance(s.message, (m.Shutdown, m.EvalBroadcast))]

    assert answer(2) == []  # not asked
    h.down("worker/0", m.DownReason.UNREACHABLE, "no connection for 1.6 s")
    [again] = [s for s in h.take() if isinstance(s.message, m.ExecuteEval) and s.message.final]
    assert again.target != "worker/0"
    assert answer(0) == []  # counted dead: its eval went to another rank
    assert [s.target for s in answer(int(again.target[-1])) if isinstance(s.message, m.Shutdown)] == [
        "worker/1", "worker/2"]


def _to_the_final_eval(h: ActorHarness) -> m.ExecuteEval:
    """Batches (worker/2 the fastest), the epoch's metrics, the final sync: the final eval's request."""
    for rank, ms in ((0, 50.0), (1, 50.0), (2, 5.0)):
        batch(h, rank, ms=ms)
    for rank in range(3):
        metrics(h, rank, 0)
    settle(h)
    [asked] = [s.message for s in h.take() if isinstance(s.message, m.ExecuteEval) and s.message.final]
    return asked


def test_the_final_eval_is_taken_from_the_rank_asked_after_the_eval_role_moved() -> None:
    """The holder of the other roles died while the final eval ran: every role moved to the
    fastest rank, and the answer of the rank that was asked must still end the run."""
    h = make(num_epochs=1)
    join_all(h, evaluators=[1, 2])
    h.take()
    assert _to_the_final_eval(h).target_rank == 1
    h.down("worker/0", m.DownReason.DEAD, "status -9")  # held the checkpoint and epoch roles
    assert h.actor.roles.eval == 2
    h.take()
    h.deliver(m.EvalResult(rank=1, schedule_id=FINAL_EVAL, epoch=1, metric=0.8, elapsed_ms=1.0), sender="worker/1")
    assert [t for t, _ in sent(h, m.Shutdown)] == ["worker/1", "worker/2"]


def test_the_final_eval_is_asked_again_when_the_rank_asked_dies_after_the_role_moved() -> None:
    h = make(num_epochs=1)
    join_all(h, evaluators=[1, 2])
    h.take()
    assert _to_the_final_eval(h).target_rank == 1
    h.down("worker/0", m.DownReason.DEAD, "status -9")  # the roles move to worker/2
    h.take()
    h.down("worker/1", m.DownReason.DEAD, "status -9")  # the rank asked: its eval died with it
    [again] = [s.message for s in h.take() if isinstance(s.message, m.ExecuteEval) and s.message.final]
    assert again.target_rank == 2
    h.deliver(m.EvalResult(rank=2, schedule_id=FINAL_EVAL, epoch=1, metric=0.8, elapsed_ms=1.0), sender="worker/2")
    assert [t for t, _ in sent(h, m.Shutdown)] == ["worker/2"]


def test_a_run_whose_only_evaluator_dies_in_the_final_eval_ends_without_it() -> None:
    """The run waited for an answer no rank could give."""
    h = make(num_epochs=1)
    join_all(h, evaluators=[0])
    h.take()
    assert _to_the_final_eval(h).target_rank == 0
    h.down("worker/0", m.DownReason.DEAD, "status -9")
    assert [t for t, _ in sent(h, m.Shutdown)] == ["worker/1", "worker/2"]
