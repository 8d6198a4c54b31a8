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
    """The results as a table (rich: colour only on a terminal, and never with NO_COLOR)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column, justify in (("name", "left"), ("value", "right"), ("unit", "left"), ("baseline", "right"),
                            ("ratio", "right"), ("target", "left")):
        table.add_column(column, justify=justify, style="bold" if column == "ratio" else None, overflow="fold")  # type: ignore[arg-type]
    for r in results:
        table.add_row(r.name, _fmt(r.value), r.unit, _fmt(r.baseline), f"{r.ratio:.2f}" if r.ratio is not None else "-",
                      r.note)
    console = Console(file=out, highlight=False)
    if not console.is_terminal:  # piped or redirected: whole rows (names folded at 80 columns read badly)
        console = Console(file=out, highlight=False, width=max(console.width, 160))
    console.print(table)
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
