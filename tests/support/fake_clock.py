"""A clock the test moves by hand, for code that takes a `() -> milliseconds` clock."""

from __future__ import annotations


class FakeClock:
    """Callable like `time_ms`: returns `now`, which only the test changes (`clock.now += 500`)."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now
