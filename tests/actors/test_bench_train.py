"""``actorwire bench train``: the three variants run and report; the actorwire ranks end with one model."""

from __future__ import annotations

import io

import pytest

from actorwire.actors.bench import _train


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_train_runs_every_variant_and_reports_against_ddp() -> None:
    results = {r.name: r for r in _train.run(ranks=2, epochs=2, progress=io.StringIO())}
    assert set(results) == {"train.single", "train.ddp", "train.actorwire", "train.accuracy.ddp",
                            "train.accuracy.actorwire", "train.actorwire.inside", "train.actorwire.report",
                            "train.actorwire.reduce", "train.actorwire.syncs", "train.actorwire.own",
                            "train.actorwire.own_step"}
    ddp = results["train.ddp"].value
    assert ddp > 0 and results["train.actorwire"].baseline == ddp and results["train.actorwire"].ratio is not None
    assert 10 < results["train.accuracy.actorwire"].value <= 100  # two epochs: well above chance (10%)
    assert 0 < results["train.actorwire.report"].value <= results["train.actorwire.inside"].value < 100
    # The collectives and the control plane's own CPU are parts of the time inside actorwire calls
    # (each the largest over the ranks, so compared one by one).
    for part in ("reduce", "own"):
        assert 0 < results[f"train.actorwire.{part}"].value <= results["train.actorwire.inside"].value
    assert results["train.actorwire.own_step"].value > 0
    # At least the epoch's own sync at each epoch end (the first epoch's start aside).
    assert results["train.actorwire.syncs"].value >= 1


def test_bench_train_says_what_it_needs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(_train, "EXAMPLES", tmp_path)
    with pytest.raises(_train.TrainBenchError, match="bench train needs a checkout: .*digits.py is not there"):
        _train.run(epochs=1)
