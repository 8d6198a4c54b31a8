"""One thread per system that fires actors' timers into their mailboxes."""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from typing import Any

from actorwire.messages import Envelope
from actorwire.messages.kinds import TimerFired
from actorwire.transport.internal import InvalidArgument, WrongType


def check_delay(key: str, delay: float, periodic: bool) -> None:
    """Refuse a delay no timer can keep: negative, not finite (inf stopped the timers thread of its
    process; nan fired at once and broke the heap's order), or a period of 0."""
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise WrongType(f"timer {key!r}: the delay is a number of seconds, got {type(delay).__name__}")
    if not 0 <= delay < math.inf:
        raise InvalidArgument(f"timer {key!r}: the delay must be a finite number of seconds >= 0, got {delay}")
    if periodic and delay == 0:
        raise InvalidArgument(f"timer {key!r}: a periodic timer needs a positive period")


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any, str, float, int]] = []
        self._live: dict[tuple[int, str], int] = {}  # (cell id, key) -> generation
        self._gen = itertools.count(1)
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="actorwire-timers", daemon=True)
        self._thread.start()

    def start(self, cell: Any, key: str, delay: float, periodic: bool) -> None:
        check_delay(key, delay, periodic)
        with self._cond:
            gen = next(self._gen)
            self._live[(id(cell), key)] = gen
            heapq.heappush(self._heap, (time.monotonic() + delay, gen, cell, key,
                                        delay if periodic else 0.0, 1))
            self._cond.notify()

    def cancel(self, cell: Any, key: str) -> None:
        with self._cond:
            self._live.pop((id(cell), key), None)

    def cancel_all(self, cell: Any) -> None:
        with self._cond:
            for k in [k for k in self._live if k[0] == id(cell)]:
                del self._live[k]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    # At most TIMEOUT_MAX at a time: a timer days away must not overflow the wait.
                    self._cond.wait(None if not self._heap else
                                    min(threading.TIMEOUT_MAX, max(0.0, self._heap[0][0] - time.monotonic())))
                if self._closed:
                    return
                due, gen, cell, key, period, count = heapq.heappop(self._heap)
                if self._live.get((id(cell), key)) != gen:
                    continue
                if period:
                    heapq.heappush(self._heap, (due + period, gen, cell, key, period, count + 1))
                else:
                    del self._live[(id(cell), key)]
            cell.deliver_timer(TimerFired(key=key, count=count),
                               Envelope(sender=cell.name, target=cell.name, seq=0,
                                        mono_ns=time.monotonic_ns(), wall_ns=time.time_ns()))
