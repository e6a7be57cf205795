"""Click-event generator for the demo pipeline: JSON web clicks with late and malformed events.

Users browse in sessions (a burst of clicks, then a pause), so "sessions per user" has
something real to find. A small share of events arrive late (event time in the past) and
a small share are malformed (truncated JSON, wrong types, missing fields) to exercise the
pipeline's watermark and dead-letter topic.

Live mode stamps events with the wall clock and paces them at ``--rate``. Simulated mode
(``--simulate``) runs a deterministic clock as fast as possible, for tests and replays.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

PAGES = (
    ["/", "/search", "/cart", "/checkout", "/login", "/help"]
    + [f"/products/{i}" for i in range(1, 21)]
    + [f"/blog/{s}" for s in ("spark", "kafka", "streams", "python")]
)
REFERRERS = ["direct", "google", "newsletter", "twitter", "partner"]


@dataclass
class Session:
    user: str
    clicks_left: int
    next_ms: int
    page: str = "/"


@dataclass
class Generator:
    """Produces (key, value, event) triples; ``event`` is None for malformed records."""

    seed: int = 7
    users: int = 400
    concurrent_sessions: int = 8
    late_fraction: float = 0.05
    malformed_fraction: float = 0.02
    max_lateness_ms: int = 60_000
    rng: random.Random = field(init=False)
    sessions: list[Session] = field(default_factory=list)
    emitted: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _new_session(self, now_ms: int) -> Session:
        user = f"user-{self.rng.randrange(self.users):03d}"
        return Session(user, self.rng.randint(3, 15), now_ms + self.rng.randint(0, 4000), self.rng.choice(PAGES[:3]))

    def next(self, now_ms: int) -> tuple[bytes, bytes, dict[str, Any] | None]:
        """The next click at (simulated or wall) time ``now_ms``."""
        while len(self.sessions) < self.concurrent_sessions:
            self.sessions.append(self._new_session(now_ms))
        s = min(self.sessions, key=lambda x: x.next_ms)
        ts = now_ms
        s.clicks_left -= 1
        s.next_ms = now_ms + self.rng.randint(500, 8_000)  # think time within a session
        if s.clicks_left <= 0:
            self.sessions.remove(s)  # the user goes idle; a new session starts elsewhere
        s.page = self.rng.choice(PAGES)
        self.emitted += 1
        event: dict[str, Any] = {
            "event_id": f"e{self.seed}-{self.emitted}",
            "user": s.user,
            "page": s.page,
            "action": self.rng.choice(["view", "view", "view", "click", "scroll"]),
            "referrer": self.rng.choice(REFERRERS),
            "ts": ts,
        }
        if self.rng.random() < self.late_fraction:
            event["ts"] = ts - self.rng.randint(5_000, self.max_lateness_ms)
        key = s.user.encode()
        if self.rng.random() < self.malformed_fraction:
            return key, self._malformed(event), None
        return key, json.dumps(event, separators=(",", ":")).encode(), event

    def _malformed(self, event: dict[str, Any]) -> bytes:
        kind = self.rng.randrange(4)
        text = json.dumps(event)
        if kind == 0:
            return text[: self.rng.randint(5, len(text) - 5)].encode()  # truncated
        if kind == 1:
            return json.dumps({**event, "ts": "yesterday"}).encode()  # wrong type
        if kind == 2:
            return json.dumps({k: v for k, v in event.items() if k != "user"}).encode()  # missing field
        return b"\xff\xfe not json at all"


def ensure_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create the topics that do not exist yet (idempotent across reruns)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=20).topics
    new = [NewTopic(t, n, 1) for t, n in topics.items() if t not in existing]
    if not new:
        return
    for topic, fut in admin.create_topics(new, request_timeout=30).items():
        try:
            fut.result(timeout=30)
        except Exception as exc:  # a concurrent creator won the race
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"could not create topic {topic}: {exc}") from exc


def run(
    bootstrap: str,
    topic: str = "clicks",
    partitions: int = 3,
    rate: float = 50.0,
    count: int | None = None,
    simulate_start_ms: int | None = None,
    step_ms: int = 200,
    seed: int = 7,
    quiet: bool = False,
) -> list[tuple[bytes, bytes, dict[str, Any] | None]]:
    """Produce clicks until ``count`` or a stop signal; returns what was sent in simulated mode."""
    from confluent_kafka import Producer

    ensure_topics(bootstrap, {topic: partitions})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    gen = Generator(seed=seed)
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    if simulate_start_ms is None:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    sent: list[tuple[bytes, bytes, dict[str, Any] | None]] = []
    clock = simulate_start_ms
    started = time.monotonic()
    n = 0
    while not stop["now"] and (count is None or n < count):
        if clock is None:
            due = started + n / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.5))
                continue
            now_ms = int(time.time() * 1000)
        else:
            clock += step_ms
            now_ms = clock
        key, value, event = gen.next(now_ms)
        producer.produce(topic, value, key)
        if clock is not None:
            sent.append((key, value, event))
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
            if not quiet:
                print(f"generator: {n} events sent", file=sys.stderr, flush=True)
    left = producer.flush(30)
    if left:
        raise RuntimeError(f"{left} click events were not acknowledged")
    if not quiet:
        print(f"generator: stopped after {n} events", file=sys.stderr, flush=True)
    return sent


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rate", type=float, default=50.0, help="events per second in live mode")
    ap.add_argument("--count", type=int, default=None, help="stop after this many events")
    ap.add_argument("--simulate", type=int, default=None, metavar="START_MS",
                    help="deterministic simulated clock starting at this epoch-ms, no pacing")
    ap.add_argument("--step-ms", type=int, default=200, help="simulated time between events")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    run(args.bootstrap_server, args.topic, args.partitions, args.rate, args.count, args.simulate, args.step_ms, args.seed)


if __name__ == "__main__":
    main()
