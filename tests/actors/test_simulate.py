"""The control plane under the deterministic simulator: thousands of seeded runs, named scenarios,
and the seeds that found bugs (each failed before its fix)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from actorwire import messages as m
from actorwire.actors.control._ledger import remaining_slices, split_slices
from actorwire.actors.control._simulate import Fault, InvariantBroken, Simulation, run_seeds, simulate


def test_three_thousand_seeds_break_no_invariant() -> None:
    outcomes, broken = run_seeds(range(3000))
    assert broken == []
    assert {o.ended_by for o in outcomes} <= {"shutdown", "too_few_ranks", "all_ranks_lost"}
    assert sum(o.ended_by == "shutdown" for o in outcomes) > 2700  # most runs recover and finish


def test_a_seed_replays_exactly() -> None:
    first, second = Simulation(4242), Simulation(4242)
    a, b = first.run(), second.run()
    assert a == b and first.sunk == second.sunk and a.messages > 0


# Seeds of this simulator that broke an invariant on the coordinator of 32bc2c7 (before the fixes
# it forced): a seed names a run only for one version of the simulator's draws.
BROKE_BEFORE = {
    50: "a death among ranks holding handed-over slices: 11 samples of epoch 0 never trained",
    1513: "two live ranks trained the same sample (the remainder was one range from offset + done)",
    635: "a final eval lost with its rank: the run waited in 'finishing' forever",
    649: "a final eval lost with its rank, later in the run",
    124: "a second death during a rendezvous: a gloo run saved as single_survivor",
    453: "every survivor asked once and none answered in time: the run ended",
    2845: "a dead rank's late SyncAck finished a sync with nobody left: the handler raised",
}


@pytest.mark.parametrize("seed", sorted(BROKE_BEFORE))
def test_the_seeds_that_found_coordinator_bugs_now_hold(seed: int) -> None:
    outcome = simulate(seed)
    assert outcome.ended_by in ("shutdown", "all_ranks_lost", "too_few_ranks"), BROKE_BEFORE[seed]


def test_the_invariants_can_fail() -> None:
    """A simulator that cannot fail proves nothing: a coordinator that forgets a dead rank's
    remainder is caught."""
    sim = Simulation(50)
    original = type(sim.coordinator)._death

    def forgetful(self, ctx, r, why):  # type: ignore[no-untyped-def]
        r.slices = []  # its unfinished work is lost
        original(self, ctx, r, why)

    sim.coordinator._death = forgetful.__get__(sim.coordinator)  # type: ignore[method-assign]
    with pytest.raises(InvariantBroken, match="samples never trained"):
        sim.run()


# -- named scenarios (seed-protocols.md section 3) --------------------------------------------


SCENARIO = dict(ranks=3, epochs=2, dataset=600)


def _mid_epoch(seed: int = 7) -> float:
    """When the fault-free run of ``seed`` is halfway through its first epoch."""
    sim = Simulation(seed, faults=[], **SCENARIO)
    sim.run()
    start = next(t for t, msg in sim.sunk if isinstance(msg, m.StartEpoch))
    end = next(t for t, msg in sim.sunk if isinstance(msg, m.EpochMetrics))
    return (start + end) / 2


def _run(faults: list[Fault], seed: int = 7) -> Simulation:
    sim = Simulation(seed, faults=faults, **SCENARIO)
    sim.run()
    return sim


def test_a_clean_exit_is_never_a_death() -> None:
    sim = _run([])
    assert isinstance(sim.ended, m.Shutdown) and sim.coordinator.failures == 0
    assert sim.exited_cleanly == {0, 1, 2}


def test_a_hard_death_mid_epoch_hands_its_rest_to_the_survivors() -> None:
    sim = _run([Fault("kill", _mid_epoch(), 1)])
    assert sim.coordinator.failures == 1 and len(sim.coordinator.history) == sim.epochs


def test_a_rank_dead_before_it_joined_is_not_waited_for() -> None:
    sim = _run([Fault("kill_before_join", 0.01, 2)])
    assert 2 in sim.coordinator.lost_at_start and sim.ended_at < 5.0


def test_a_stop_shorter_than_the_staleness_timeout_is_not_a_death() -> None:
    sim = _run([Fault("pause_short", _mid_epoch(), 0, duration=1.0)])
    assert sim.coordinator.failures == 0


def test_a_stop_longer_than_the_staleness_timeout_is_a_death_and_the_run_goes_on() -> None:
    sim = _run([Fault("pause_long", _mid_epoch(), 0, duration=7.0)])
    assert sim.coordinator.failures == 1 and len(sim.coordinator.history) == sim.epochs


def test_two_deaths_at_once_leave_a_survivor_that_finishes() -> None:
    sim = _run([Fault("kill_two", _mid_epoch(), 0, other=1)])
    assert sim.coordinator.failures == 2 and len(sim.coordinator.history) == sim.epochs


def test_a_slow_rank_is_not_dead() -> None:
    sim = _run([Fault("slow", _mid_epoch(), 1, duration=3.0)])
    assert sim.coordinator.failures == 0


# -- the ledger's slice arithmetic -----------------------------------------------------------


def test_what_is_left_follows_the_workers_batching_slice_by_slice() -> None:
    # 10 samples in batches of 4 take 3 batches (4, 4, 2); then the handed-over slice.
    assert remaining_slices([(0, 10), (50, 6)], batches=0, batch_size=4) == [(0, 10), (50, 6)]
    assert remaining_slices([(0, 10), (50, 6)], batches=2, batch_size=4) == [(8, 2), (50, 6)]
    assert remaining_slices([(0, 10), (50, 6)], batches=3, batch_size=4) == [(50, 6)]
    assert remaining_slices([(0, 10), (50, 6)], batches=4, batch_size=4) == [(54, 2)]
    assert remaining_slices([(0, 10), (50, 6)], batches=9, batch_size=4) == []


def test_slices_are_dealt_evenly_in_order_across_takers() -> None:
    assert split_slices([(0, 5), (100, 4)], 3) == [[(0, 3)], [(3, 2), (100, 1)], [(101, 3)]]
    assert split_slices([(7, 2)], 3) == [[(7, 1)], [(7 + 1, 1)], []]
    assert split_slices([], 2) == [[], []]


def test_the_command_line_replays_a_seed_and_runs_many() -> None:
    one = subprocess.run([sys.executable, "-m", "actorwire", "simulate", "--seed", "50"],
                         capture_output=True, text=True, timeout=60)
    assert one.returncode == 0, one.stdout + one.stderr
    assert one.stdout.startswith("seed 50: shutdown at ") and "0 broken" in one.stdout
    many = subprocess.run([sys.executable, "-m", "actorwire", "simulate", "--seeds", "200", "--ranks", "4"],
                          capture_output=True, text=True, timeout=120)
    assert many.returncode == 0 and "200 seed(s) in " in many.stdout and ": 0 broken" in many.stdout


def test_a_rank_hung_outside_the_collective_is_not_dead_and_the_run_finishes() -> None:
    """Its peers' all-reduce times out; they report it at once and the group is formed again (they
    used to wait 60 s for a group nobody was forming, then the coordinator's 300 s reduce stall)."""
    mid = _mid_epoch()
    sim = _run([Fault("hang", mid, 1, duration=15.0)])
    assert sim.coordinator.failures == 0 and isinstance(sim.ended, m.Shutdown)
    assert sim.ended_at < mid + 15.0 + 30.0


def test_a_thousand_seeds_with_restarted_ranks_break_no_invariant() -> None:
    """Each seed also kills one rank and starts it again, as torchrun or SLURM would: it rejoins."""
    outcomes, broken = run_seeds(range(1000), restarts=True)
    assert broken == []
    assert sum(o.ended_by == "shutdown" for o in outcomes) > 850


def test_a_restarted_rank_rejoins_and_trains_again() -> None:
    mid = _mid_epoch()
    sim = Simulation(7, faults=[Fault("restart", mid, 1, duration=0.5)], ranks=3, epochs=3, dataset=600)
    sim.run()
    state = sim.coordinator.ranks[1]
    assert state.alive and not state.waiting and sim.ranks[1] is not sim.incarnations[1]
    assert sim.ranks[1].trained  # the new incarnation trained a share of a later epoch
    assert isinstance(sim.ended, m.Shutdown) and sim.coordinator.failures == 1
