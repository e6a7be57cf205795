"""Delayed operations and the purgatory that parks them (Kafka's DelayedOperationPurgatory).

A request that cannot be answered yet (a Fetch waiting for ``min_bytes``, later an
acks=all Produce waiting for the ISR) becomes a :class:`DelayedOperation`. The
purgatory watches it under keys (usually a topic-partition) and completes it when a
``check_and_complete(key)`` after an append finds it satisfiable, or expires it
through the hierarchical timing wheel after ``delay_ms``. Whichever comes first wins;
an operation completes exactly once even if it is watched under many keys.

The broker runs one asyncio loop and nothing else touches the purgatory, so there
are no locks. :class:`TimerDriver` advances the wheel from ``loop.call_at`` at the
earliest bucket expiration (no polling). Long-polling Fetch, in short::

    class DelayedFetch(DelayedOperation):
        def __init__(self, max_wait_ms, min_bytes, read, future):
            super().__init__(max_wait_ms)
            self.min_bytes, self.read, self.future = min_bytes, read, future

        def try_complete(self) -> bool:
            # Contract: when satisfied, call force_complete() and return its result.
            return self.read() >= self.min_bytes and self.force_complete()

        def on_complete(self) -> None:        # runs once, on data or on expiry
            if not self.future.done():
                self.future.set_result(self.read())

        def on_expiration(self) -> None:      # after on_complete, on expiry only
            pass

    timer = Timer()
    driver = TimerDriver(timer, asyncio.get_running_loop()); driver.start()
    fetch_purgatory = DelayedOperationPurgatory("Fetch", timer)

    # in the Fetch handler
    future = loop.create_future()
    op = DelayedFetch(max_wait_ms, min_bytes, read, future)
    fetch_purgatory.try_complete_else_watch(op, [("topic", 0)])
    result = await future

    # after every append to ("topic", 0)
    fetch_purgatory.check_and_complete(("topic", 0))
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable

from strom.server_common.timing_wheel import Timer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory", "TimerDriver"]

log = logging.getLogger(__name__)


class DelayedOperation(TimerTask):
    """An operation that completes when try_complete succeeds or delay_ms runs out.

    Subclasses implement ``try_complete`` (check, and if satisfied return
    ``self.force_complete()``), ``on_complete`` (build and deliver the result; runs
    exactly once) and ``on_expiration`` (bookkeeping after a timeout).
    """

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now if nobody did yet; True only for the caller that completed it."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()  # drop the expiry timer; the operation is answered
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after on_complete when the operation timed out; default: nothing."""

    def run(self) -> None:
        # The timer fired: the operation waited delay_ms without being satisfied.
        if self.force_complete():
            self.on_expiration()


