"""Mailbox: FIFO, capacity with deadlines, close wakes waiters."""

from __future__ import annotations

import threading

import pytest

from actorwire.actors.runtime._mailbox import Mailbox
from actorwire.transport import SystemClosed


def test_fifo_and_nowait() -> None:
    box: Mailbox[int] = Mailbox()
    for i in range(5):
        assert box.put(i, timeout=1.0)
    assert [box.get_nowait() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert box.get_nowait() is None
    assert box.get(timeout=0.0) is None


def test_capacity_refuses_after_timeout_but_io_path_ignores_it() -> None:
    box: Mailbox[int] = Mailbox(capacity=2)
    assert box.put(1, timeout=0.0) and box.put(2, timeout=0.0)
    assert box.put(3, timeout=0.0) is False
    assert box.put_nowait(3) is False
    assert box.put(3, timeout=None) is True  # remote traffic, bounded by credit instead
    assert len(box) == 3


def test_blocked_putter_is_released_by_get() -> None:
    box: Mailbox[int] = Mailbox(capacity=1)
    box.put(1, timeout=0.0)
    done = threading.Event()

    def putter() -> None:
        assert box.put(2, timeout=10.0)
        done.set()

    t = threading.Thread(target=putter)
    t.start()
    assert box.get(timeout=1.0) == 1
    assert done.wait(10.0)
    t.join(10.0)
    assert box.get(timeout=1.0) == 2


def test_blocked_getter_is_woken_by_io_put() -> None:
    box: Mailbox[int] = Mailbox()
    got: list[int | None] = []
    t = threading.Thread(target=lambda: got.append(box.get(timeout=10.0)))
    t.start()
    box.put(7, timeout=None)
    t.join(10.0)
    assert got == [7]


def test_close_wakes_waiters_and_returns_leftovers() -> None:
    box: Mailbox[int] = Mailbox(capacity=1)
    errors: list[BaseException] = []
    box.put(1, timeout=0.0)

    def putter() -> None:
        try:
            box.put(2, timeout=30.0)
        except SystemClosed as exc:
            errors.append(exc)

    t = threading.Thread(target=putter)
    t.start()
    while not box._not_full._waiters:  # wait until the putter is blocked (bounded by pytest-timeout)
        threading.Event().wait(0.001)
    assert box.close() == [1]
    t.join(10.0)
    assert len(errors) == 1
    with pytest.raises(SystemClosed):
        box.put(3, timeout=0.0)
    with pytest.raises(SystemClosed):
        box.get(timeout=1.0)


def test_a_backlog_past_the_capacity_is_reported_once_per_doubling_and_again_after_catching_up() -> None:
    depths: list[int] = []
    box: Mailbox[int] = Mailbox(capacity=4, on_behind=depths.append)
    box.put_many([1, 2, 3, 4])
    assert depths == []  # at the capacity: not behind
    box.put_many([5])
    box.put_many([6, 7])
    assert depths == [5]  # past 4, then not again until past 8
    box.put_many(list(range(8, 20)))
    assert depths == [5, 19]  # past 8 and past 16 in one go: one report
    while len(box) >= 4:
        box.get_many(limit=8)
    box.put_many(list(range(10)))
    assert depths[-1] > 4 and len(depths) == 3  # caught up, then behind again: reported again


def test_an_unbounded_mailbox_never_reports_a_backlog() -> None:
    depths: list[int] = []
    box: Mailbox[int] = Mailbox(on_behind=depths.append)
    box.put_many(list(range(100_000)))
    assert depths == []
