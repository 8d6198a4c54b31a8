"""The scale benchmark runs end to end (a small instance; its figures are not asserted)."""

from __future__ import annotations

import io

import pytest

from actorwire.actors.bench import _scale as _bench_scale


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_scale_bench_runs_every_epoch_with_every_rank() -> None:
    progress = io.StringIO()
    rows = {r.name: r for r in _bench_scale.run(workers=24, processes=2, epochs=2, seconds_per_epoch=1.0,
                                                progress=progress)}
    assert "epoch 1 aggregated" in progress.getvalue()
    assert set(rows) == {"scale.workers", "scale.coordinator_cpu", "scale.epoch_ms", "scale.batch_rate",
                         "scale.aggregation_ms"}
    assert rows["scale.batch_rate"].value > 0 and rows["scale.epoch_ms"].value > 0
    assert "epochs aggregated" not in rows["scale.workers"].note or "2/2" in rows["scale.workers"].note