class DelayedOperationPurgatory:
    """Keeps delayed operations, completes them by key, expires them with a timer.

    Operations completed through one key (or by expiry) stay in the other keys' watch
    lists until those keys are checked or until ``purge_interval`` completed entries
    pile up, when a purge sweeps all lists; that keeps the hot path O(watchers of
    one key), as in Kafka.
    """

    def __init__(self, name: str, timer: Timer, broker_id: int = 0, purge_interval: int = 1000) -> None:
        self.name = name
        self.timer = timer
        self.broker_id = broker_id
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._estimated_watched = 0  # watch-list entries, including completed ones

    # -- adding ----------------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, watch_keys: Iterable[Hashable]) -> bool:
        """Complete op now if possible; else watch it under every key and start its timer.

        Returns True if the operation completed (by this call or earlier).
        """
        keys = list(watch_keys)
        if not keys:
            raise ValueError("The watch key list can't be empty")
        if op.is_completed or self._attempt(op):
            return True
        for key in keys:
            self._watchers.setdefault(key, []).append(op)
        self._estimated_watched += len(keys)
        if not op.is_completed:
            self.timer.add(op)
        self._maybe_purge()
        return op.is_completed

    # -- completing ------------------------------------------------------------

    @staticmethod
    def _attempt(op: DelayedOperation) -> bool:
        """try_complete, tolerating subclasses that return True without force_complete()."""
        if op.is_completed:
            return False
        if not op.try_complete():
            return False
        return op.force_complete() or op.is_completed

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete every operation watched under key; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):  # snapshot: callbacks may watch new operations
            if not op.is_completed:
                try:
                    if self._attempt(op):
                        completed += 1
                except Exception:
                    log.exception("%s purgatory: try_complete of %r failed", self.name, op)
        current = self._watchers.get(key)
        if current is not None:
            alive = [op for op in current if not op.is_completed]
            self._estimated_watched -= len(current) - len(alive)
            if alive:
                self._watchers[key] = alive
            else:
                del self._watchers[key]
        return completed

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching key and cancel the timers of its operations (topic deleted...)."""
        ops = self._watchers.pop(key, [])
        self._estimated_watched -= len(ops)
        pending = [op for op in ops if not op.is_completed]
        for op in pending:
            op.cancel()
        return pending

    # -- housekeeping ----------------------------------------------------------

    def _maybe_purge(self) -> None:
        if self._estimated_watched - self.delayed() > self.purge_interval:
            self.purge_completed()

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list; returns entries removed."""
        removed = 0
        for key in list(self._watchers):
            ops = self._watchers[key]
            alive = [op for op in ops if not op.is_completed]
            removed += len(ops) - len(alive)
            if alive:
                self._watchers[key] = alive
            else:
                del self._watchers[key]
        self._estimated_watched -= removed
        return removed

    def watched(self) -> int:
        """Watch-list entries (an operation under three keys counts three times)."""
        return sum(len(ops) for ops in self._watchers.values())

    def delayed(self) -> int:
        """Operations still waiting on the timer."""
        return self.timer.size

    def pending(self) -> int:
        """Operations of this purgatory not completed yet, each counted once (the timer may be shared)."""
        return len({id(op) for ops in self._watchers.values() for op in ops if not op.is_completed})

    def watch_keys(self) -> list[Hashable]:
        return list(self._watchers)

    def __repr__(self) -> str:
        return f"DelayedOperationPurgatory({self.name!r}, watched={self.watched()}, delayed={self.delayed()})"


class TimerDriver:
    """Advances a :class:`Timer` from an asyncio loop, waking only when a bucket is due.

    One ``loop.call_at`` handle is kept for the earliest bucket expiration; adding a
    task that expires sooner moves it. Expired tasks run through ``loop.call_soon``
    so a task never runs inside ``Timer.add`` (and so inside the purgatory).
    """

    def __init__(self, timer: Timer, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.timer = timer
        self.loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._handle_ms: int | None = None
        self._saved_executor: Callable[[Callable[[], None]], object] | None = None
        self._running = False
        self._advancing = False

    def start(self) -> None:
        if self._running:
            return
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        self._running = True
        self._saved_executor = self.timer.task_executor
        self.timer.task_executor = self.loop.call_soon
        self.timer.on_schedule = self._on_schedule
        self._reschedule()

    def stop(self) -> None:
        """Stop waking up; tasks still in the wheel stay there (and never fire)."""
        if not self._running:
            return
        self._running = False
        self.timer.on_schedule = None
        if self._saved_executor is not None:
            self.timer.task_executor = self._saved_executor
        self._cancel_handle()

    @property
    def running(self) -> bool:
        return self._running

    def _cancel_handle(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._handle_ms = None

    def _on_schedule(self, expiration_ms: int) -> None:
        if self._advancing:
            return  # _fire re-arms once the whole advance is done
        if self._handle_ms is None or expiration_ms < self._handle_ms:
            self._arm(expiration_ms)

    def _reschedule(self) -> None:
        nxt = self.timer.next_expiration_ms()
        if nxt is None:
            self._cancel_handle()
        elif nxt != self._handle_ms:
            self._arm(nxt)

    def _arm(self, expiration_ms: int) -> None:
        assert self.loop is not None
        self._cancel_handle()
        delay_s = max(0, expiration_ms - self.timer.clock()) / 1000.0
        self._handle_ms = expiration_ms
        self._handle = self.loop.call_at(self.loop.time() + delay_s, self._fire, expiration_ms)

    def _fire(self, target_ms: int) -> None:
        self._handle = None
        self._handle_ms = None
        if not self._running:
            return
        # asyncio may run a handle up to its clock resolution early; the bucket we
        # armed for is due, so advance at least to its expiration.
        self._advancing = True
        try:
            self.timer.advance_clock(max(self.timer.clock(), target_ms))
        finally:
            self._advancing = False
        self._reschedule()
