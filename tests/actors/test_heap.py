"""``settle_heap`` (actors/runtime/_launch.py): what a process that owns its interpreter does once
its long-lived state exists."""

from __future__ import annotations

import gc
import weakref

from actorwire.actors.runtime._launch import settle_heap


class _Cell:
    other: object = None


def test_garbage_cycles_are_freed_first_and_what_survives_leaves_the_collector_s_passes() -> None:
    cycle = _Cell()
    cycle.other = cycle  # garbage only the collector can free
    gone = weakref.ref(cycle)
    del cycle
    kept = [_Cell()]
    try:
        frozen = settle_heap()
        assert gone() is None  # collected, not frozen as garbage
        assert frozen == gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # out of every generation the collector walks
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())
