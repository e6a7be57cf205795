"""A coordinator clock the test moves by hand, so tests of timeouts do not sleep."""

from __future__ import annotations

import asyncio

from strom.server_common.timing_wheel import Timer


class ManualClock:
    """Both readings of ``strom.coordinator.clock.Clock``, standing still until ``advance``."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_ms: int = 1_000_000) -> None:
        self._wall_ms = wall_ms
        self._monotonic_ms = monotonic_ms
        self._timers: list[Timer] = []
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    async def sleep(self, seconds: float) -> None:
        """Return once ``advance`` has moved the clock ``seconds`` on."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._monotonic_ms + int(seconds * 1000), future))
        await future

    @property
    def sleepers(self) -> int:
        """Sleeps still waiting for time to move."""
        return sum(1 for _, f in self._sleepers if not f.done())

    def timer(self) -> Timer:
        """A timing wheel on this clock whose due tasks run on the running loop (as the broker's
        driver runs them), advanced by ``advance`` instead of by a driver."""
        timer = Timer(tick_ms=1, wheel_size=20, clock=self.monotonic_ms,
                      task_executor=asyncio.get_running_loop().call_soon)
        self._timers.append(timer)
        return timer

    async def advance(self, ms: int) -> None:
        """Move time forward, expire what fell due, and let the loop run what that woke up."""
        self._wall_ms += ms
        self._monotonic_ms += ms
        for timer in self._timers:
            timer.advance_clock()
        due = [f for deadline, f in self._sleepers if deadline <= self._monotonic_ms]
        self._sleepers = [(d, f) for d, f in self._sleepers if d > self._monotonic_ms]
        for future in due:
            if not future.done():
                future.set_result(None)
        for _ in range(20):
            await asyncio.sleep(0)
