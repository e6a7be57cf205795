"""Rate: a value per second over a window of samples, as Kafka's metrics `Rate` over a `SampledStat`.

A sample covers `window_ms`; at most `samples` are kept and the oldest is reused when a new one starts.
The rate divides the total of the samples by the time they cover, counted as at least `samples - 1`
whole windows so that a client's first burst is spread over the full window instead of looking huge.
"""

from __future__ import annotations


class Rate:
    __slots__ = ("window_ms", "samples", "_starts", "_values", "_current", "last_record_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[float] = []
        self._values: list[float] = []
        self._current = -1
        self.last_record_ms = 0.0

    def record(self, value: float, now_ms: float) -> None:
        self.last_record_ms = now_ms
        current = self._current
        if current < 0 or now_ms - self._starts[current] >= self.window_ms:
            current = self._advance(now_ms)
        self._values[current] += value

    def _advance(self, now_ms: float) -> int:
        current = self._current + 1
        if current >= self.samples:
            current = 0
        if current < len(self._starts):
            self._starts[current] = now_ms
            self._values[current] = 0.0
        else:
            self._starts.append(now_ms)
            self._values.append(0.0)
        self._current = current
        return current

    def _purge(self, now_ms: float) -> None:
        """Samples older than the whole window no longer count (Kafka's purgeObsoleteSamples)."""
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """The time the samples cover: since the oldest one started, at least `samples - 1` windows."""
        self._purge(now_ms)
        oldest = min(self._starts) if self._starts else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        minimum = self.samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self.window_ms
        return max(elapsed, 1.0)

    def total(self, now_ms: float) -> float:
        self._purge(now_ms)
        return sum(self._values)

    def measure(self, now_ms: float) -> float:
        """Value per second."""
        window = self.window_size_ms(now_ms)
        return sum(self._values) * 1000.0 / window

    def unrecord(self, value: float, now_ms: float) -> None:
        """Take back what the current sample counted (a throttled fetch returns nothing after all)."""
        if self._current >= 0:
            self._values[self._current] = max(0.0, self._values[self._current] - value)
