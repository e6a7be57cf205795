"""Quota benchmark: the rate a throttled confluent-kafka client achieves against its byte-rate quota.

Prints one JSON document on stdout (progress goes to stderr). For each quota (MB = 10^6 bytes per
second of record values), a producer of 1 KiB records with `producer_byte_rate` set on its client.id
sends as fast as it can for the measured time, then a consumer with `consumer_byte_rate` reads a
topic loaded beforehand. The broker runs with Kafka's default quota windows (11 samples of 1 s).

    python bench/bench_quota.py                       # 2 and 5 MB/s, 10 s measured after 11 s of warm-up
    python bench/bench_quota.py --quotas 1 10 --seconds 20 --warmup 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402
from tests.support.quotas import set_quotas  # noqa: E402

MB = 1_000_000
RECORD = b"q" * 1024
STARTED = time.monotonic()


def progress(text: str) -> None:
    print(f"[{time.monotonic() - STARTED:7.1f}s] {text}", file=sys.stderr, flush=True)


def create_topic(broker: BrokerProcess) -> str:
    name = f"quota-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


class Throttles:
    def __init__(self) -> None:
        self.count = 0
        self.max_ms = 0.0

    def __call__(self, event: Any) -> None:
        self.count += 1
        self.max_ms = max(self.max_ms, event.throttle_time * 1000)


class Progress:
    """Records counted at marks in time, for rates over the first phase and over the steady one."""

    def __init__(self, started: float, marks: list[float]) -> None:
        self.started = started
        self.records = 0
        self.marks = marks
        self.at_mark: list[int] = []

    def add(self, n: int = 1) -> None:
        while len(self.at_mark) < len(self.marks) and time.monotonic() - self.started >= self.marks[len(self.at_mark)]:
            self.at_mark.append(self.records)
        self.records += n

    def rates(self, warmup: float, seconds: float) -> dict[str, float]:
        self.add(0)
        at = dict(zip(self.marks, self.at_mark, strict=False))
        size = len(RECORD)
        first = at.get(seconds, self.records)
        return {"mb_s": round((at.get(warmup + seconds, self.records) - at.get(warmup, 0)) * size / seconds / MB, 3),
                "mb_s_first_seconds_from_cold_start": round(first * size / seconds / MB, 3)}


def produce(broker: BrokerProcess, topic: str, client_id: str, warmup: float, seconds: float,
            count: int | None = None, batch_size: int = 1_000_000) -> dict[str, Any]:
    """Send 1 KiB records as fast as the producer may (or `count` of them); delivered bytes per second."""
    throttles = Throttles()
    p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 5,
                  "queue.buffering.max.kbytes": 4096, "throttle_cb": throttles, "acks": 1,
                  "batch.size": batch_size})
    started = time.monotonic()
    progress_ = Progress(started, sorted({seconds, warmup, warmup + seconds}))

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            progress_.add()

    deadline = started + warmup + seconds
    sent = 0
    while (count is None and time.monotonic() < deadline) or (count is not None and sent < count):
        try:
            p.produce(topic, RECORD, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            p.poll(0.01)
        if sent % 256 == 0:
            p.poll(0)
    if count is None:
        p.poll(0)
        result = progress_.rates(warmup, seconds)
        p.purge()
        p.flush(30)
    else:
        p.flush(120)
        result = {}
    return {**result, "records": progress_.records, "throttle_events": throttles.count,
            "max_throttle_ms": round(throttles.max_ms)}


def consume(broker: BrokerProcess, topic: str, client_id: str, warmup: float, seconds: float) -> dict[str, Any]:
    throttles = Throttles()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "group.id": client_id,
                  "enable.auto.commit": False, "throttle_cb": throttles, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, 0)])
    started = time.monotonic()
    progress_ = Progress(started, sorted({seconds, warmup, warmup + seconds}))
    deadline = started + warmup + seconds
    while time.monotonic() < deadline:
        got = c.consume(10_000, max(0.0, min(0.1, deadline - time.monotonic())))
        progress_.add(sum(1 for m in got if not m.error()))
    result = progress_.rates(warmup, seconds)
    c.close()
    return {**result, "records": progress_.records, "throttle_events": throttles.count,
            "max_throttle_ms": round(throttles.max_ms)}


def within(achieved: float, quota: float) -> dict[str, Any]:
    error = achieved / quota - 1
    return {"quota_mb_s": quota, "error_pct": round(100 * error, 1), "within_20_pct": abs(error) <= 0.2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quotas", type=float, nargs="+", default=[2.0, 5.0], help="quotas in MB/s")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured time per phase")
    ap.add_argument("--batch-size", type=int, default=16384,
                    help="producer batch.size (16 KiB: the Java producer's default; librdkafka's is 1 MB)")
    ap.add_argument("--warmup", type=float, default=11.0,
                    help="seconds before the measured time: the quota windows fill (11 x 1 s)")
    args = ap.parse_args()
    doc: dict[str, Any] = {"benchmark": "strom client quotas", "record_size": len(RECORD), "mb": "10^6 bytes",
                           "seconds_per_phase": args.seconds, "warmup_seconds": args.warmup,
                           "producer_batch_size": args.batch_size,
                           "mb_s": "over the measured seconds after the warm-up; also given: over the first "
                                   "measured seconds from a cold start, where Kafka's window padding (a new "
                                   "client's rate counts over at least 10 windows) lets a first burst through",
                           "quota_windows": {"quota.window.num": 11, "quota.window.size.seconds": 1},
                           "produce": [], "consume": []}
    with BrokerProcess() as broker:
        for quota in args.quotas:
            topic = create_topic(broker)
            client_id = f"bench-producer-{quota:g}"
            set_quotas(broker, [("client-id", client_id)], {"producer_byte_rate": int(quota * MB)})
            progress(f"produce with producer_byte_rate {quota:g} MB/s for {args.warmup + args.seconds:g} s")
            result = produce(broker, topic, client_id, args.warmup, args.seconds, batch_size=args.batch_size)
            result.update(within(result["mb_s"], quota))
            progress(f"achieved {result['mb_s']} MB/s ({result['error_pct']:+} %)")
            doc["produce"].append(result)
        for quota in args.quotas:
            topic = create_topic(broker)
            records = int(quota * MB * (args.warmup + args.seconds) * 1.5 / len(RECORD))
            progress(f"loading {records} records for the consumer")
            produce(broker, topic, "bench-loader", 0, 0, records)
            client_id = f"bench-consumer-{quota:g}"
            set_quotas(broker, [("client-id", client_id)], {"consumer_byte_rate": int(quota * MB)})
            progress(f"consume with consumer_byte_rate {quota:g} MB/s for {args.warmup + args.seconds:g} s")
            result = consume(broker, topic, client_id, args.warmup, args.seconds)
            result.update(within(result["mb_s"], quota))
            progress(f"achieved {result['mb_s']} MB/s ({result['error_pct']:+} %)")
            doc["consume"].append(result)
        progress("no quota, for comparison")
        topic = create_topic(broker)
        doc["unthrottled_produce"] = produce(broker, topic, "bench-free", 0, 3.0)
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
