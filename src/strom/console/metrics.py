"""Throughput from a broker's Prometheus endpoint: parse the text format, turn counters into rates."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass

# Kafka's BrokerTopicMetrics as a JMX exporter names them (counters, so `_total`).
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
SERIES = {"bytes_in": BYTES_IN, "bytes_out": BYTES_OUT, "messages_in": MESSAGES_IN}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Labels = tuple[tuple[str, str], ...]


def parse_prometheus(text: str) -> dict[str, list[tuple[Labels, float]]]:
    """Samples of the Prometheus text exposition format, by metric name (comments and junk skipped)."""
    samples: dict[str, list[tuple[Labels, float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, _, label_text, raw_value = match.group(1), match.group(2), match.group(3), match.group(4)
        try:
            value = float(raw_value)
        except ValueError:
            continue
        labels = tuple(sorted(_LABEL.findall(label_text or "")))
        samples.setdefault(name, []).append((labels, value))
    return samples


def counter_total(samples: dict[str, list[tuple[Labels, float]]], name: str) -> float | None:
    """The broker-wide value of a counter.

    Kafka reports BrokerTopicMetrics both for all topics (no `topic` label, or an empty one as
    Prometheus treats the two alike) and per topic; the all-topics series is used when present,
    else the per-topic ones are added up.
    """
    series = samples.get(name)
    if not series:
        return None
    overall = [value for labels, value in series if not dict(labels).get("topic")]
    return sum(overall) if overall else sum(value for _, value in series)


@dataclass(frozen=True)
class Point:
    """Rates over the interval ending at `at` (seconds since the epoch)."""

    at: float
    bytes_in: float
    bytes_out: float
    messages_in: float


class ThroughputTracker:
    """Samples the endpoint at most once per `min_interval` and keeps the last `keep` rate points."""

    def __init__(self, url: str | None, keep: int = 90, min_interval: float = 1.0, timeout: float = 3.0) -> None:
        self.url = url
        self.points: deque[Point] = deque(maxlen=keep)
        self.error: str | None = None
        self.min_interval = min_interval
        self.timeout = timeout
        self._last: tuple[float, dict[str, float]] | None = None

    @property
    def configured(self) -> bool:
        return bool(self.url)

    def due(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self._last is None or now - self._last[0] >= self.min_interval

    def add_sample(self, now: float, totals: dict[str, float | None]) -> Point | None:
        """Record counter totals; returns the new rate point (None for the first sample or after a reset)."""
        missing = [key for key, value in totals.items() if value is None]
        if missing:
            self.error = "the endpoint has no " + ", ".join(SERIES[k] for k in missing)
            return None
        current = {key: float(value) for key, value in totals.items() if value is not None}
        previous, self._last = self._last, (now, current)
        self.error = None
        if previous is None:
            return None
        elapsed = now - previous[0]
        if elapsed <= 0:
            return None
        deltas = {key: current[key] - previous[1].get(key, 0.0) for key in current}
        if any(delta < 0 for delta in deltas.values()):  # broker restarted: counters began again
            return None
        point = Point(now, deltas["bytes_in"] / elapsed, deltas["bytes_out"] / elapsed,
                      deltas["messages_in"] / elapsed)
        self.points.append(point)
        return point

    def fetch_totals(self) -> dict[str, float | None]:
        """Read the endpoint once (blocking: call it off the event loop)."""
        assert self.url
        request = urllib.request.Request(self.url, headers={"Accept": "text/plain"})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - operator's URL
            text = response.read(8 * 1024 * 1024).decode("utf-8", errors="replace")
        samples = parse_prometheus(text)
        return {key: counter_total(samples, name) for key, name in SERIES.items()}

    def sample(self) -> None:
        """Fetch and record one sample, keeping a readable error instead of raising."""
        if not self.url:
            return
        try:
            totals = self.fetch_totals()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            self.error = f"cannot read {self.url}: {reason}"
            return
        self.add_sample(time.time(), totals)

    def as_json(self) -> dict[str, object]:
        return {
            "configured": self.configured,
            "url": self.url,
            "error": self.error,
            "points": [{"t": round(p.at * 1000), "bytes_in": p.bytes_in, "bytes_out": p.bytes_out,
                        "messages_in": p.messages_in} for p in self.points],
        }
