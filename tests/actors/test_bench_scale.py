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
    assert set(rows) == {"scale.workers", "scale.24.coordinator_cpu", "scale.24.busiest_sim_cpu", "scale.24.epoch_ms",
                         "scale.24.batch_rate", "scale.24.aggregation_ms"}
    assert rows["scale.24.batch_rate"].value > 0 and rows["scale.24.epoch_ms"].value > 0
    # Sustained, unless this machine was too loaded to keep 10 Hz: then the progress says why.
    assert rows["scale.workers"].value == 24 or "not sustained" in progress.getvalue()
