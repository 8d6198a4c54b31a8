"""``actorwire bench record``: the cost of recording, and how fast logs read.

* ``record.tell.ipc``: Batch tells between two processes handled per second
  with every actor recorded, against the same run with recording off; three
  rounds, off and on alternating, the best of each (one round of each swung
  the ratio from 0.7 to 0.9 on a shared 2-core VM).
* ``record.read``: records per second through ``actorwire log stats``'s reader, the best of
  three reads of the first recording (one read swung from 0.5M to 0.9M records/s on the same
  file, minutes apart, on a shared 2-core VM).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from typing import Any

from actorwire.actors.bench._bus import Sink, _measure_tell
from actorwire.actors.bench._harness import Result
from actorwire.actors.cli._log_stats import collect_stats


def _tell_rate(n: int, record: str | None) -> float:
    from actorwire.actors.runtime._system import ActorSystem

    with ActorSystem(record=record) as system:
        inbox = system.inbox("bench")
        system.spawn(Sink(n, "bench"), "sink")
        system.spawn_process({"flooder": "actorwire.actors.bench._bus:Flooder"})
        return _measure_tell(system, inbox, "flooder", n)


def run(n: int = 200_000, progress: Any = sys.stderr) -> list[Result]:
    directory = tempfile.mkdtemp(prefix="actorwire-bench-record-")
    try:
        offs, ons = [], []
        for round_ in range(3):
            offs.append(_tell_rate(n, None))
            ons.append(_tell_rate(n, f"{directory}/{round_}"))
        off, on = max(offs), max(ons)
        results = [Result.against("record.tell.ipc", on, "msg/s", off, ">= 0.9 of off")]
        rates = []
        for _ in range(3):
            t0 = time.perf_counter()
            stats = collect_stats([f"{directory}/0"])
            rates.append(stats["records"] / (time.perf_counter() - t0))
        results.append(Result.against("record.read", max(rates), "rec/s", None, ">= 1M rec/s"))
        return results
    finally:
        shutil.rmtree(directory, ignore_errors=True)
