"""The coordinators' time source, injectable so their unit tests advance time instead of sleeping.

Two readings and a sleep, as Kafka's ``Time``: wall-clock milliseconds for what is written to the
internal topics and compared across restarts (commit timestamps, transaction start and
last-update times, expiry), and monotonic milliseconds for delays on this broker (the
purgatories' timing wheel already takes such a function).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """A source of time for a coordinator."""

    def wall_ms(self) -> int:
        """Milliseconds since the epoch: timestamps that go into records."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back: delays and timeouts."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock (retry back-offs)."""
        ...


class SystemClock:
    """The real clocks."""

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
