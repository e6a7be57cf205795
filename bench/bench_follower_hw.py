"""Follower high-watermark lag and its cost: brokers' CPU, acks=all latency, how far a follower's HW trails.

Runs 3 brokers, one RF 3 partition (min.insync.replicas=2), an acks=all producer at fixed rates of
1 KiB records, and reports per rate the brokers' CPU seconds (user+system, all three), the acks=all
latency percentiles, and how far behind the leader's HW a follower's HW was (sampled with ListOffsets
as the debugging replica, which a follower answers from its own HW). Used to weigh answering a
follower's parked fetch on every HW move (docs/decisions/0052: measured, not adopted).

    python bench/bench_follower_hw.py [--rates 200,1000,5000] [--seconds 5]

Compare commits with bench/ab.sh. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from confluent_kafka import Producer  # noqa: E402
from kafka.protocol.consumer import ListOffsetsRequest  # noqa: E402
from tests.integration.test_api_version_matrix import call  # noqa: E402

from bench_broker import cpu_seconds  # noqa: E402
from bench_cluster import Cluster  # noqa: E402
from strom.protocol.inter_broker import build  # noqa: E402

TOPIC = "hw"


def high_watermark(broker: Any, replica_id: int) -> int:
    request = build(ListOffsetsRequest, replica_id=replica_id, isolation_level=0, topics=[
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    return int(call(broker, request, 7).topics[0].partitions[0].offset)


def run_rate(cluster: Cluster, rate: int, seconds: float) -> dict[str, Any]:
    leader = cluster.leader(TOPIC)
    follower = next(b for b in cluster.brokers if b != leader)
    pids = [b.pid for b in cluster.brokers.values()]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    latencies: list[float] = []
    lags: list[int] = []
    stop = threading.Event()

    def sample_lag() -> None:
        while not stop.is_set():
            leader_hw = high_watermark(cluster.brokers[leader], -1)
            follower_hw = high_watermark(cluster.brokers[follower], -2)
            lags.append(max(0, leader_hw - follower_hw))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample_lag, daemon=True)
    cpu_before = sum(cpu_seconds(pid) for pid in pids)
    sampler.start()
    start = time.monotonic()
    sent = 0
    value = b"x" * 1024
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate)
        while sent < due:
            t0 = time.monotonic()
            producer.produce(TOPIC, value, partition=0,
                             on_delivery=lambda err, _msg, t0=t0: latencies.append(time.monotonic() - t0))
            sent += 1
        producer.poll(0.001)
    producer.flush(60)
    stop.set()
    sampler.join(10)
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
    latencies.sort()
    lags.sort()

    def pct(xs: list[Any], q: float) -> Any:
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None

    return {"records_s": rate, "records": sent, "brokers_cpu_s": round(cpu, 2),
            "p50_ms": round(pct(latencies, 0.5) * 1000, 2), "p99_ms": round(pct(latencies, 0.99) * 1000, 2),
            "follower_hw_lag_records_p50": pct(lags, 0.5), "follower_hw_lag_records_max": lags[-1] if lags else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="200,1000,5000", help="records/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    out: dict[str, Any] = {"machine_cores": os.cpu_count(), "record_bytes": 1024, "runs": []}
    with tempfile.TemporaryDirectory(prefix="strom-bench-hw-") as workdir:
        cluster = Cluster(workdir)
        try:
            cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
            for rate in (int(r) for r in args.rates.split(",")):
                out["runs"].append(run_rate(cluster, rate, args.seconds))
        finally:
            cluster.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
