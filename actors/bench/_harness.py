"""The benchmark harness behind ``actorwire bench``.

Every suite measures actorwire and its reference (raw pyzmq, memcpy, a device
copy, ...) in the same run and reports the ratio, because absolute figures on
a shared 2-core machine mean little while ratios hold.  Results print as a
table and, with ``--json PATH``, as::

    {"suite": ..., "machine": {...},
     "results": [{"name", "value", "unit", "baseline", "ratio"}]}
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from actorwire import __version__


class Result(msgspec.Struct):
    name: str
    value: float
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    #: Human note printed beside the row (the target); not part of the JSON.
    note: str = ""

    @classmethod
    def against(
        cls, name: str, value: float, unit: str, baseline: float | None, note: str = ""
    ) -> Result:
        ratio = value / baseline if baseline else None
        return cls(name, value, unit, baseline, ratio, note)


def machine_info() -> dict[str, object]:
    import zmq

    return {
        "host": platform.node(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "actorwire": __version__,
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "msgspec": msgspec.__version__,
    }


def rate(fn: Callable[[int], None], *, budget_s: float = 0.1, repeats: int = 3) -> float:
    """Best-of-``repeats`` calls per second of ``fn(n)``, which performs ``n`` operations."""
    n = 64
    while True:  # size the batch so one timing takes about budget_s
        t0 = time.perf_counter()
        fn(n)
        dt = time.perf_counter() - t0
        if dt >= budget_s / 4 or n >= 1 << 26:
            break
        n *= 4
    n = max(1, int(n * budget_s / max(dt, 1e-9)))
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = max(best, n / (time.perf_counter() - t0))
    return best


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.3g}"


def report(suite: str, results: list[Result], json_path: str | None, out=sys.stdout) -> None:
    width = max([len(r.name) for r in results] + [4])
    print(f"{'name':<{width}}  {'value':>9}  {'unit':<8} {'baseline':>9}  {'ratio':>6}  target", file=out)
    for r in results:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        print(
            f"{r.name:<{width}}  {_fmt(r.value):>9}  {r.unit:<8} {_fmt(r.baseline):>9}  "
            f"{ratio:>6}  {r.note}",
            file=out,
        )
    if json_path:
        doc = {
            "suite": suite,
            "machine": machine_info(),
            "results": [
                {k: getattr(r, k) for k in ("name", "value", "unit", "baseline", "ratio")}
                for r in results
            ],
        }
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {json_path}", file=out)
