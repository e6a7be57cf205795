"""Hierarchical timing wheel: Kafka's timer for delayed operations (seed 002, "时间轮").

Delayed produce/fetch requests are added and cancelled far more often than they
expire, so the timer needs O(1) insert and delete; a heap of tasks would pay O(log n)
for each. The structure follows Kafka:

* ``TimerTask``: the thing to run, with its relative ``delay_ms``.
* ``TimerTaskEntry``: a task's place in a bucket (node of a doubly linked list), so
  ``TimerTask.cancel()`` unlinks it in O(1).
* ``TimerTaskList``: one bucket, a circular doubly linked list with one expiration
  time shared by all its tasks.
* ``TimingWheel``: ``wheel_size`` buckets of ``tick_ms`` each, covering
  ``[current_time, current_time + tick_ms * wheel_size)``. Tasks further out go to
  an overflow wheel whose tick is this wheel's whole interval, created on demand
  (1 ms x 20 → 20 ms x 20 → 400 ms x 20 ...).
* ``Timer`` (Kafka's SystemTimer): owns the first wheel and a delay queue of
  *buckets* (not tasks) ordered by expiration, so advancing the clock costs one heap
  operation per bucket. When a bucket of an upper wheel expires, its tasks are
  re-inserted from the bottom wheel ("downshifting"), landing in finer buckets until
  they really expire.

Everything runs on one thread (the broker's event loop); time is injectable, so the
wheel is tested with simulated milliseconds. ``strom.server_common.purgatory.TimerDriver``
connects a ``Timer`` to asyncio.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable

__all__ = ["CallbackTimerTask", "Timer", "TimerTask", "TimerTaskEntry", "TimerTaskList", "TimingWheel"]

log = logging.getLogger(__name__)


def monotonic_ms() -> int:
    """Default clock: monotonic milliseconds, the same clock asyncio's loop.time() uses."""
    return time.monotonic_ns() // 1_000_000


class TimerTask:
    """A task run once ``delay_ms`` after it is added to a :class:`Timer`."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = int(delay_ms)
        self._entry: TimerTaskEntry | None = None

    def run(self) -> None:
        """Called when the task expires; subclasses override."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Unlink the task from its bucket so it never runs (O(1))."""
        entry = self._entry
        if entry is not None:
            entry.remove()
            entry.task = None  # no task <-> entry cycle: a finished operation is freed at once, not by the GC
        self._entry = None

    @property
    def entry(self) -> TimerTaskEntry | None:
        return self._entry

    def _set_entry(self, entry: TimerTaskEntry) -> None:
        # A task re-added to a timer keeps only its newest entry, as in Kafka.
        if self._entry is not None and self._entry is not entry:
            self._entry.remove()
        self._entry = entry


