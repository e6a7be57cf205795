"""When acknowledgements arrived, per partition: the write gaps a fault causes, as a user sees them."""

from __future__ import annotations

import time
from typing import Any

from tests.support.checker import SequenceProducer


class TimedSequenceProducer(SequenceProducer):
    """A SequenceProducer that also notes the monotonic time of every acknowledgement, per partition."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ack_times: dict[int, list[float]] = {}

    def _on_delivery(self, err: Any, msg: Any) -> None:
        super()._on_delivery(err, msg)
        if err is None:
            with self._lock:
                self.ack_times.setdefault(msg.partition(), []).append(time.monotonic())


def merged_ack_times(producers: list[TimedSequenceProducer]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for p in producers:
        for partition, times in p.ack_times.items():
            out.setdefault(partition, []).extend(times)
    return {partition: sorted(times) for partition, times in out.items()}


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch within [start, end] with no acknowledgement (the window's edges count)."""
    inside = [t for t in times if start <= t <= end]
    points = [start, *inside, end]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def first_ack_after(times: list[float], moment: float) -> float | None:
    """Seconds from `moment` to the first acknowledgement after it (None if none came)."""
    later = [t for t in times if t >= moment]
    return later[0] - moment if later else None


def gap_report(producers: list[TimedSequenceProducer], cut_at: float, heal_at: float, end: float) -> dict[str, Any]:
    """Per partition: the longest acks gap from the cut to `end`, and the wait for the first ack after the heal."""
    times = merged_ack_times(producers)
    return {
        "longest_gap_s": {p: round(longest_gap(t, cut_at, end), 2) for p, t in sorted(times.items())},
        "heal_to_first_ack_s": {p: (round(v, 2) if (v := first_ack_after(t, heal_at)) is not None else None)
                                for p, t in sorted(times.items())},
        "fault_s": round(heal_at - cut_at, 2),
    }
