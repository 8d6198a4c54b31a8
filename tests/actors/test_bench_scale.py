"""The scale benchmark runs end to end (small instances; its figures are not asserted)."""

from __future__ import annotations

import io

import pytest

from actorwire.actors.bench import _scale as _bench_scale


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("relay", [True, False])
def test_scale_bench_runs_every_epoch_with_every_rank(relay: bool) -> None:
    progress = io.StringIO()
    rows = {r.name: r for r in _bench_scale.run(workers=24, relay=relay, processes=2, epochs=2,
                                                seconds_per_epoch=1.0, progress=progress)}
    assert "24: epoch 1 aggregated" in progress.getvalue()
    assert ("a relay per process" in progress.getvalue()) is relay
    assert set(rows) == {"scale.workers", *(f"scale.24.{k}" for k in (
        "batch_rate", "aggregation_ms", "aggregation_worst_ms", "lost", "coordinator_cpu", "busiest_sim_cpu",
        "epoch_ms", "start_s"))}
    # A share of nominal: under 1, or a little over (a rank's first batch of an epoch goes at once).
    assert 0 < rows["scale.24.batch_rate"].value <= 1.2 and rows["scale.24.epoch_ms"].value > 0
    assert rows["scale.24.lost"].value == 0
    assert 0 < rows["scale.24.start_s"].value < float("inf")  # every rank joined and the run began
    assert "saturated first: " in rows["scale.24.coordinator_cpu"].note
    # Sustained, unless this machine was too loaded to keep 10 Hz: then the progress says why.
    assert rows["scale.workers"].value == 24 or "not sustained" in progress.getvalue()
