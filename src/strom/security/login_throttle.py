"""Slows down password guessing: every failed login waits, and failures from one client host queue up.

Kafka delays the answer to a failed authentication by `connection.failed.authentication.delay.ms` on each
connection, which many parallel connections get around. Here each host also has one clock of "the next
failure may be answered at": every failure takes the next slot, one delay after the previous one. So a host
learns at most one failed guess per delay, however many connections it opens, while other hosts and every
successful login are never slowed. So that a flood of failing connections cannot hold sockets open for ever,
a host whose queue reaches MAX_BACKLOG_DELAYS delays is turned away at once, before its credentials are looked
at (which tells it nothing about them), until its queue drains.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

# Hosts remembered at most; the least recently failing are forgotten first.
MAX_TRACKED_HOSTS = 10_000
# Failures a host may have queued before further attempts are refused without being checked.
MAX_BACKLOG_DELAYS = 50


class LoginThrottle:
    def __init__(self, delay_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.delay_s = max(delay_ms, 0) / 1000
        self._clock = clock
        self._next_slot: OrderedDict[str, float] = OrderedDict()
        self.failed_total = 0  # failed authentications since start (a metrics hook reads it)

    def blocked(self, host: str) -> bool:
        """True while `host` has a full queue of failures waiting: refuse its attempt unchecked."""
        if self.delay_s <= 0:
            return False
        slot = self._next_slot.get(host)
        # half a delay of slack: the slots are sums of floats
        return slot is not None and slot - self._clock() > (MAX_BACKLOG_DELAYS - 0.5) * self.delay_s

    def refused(self) -> None:
        """Count an attempt turned away by `blocked` (it takes no slot)."""
        self.failed_total += 1

    def failure_delay(self, host: str) -> float:
        """Record one failure from `host`; returns the seconds to wait before answering it."""
        self.failed_total += 1
        if self.delay_s <= 0:
            return 0.0
        now = self._clock()
        slot = max(now, self._next_slot.pop(host, now)) + self.delay_s
        self._next_slot[host] = slot
        if len(self._next_slot) > MAX_TRACKED_HOSTS:
            # Forget hosts whose slot has passed; if all are current, the oldest.
            for old, at in list(self._next_slot.items()):
                if at <= now or len(self._next_slot) > MAX_TRACKED_HOSTS:
                    del self._next_slot[old]
                if len(self._next_slot) <= MAX_TRACKED_HOSTS // 2:
                    break
        return slot - now
