"""The control plane at scale in virtual time (``actorwire simulate --scale``): the real coordinator
through a two-level relay tree, light ranks, a cost per message (deterministic: no wall time)."""

from __future__ import annotations

import dataclasses

import pytest

from actorwire.actors.control._simulate._scale import RANKS_PER_HOST, Costs, ScaleSimulation


def test_a_two_level_tree_trains_every_epoch_and_aggregates_the_flat_sums_exactly() -> None:
    sim = ScaleSimulation(400, racks=True, hosts_per_rack=4, epochs=2, seconds_per_epoch=1.0)
    outcome = sim.run()
    assert outcome.epochs == 2 and outcome.lost == 0
    assert outcome.hosts == 50 and outcome.racks == 13
    assert outcome.batch_rate >= 0.9
    assert sim.trained == 400 * 10 * 2  # every sample of every epoch, once
    assert sorted(sim.sunk) == [h.epoch for h in sim.coordinator.reports.history] == [0, 1]
    for metrics in sim.sunk.values():  # folded twice on the way up, still the flat sums
        reports = sim.reported[metrics.epoch]
        assert sum(metrics.per_rank_samples) == sum(r.samples_processed for r in reports) == 400 * 10
        batches = sum(r.batches_processed for r in reports)
        assert metrics.avg_loss == pytest.approx(sum(r.avg_loss * r.batches_processed for r in reports) / batches,
                                                 rel=1e-12)
    assert outcome.cycles >= 2 and outcome.down_ms and outcome.up_ms


def test_the_rack_level_divides_what_the_coordinator_takes() -> None:
    flat = ScaleSimulation(512, racks=False, epochs=1, seconds_per_epoch=1.0).run()
    tree = ScaleSimulation(512, racks=True, hosts_per_rack=8, epochs=1, seconds_per_epoch=1.0).run()
    assert flat.hosts == tree.hosts == 512 // RANKS_PER_HOST and tree.racks == 8
    assert flat.epochs == tree.epochs == 1
    assert tree.coordinator_msgs_per_s * 4 < flat.coordinator_msgs_per_s


def test_a_saturated_coordinator_shows_as_a_busy_share_near_one_and_a_lower_batch_rate() -> None:
    """The cost model is what limits a level: a coordinator 100 times slower per message saturates."""
    slow = Costs(coordinator_message_us=2500.0)
    outcome = ScaleSimulation(2000, racks=False, epochs=1, seconds_per_epoch=1.0, costs=slow).run()
    fast = ScaleSimulation(2000, racks=False, epochs=1, seconds_per_epoch=1.0).run()
    assert outcome.coordinator_busy > 0.9 > fast.coordinator_busy
    assert outcome.batch_rate < fast.batch_rate


def test_the_same_run_twice_is_the_same_run() -> None:
    a = ScaleSimulation(300, racks=True, hosts_per_rack=4, epochs=1, seconds_per_epoch=1.0, seed=3).run()
    b = ScaleSimulation(300, racks=True, hosts_per_rack=4, epochs=1, seconds_per_epoch=1.0, seed=3).run()
    assert dataclasses.asdict(a) == dataclasses.asdict(b)


def test_the_coordinator_visits_every_rank_for_silence_an_eighth_of_the_staleness_timeout_apart() -> None:
    """The silence check is a pass over every rank (0.6 us a rank at 10,000, measured); at every
    0.5 s tick it was most of the timer's time, for a warning due after ``staleness_timeout`` (30 s
    here): now every 3.75 s."""
    sim = ScaleSimulation(200, racks=True, hosts_per_rack=4, epochs=3, seconds_per_epoch=3.0)
    outcome = sim.run()
    assert outcome.epochs == 3
    assert 1 <= sim.silence_checks <= outcome.seconds / (30.0 / 8) + 1


def test_measure_times_every_kind_of_the_coordinators_work_and_the_cli_simulates_with_it() -> None:
    from actorwire.actors.control._simulate._scale import measure_costs

    measured = measure_costs(160)
    kinds = {"batch_us", "beat_us", "ack_us", "metrics_us", "broadcast_us", "each_us", "join_us", "tick_us"}
    # Every kind this run has (its ranks all train: no report carries a beat alone, which a kind
    # without entries leaves out of what is measured).
    assert kinds - {"beat_us"} <= set(measured) <= kinds
    assert all(us > 0 for us in measured.values())
    costs = dataclasses.replace(Costs(), **measured)  # what `simulate --scale N --measure` runs with
    assert ScaleSimulation(160, epochs=1, seconds_per_epoch=1.0, costs=costs).run().epochs == 1


def test_measure_charges_the_timer_for_its_pass_over_the_ranks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tick_us`` is the silence check's pass, per rank: the rest of a tick is what it sends, which
    the model charges per message.  It was every tick's time over the passes: at 100,000 ranks 11.4
    us a rank (the heartbeats' sends counted twice, and the start-up's ticks), 0.58 for the pass.
    A clock that moves 1 us per reading makes each timed call cost 1 us: one a pass, over the ranks
    the coordinator held at it (all 160 from the first plan on; fewer while they joined), where
    every tick's time over the passes made it about 7.5 ticks' worth (a pass every eighth of the
    30 s staleness timeout, a tick every 0.5 s)."""
    import time

    from actorwire.actors.control._simulate._scale import measure_costs

    ticks = iter(range(10**9))
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) * 1e-6)
    measured = measure_costs(160)
    assert 1 / 160 <= measured["tick_us"] < 2 / 160
    assert measured["join_us"] == pytest.approx(1.0)  # each join timed alone