class CallbackTimerTask(TimerTask):
    """A timer task that calls a plain function, for callers that do not subclass."""

    def __init__(self, delay_ms: int, fn: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self._fn = fn

    def run(self) -> None:
        self._fn()


class TimerTaskEntry:
    """Node of a bucket's linked list, binding a task to its absolute expiration."""

    __slots__ = ("task", "expiration_ms", "bucket", "next", "prev")

    def __init__(self, task: TimerTask | None, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.bucket: TimerTaskList | None = None
        # None while unlinked (never a self-loop): an entry out of every bucket must not be a reference
        # cycle, or each expired or completed delayed operation would wait for a GC pass to be freed.
        self.next: TimerTaskEntry | None = None
        self.prev: TimerTaskEntry | None = None
        if task is not None:
            task._set_entry(self)

    @property
    def cancelled(self) -> bool:
        return self.task is None or self.task.entry is not self

    def remove(self) -> None:
        if self.bucket is not None:
            self.bucket.remove(self)


class _Counter:
    """Task count shared by all buckets of all wheels of one timer."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: circular doubly linked list of entries sharing one expiration time."""

    def __init__(self, counter: _Counter) -> None:
        self._counter = counter
        self._root = TimerTaskEntry(None, -1)  # sentinel: a circular list, the root linked to itself when empty
        self._root.next = self._root.prev = self._root
        self._expiration = -1
        self._size = 0

    @property
    def expiration_ms(self) -> int:
        """Start of the time slot this bucket currently stands for; -1 when flushed."""
        return self._expiration

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the slot time; True if it changed, i.e. the bucket must be (re)queued."""
        changed = self._expiration != expiration_ms
        self._expiration = expiration_ms
        return changed

    def __len__(self) -> int:
        return self._size

    def entries(self) -> list[TimerTaskEntry]:
        out, e = [], self._root.next
        while e is not self._root:
            out.append(e)
            e = e.next
        return out

    def tasks(self) -> list[TimerTask]:
        return [e.task for e in self.entries() if e.task is not None and not e.cancelled]

    def add(self, entry: TimerTaskEntry) -> None:
        entry.remove()  # an entry lives in at most one bucket
        tail = self._root.prev
        entry.next, entry.prev = self._root, tail
        tail.next = entry
        self._root.prev = entry
        entry.bucket = self
        self._size += 1
        self._counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is not self:
            return
        entry.prev.next = entry.next  # type: ignore[union-attr]  # linked while in a bucket
        entry.next.prev = entry.prev  # type: ignore[union-attr]
        entry.next = entry.prev = None
        entry.bucket = None
        self._size -= 1
        self._counter.value -= 1

    def flush(self, fn: Callable[[TimerTaskEntry], None]) -> None:
        """Empty the bucket, then hand every entry to fn (re-insert or run)."""
        drained = self.entries()
        for e in drained:
            self.remove(e)
        self._expiration = -1
        for e in drained:
            fn(e)


class TimingWheel:
    """One level of the hierarchy: ``wheel_size`` buckets of ``tick_ms`` each."""

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: _Counter,
        queue: Callable[[TimerTaskList], None],
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval = tick_ms * wheel_size
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        # current_time is kept a multiple of tick_ms: the dial points at a whole slot.
        self.current_time = start_ms - start_ms % tick_ms
        self.overflow_wheel: TimingWheel | None = None
        self._counter = counter
        self._queue = queue

    def _overflow(self) -> TimingWheel:
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(
                self.interval, self.wheel_size, self.current_time, self._counter, self._queue
            )
        return self.overflow_wheel

    def add(self, entry: TimerTaskEntry) -> bool:
        """Place the entry in a bucket; False if it is cancelled or already expired."""
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        if expiration < self.current_time + self.tick_ms:
            return False  # falls in the slot the dial points at: due now
        if expiration < self.current_time + self.interval:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            # A bucket is reused once the dial has passed it; a new slot time means
            # it must enter the delay queue again.
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self._queue(bucket)
            return True
        return self._overflow().add(entry)

    def advance_clock(self, time_ms: int) -> None:
        """Move the dial to time_ms (rounded down to a tick), upper wheels too."""
        if time_ms >= self.current_time + self.tick_ms:
            self.current_time = time_ms - time_ms % self.tick_ms
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time)

    def levels(self) -> list[TimingWheel]:
        """This wheel and the overflow wheels created so far, bottom first."""
        out, w = [], self
        while w is not None:
            out.append(w)
            w = w.overflow_wheel
        return out


class Timer:
    """Kafka's SystemTimer: a timing wheel plus a delay queue of buckets.

    ``task_executor`` runs expired tasks; it defaults to calling them inline (handy
    with simulated time) and the asyncio driver swaps in ``loop.call_soon`` so tasks
    never run inside ``add()``.
    """

    def __init__(
        self,
        tick_ms: int = 1,
        wheel_size: int = 20,
        start_ms: int | None = None,
        clock: Callable[[], int] = monotonic_ms,
        task_executor: Callable[[Callable[[], None]], object] | None = None,
    ) -> None:
        self.clock = clock
        self.task_executor: Callable[[Callable[[], None]], object] = task_executor or (lambda fn: fn())
        # Called with a bucket's expiration whenever a bucket enters the delay queue,
        # so a driver can wake up earlier than it planned.
        self.on_schedule: Callable[[int], None] | None = None
        self._counter = _Counter()
        self._queue: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self.wheel = TimingWheel(
            tick_ms, wheel_size, clock() if start_ms is None else start_ms, self._counter, self._offer
        )

    def _offer(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration_ms
        heapq.heappush(self._queue, (expiration, next(self._seq), bucket))
        if self.on_schedule is not None:
            self.on_schedule(expiration)

    @property
    def size(self) -> int:
        """Tasks waiting in the wheel (cancelled ones are not counted)."""
        return self._counter.value

    def __len__(self) -> int:
        return self._counter.value

    def add(self, task: TimerTask) -> None:
        """Schedule task to run delay_ms from now; an already-due task runs at once."""
        now = self.clock()
        # An idle timer's dial may lag far behind; move it up (safe: no bucket is due)
        # so new tasks land in fine-grained buckets instead of coarse upper wheels.
        if not self._queue or self._queue[0][0] > now:
            self.wheel.advance_clock(now)
        self._add_entry(TimerTaskEntry(task, now + task.delay_ms))

    def schedule(self, delay_ms: int, fn: Callable[[], None]) -> TimerTask:
        """Convenience: run fn after delay_ms; returns the task so it can be cancelled."""
        task = CallbackTimerTask(delay_ms, fn)
        self.add(task)
        return task

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self.wheel.add(entry) and not entry.cancelled:
            self._run(entry)

    def _reinsert(self, entry: TimerTaskEntry) -> None:
        # Kafka's "downshift": an entry from an expired upper bucket is offered to the
        # bottom wheel again and lands in the finest bucket that still covers it.
        self._add_entry(entry)

    def _run(self, entry: TimerTaskEntry) -> None:
        task = entry.task
        if task is None:
            return
        task._entry = None
        self.task_executor(lambda: self._safe_run(task))

    @staticmethod
    def _safe_run(task: TimerTask) -> None:
        try:
            task.run()
        except Exception:  # one failing task must not stop the clock for the others
            log.exception("timer task %r failed", task)

    def next_expiration_ms(self) -> int | None:
        """Expiration of the earliest queued bucket (may be an emptied bucket), or None."""
        while self._queue:
            expiration, _, bucket = self._queue[0]
            if bucket.expiration_ms == expiration:
                return expiration
            heapq.heappop(self._queue)  # stale: the bucket was flushed or re-queued
        return None

    def advance_clock(self, now_ms: int | None = None) -> bool:
        """Expire every bucket due at now_ms (default: the clock); True if any was."""
        now = self.clock() if now_ms is None else now_ms
        advanced = False
        while self._queue and self._queue[0][0] <= now:
            expiration, _, bucket = heapq.heappop(self._queue)
            if bucket.expiration_ms != expiration:
                continue
            self.wheel.advance_clock(expiration)
            bucket.flush(self._reinsert)
            advanced = True
        return advanced
