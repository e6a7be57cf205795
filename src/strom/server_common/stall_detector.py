"""LoopStallDetector: notices when the event loop stops running callbacks, and says who blocked it.

The broker serves every connection from one asyncio loop, so one callback that blocks (an
fsync, a synchronous ZooKeeper read, a replay of a whole partition) delays every client.
docs/decisions/0025-threading-model.md states the rule; this module enforces it, like the
stall detector of Seastar's reactor.

Two halves:

* On the loop, a heartbeat re-arms itself every ``HEARTBEAT_S`` (100 ms). How late it runs is the
  length of the loop iteration that delayed it: the longest lateness and the number of
  stalls past the threshold are the metrics (``strom_loop_stall_max_seconds``,
  ``strom_loop_stalls_total``).
* A watchdog thread looks at the last heartbeat. When the loop has been silent for longer
  than the threshold, it takes the loop thread's stack at that very moment
  (``sys._current_frames``), which names the callback still blocking, and logs it once as a
  WARN (``LOOP_STALL_MARKER``). If the loop thread is sitting in its selector, or spent at
  least half the silence runnable but waiting for a CPU (Linux schedstat), the machine's load
  is to blame, not a callback: that is logged at INFO only.

Cost: one timer callback per ``HEARTBEAT_S`` on the loop and a watchdog wake-up every 50 ms that
reads two floats; stacks are only formatted when a stall is caught.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass

log = logging.getLogger(__name__)

HEARTBEAT_S = 0.1
LOOP_STALL_MARKER = "event loop stalled"  # the WARN's fixed words: tests look for them in broker logs
# Frames that mean "the loop is waiting for I/O, nothing is running on it".
_IDLE_FUNCTIONS = frozenset({"select", "poll", "epoll", "_run_once"})


@dataclass(slots=True)
class StallStats:
    """What the metrics show: plain numbers, copied on the loop."""

    max_stall_s: float = 0.0
    stalls: int = 0  # stalls longer than the threshold, scheduling noise included
    blocked_stalls: int = 0  # those caught with a callback on the loop thread (the WARNs)


class LoopStallDetector:
    """Start on the loop it watches (``start``), stop before the loop closes (``stop``)."""

    def __init__(self, threshold_ms: int) -> None:
        self.threshold_s = threshold_ms / 1000
        self.stats = StallStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id = 0
        self._timer: asyncio.TimerHandle | None = None
        self._expected = 0.0  # when the heartbeat should run next (monotonic)
        self._reported = 0.0  # the `_expected` of the stall already reported by the watchdog
        self._seen_s = 0.0  # the watchdog's count of the current silence
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._schedstat: str | None = None  # the loop thread's scheduler counters (Linux)

    @property
    def enabled(self) -> bool:
        return self.threshold_s > 0

    def start(self) -> None:
        """Arm the heartbeat and the watchdog; call on the loop's thread."""
        if not self.enabled or self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self._schedstat = path if os.path.exists(path) else None
        self._expected = time.monotonic() + HEARTBEAT_S
        self._timer = self._loop.call_later(HEARTBEAT_S, self._beat)
        self._thread = threading.Thread(target=self._watch, name="loop-stall-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None

    # -- on the loop ---------------------------------------------------------------------------
    def _beat(self) -> None:
        now = time.monotonic()
        late = now - self._expected
        if late > self.stats.max_stall_s:
            self.stats.max_stall_s = late
        if late > self.threshold_s:
            self.stats.stalls += 1
            if self._reported == self._expected:
                log.info("event loop ran again after %.0f ms (%.0f ms of it seen by the watchdog)",
                         late * 1000, self._seen_s * 1000)
        self._expected = now + HEARTBEAT_S
        if not self._stopping.is_set() and self._loop is not None:
            self._timer = self._loop.call_later(HEARTBEAT_S, self._beat)

    # -- on the watchdog thread ----------------------------------------------------------------
    def _watch(self) -> None:
        """Count only silence the watchdog saw while itself running on time: when the whole process
        is not scheduled (a loaded machine, SIGSTOP), each missed wake-up adds at most two periods,
        so a pause of the process is not blamed on whatever callback it interrupted."""
        period = max(min(self.threshold_s / 4, 0.05), 0.005)
        last_wake = time.monotonic()
        watched = 0.0  # silence of the loop since its heartbeat was due, as the watchdog saw it
        seen = self._expected
        run_delay = 0.0  # the loop thread's time waiting for a CPU when the silence began
        while not self._stopping.wait(period):
            now = time.monotonic()
            gap, last_wake = now - last_wake, now
            expected = self._expected
            if expected != seen or now <= expected:
                seen, watched = expected, 0.0
                continue
            if watched == 0.0:
                run_delay = self._run_delay()
            watched += min(gap, 2 * period, now - expected)
            self._seen_s = watched
            if watched <= self.threshold_s or self._reported == expected:
                continue
            self._reported = expected
            self._report(watched, now - expected, self._run_delay() - run_delay)

    def _run_delay(self) -> float:
        """Seconds the loop thread has spent runnable but waiting for a CPU (0 where unknown)."""
        if self._schedstat is None:
            return 0.0
        try:
            with open(self._schedstat) as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def _report(self, watched: float, silent: float, waited_for_cpu: float) -> None:
        frame = sys._current_frames().get(self._loop_thread_id)
        if frame is None:
            return
        stack = traceback.extract_stack(frame)
        if stack and stack[-1].name in _IDLE_FUNCTIONS and "selectors" in stack[-1].filename:
            log.info("event loop silent for %.0f ms while idle in its selector: the process was not "
                     "scheduled (machine load), no callback to blame", watched * 1000)
            return
        if waited_for_cpu >= watched / 2:
            log.info("event loop silent for %.0f ms, %.0f ms of it waiting for a CPU (machine load) in %s:%d",
                     watched * 1000, waited_for_cpu * 1000, stack[-1].filename, stack[-1].lineno or 0)
            return
        self.stats.blocked_stalls += 1
        log.warning("%s: a callback has blocked the loop for %.0f ms (threshold %.0f ms; %.0f ms since the "
                    "loop was due, pauses of the whole process included); loop thread stack:\n%s",
                    LOOP_STALL_MARKER, watched * 1000, self.threshold_s * 1000, silent * 1000,
                    "".join(traceback.format_list(stack)).rstrip())
