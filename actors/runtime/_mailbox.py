"""A bounded, thread-safe FIFO with blocking and non-blocking ends.

Used for each actor's inbox and for user-thread mailboxes.  ``put`` blocks
while full (that is the backpressure a same-process sender feels), up to a
deadline; ``close`` wakes every waiter with ``SystemClosed``.

Messages from other processes are appended past the capacity (their senders
are held by credit instead): ``on_behind(depth)`` says when such a backlog
passes the capacity, and again each time it doubles, so an overloaded actor
is named rather than silently slow.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from actorwire.transport.internal import SystemClosed

T = TypeVar("T")


class Mailbox(Generic[T]):
    __slots__ = ("_items", "_capacity", "_lock", "_not_empty", "_not_full", "_closed", "_waiting", "on_behind",
                 "_behind_at", "_woken")

    def __init__(self, capacity: int = 0, on_behind: Callable[[int], None] | None = None) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._capacity = capacity  # 0: unbounded
        self.on_behind = on_behind
        self._behind_at = capacity or 0  # the depth that is reported next (0: never)
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._closed = False
        self._waiting = False
        self._woken = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, item: T, timeout: float | None) -> bool:
        """Append ``item``; False if still full after ``timeout`` seconds.

        ``timeout=None`` appends regardless of capacity: the I/O thread uses it
        for messages from other processes, whose senders are bounded by credit
        and must not stall every other actor of this process.
        """
        if timeout is None:
            # The I/O thread's path: no capacity check, so no lock unless a
            # consumer is (about to be) waiting.  See get() for the handshake.
            if self._closed:
                raise SystemClosed("mailbox is closed")
            self._items.append(item)
            if self._waiting:
                with self._lock:
                    self._not_empty.notify()
            return True
        with self._lock:
            if self._closed:
                raise SystemClosed("mailbox is closed")
            if self._capacity and len(self._items) >= self._capacity:
                deadline = None if timeout is None else time.monotonic() + timeout
                while len(self._items) >= self._capacity:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._not_full.wait(left)
                    if self._closed:
                        raise SystemClosed("mailbox is closed")
            self._items.append(item)
            if self._waiting:
                self._not_empty.notify()
        return True

    def put_many(self, items: list[T]) -> None:
        """Append ``items`` regardless of capacity (the I/O thread's bulk path)."""
        if self._closed:
            raise SystemClosed("mailbox is closed")
        self._items.extend(items)
        if self._behind_at and len(self._items) > self._behind_at:
            self._report_behind()
        if self._waiting:
            with self._lock:
                self._not_empty.notify()

    def _report_behind(self) -> None:
        depth = len(self._items)
        while self._behind_at < depth:
            self._behind_at *= 2
        if self.on_behind is not None:
            self.on_behind(depth)

    def get_many(self, limit: int = 1024) -> list[T]:
        """Wait for at least one item, then take up to ``limit`` of them, oldest first."""
        first = self.get()
        assert first is not None  # get() without a timeout waits until there is an item
        out = [first]
        popleft = self._items.popleft
        try:
            for _ in range(min(limit - 1, len(self._items))):
                out.append(popleft())
        except IndexError:
            pass
        if self._capacity:
            if self._behind_at > self._capacity and len(self._items) < self._capacity:
                self._behind_at = self._capacity  # caught up: the next backlog is reported again
            with self._lock:
                self._not_full.notify_all()
        return out

    def wait(self) -> None:
        """Block until an item is queued or :meth:`wake` is called; ``SystemClosed`` once closed and empty.

        With :meth:`take_many`, for a consumer that must take items at a moment of its choosing
        (inside a lock of its own) rather than when they arrive."""
        if self._items:
            return
        with self._lock:
            self._waiting = True  # before looking again: see get()
            try:
                while not self._items and not self._woken:
                    if self._closed:
                        raise SystemClosed("mailbox is closed")
                    self._not_empty.wait()
            finally:
                self._waiting = False
                self._woken = False

    def wake(self) -> None:
        """Release a consumer blocked in :meth:`wait` with nothing queued."""
        with self._lock:
            self._woken = True
            self._not_empty.notify_all()

    def take_many(self, limit: int = 1024) -> list[T]:
        """Take up to ``limit`` items, oldest first, without waiting (possibly none)."""
        out: list[T] = []
        popleft = self._items.popleft
        try:
            for _ in range(min(limit, len(self._items))):
                out.append(popleft())
        except IndexError:
            pass
        if out and self._capacity:
            if self._behind_at > self._capacity and len(self._items) < self._capacity:
                self._behind_at = self._capacity
            with self._lock:
                self._not_full.notify_all()
        return out

    def put_nowait(self, item: T) -> bool:
        return self.put(item, timeout=0.0)

    def get(self, timeout: float | None = None) -> T | None:
        """Pop the oldest item, waiting up to ``timeout`` (None: forever); None on timeout."""
        items = self._items
        if items:  # fast path without the lock: deque.popleft is atomic
            try:
                item = items.popleft()
            except IndexError:
                pass
            else:
                if self._capacity:
                    self._wake_putter()
                return item
        with self._lock:
            deadline = None if timeout is None else time.monotonic() + timeout
            # Announce the wait *before* looking again: a put that appends
            # without the lock checks the flag after appending, so either we
            # see its item here or it sees the flag and notifies.
            self._waiting = True
            try:
                while not items:
                    if self._closed:
                        raise SystemClosed("mailbox is closed")
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    self._not_empty.wait(left)
            finally:
                self._waiting = False
            item = items.popleft()
            if self._capacity:
                self._not_full.notify()
            return item

    def get_nowait(self) -> T | None:
        try:
            item = self._items.popleft()
        except IndexError:
            if self._closed:
                raise SystemClosed("mailbox is closed") from None
            return None
        if self._capacity:
            self._wake_putter()
        return item

    def _wake_putter(self) -> None:
        if len(self._items) >= self._capacity - 1:
            with self._lock:
                self._not_full.notify()

    def close(self) -> list[T]:
        """Refuse further puts, wake all waiters, and return what was still queued."""
        with self._lock:
            self._closed = True
            left = list(self._items)
            self._items.clear()
            self._not_empty.notify_all()
            self._not_full.notify_all()
        return left
