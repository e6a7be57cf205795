"""Topic churn on a 3-broker cluster: how long the controller takes to carry out admin requests while
topics are being created, with many topics already in the cluster.

With `--topics` existing topics, each round creates `--burst` topics (one CreateTopics each, operation
timeout 0, as client test suites do) and right after them deletes one existing topic (DeleteTopics,
operation timeout 0). Measured per round, from the DeleteTopics answer: until `/brokers/topics/<t>` is
gone from ZooKeeper (the controller carried it out), and until every new topic has a leader for every
partition in ZooKeeper.

Prints JSON. Usage: python bench/bench_topic_churn.py [--topics 150] [--partitions 2] [--burst 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402


def wait(predicate, limit: float = 300.0) -> float:  # noqa: ANN001
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > limit:
            return float("inf")
        time.sleep(0.01)
    return time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=150)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--burst", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ClusterProcess(tmp, 3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        existing = [f"base-{i}" for i in range(args.topics)]
        for i in range(0, len(existing), 50):
            futures = admin.create_topics([NewTopic(t, args.partitions, 3) for t in existing[i:i + 50]],
                                          operation_timeout=120, request_timeout=180)
            for f in futures.values():
                f.result(240)
        print(f"{len(existing)} topics created", file=sys.stderr)
        deletes, creates = [], []
        for r in range(args.rounds):
            new = [f"churn-{r}-{uuid.uuid4().hex[:6]}" for _ in range(args.burst)]
            for t in new:
                admin.create_topics([NewTopic(t, args.partitions, 3)], operation_timeout=0)[t].result(60)
            victim = existing.pop()
            admin.delete_topics([victim], operation_timeout=0)[victim].result(60)
            start = time.monotonic()
            gone = wait(lambda v=victim: cluster.zk.exists(f"/brokers/topics/{v}") is None)
            deletes.append(gone)
            led = wait(lambda n=new: all(cluster.partition_state(t, p) is not None
                                         and cluster.partition_state(t, p).leader > 0
                                         for t in n for p in range(args.partitions)))
            creates.append(time.monotonic() - start if led != float("inf") else led)
            print(f"round {r}: deleted in {gone:.2f}s, new topics led in {creates[-1]:.2f}s", file=sys.stderr)
        print(json.dumps({
            "existing_topics": args.topics, "partitions": args.partitions, "burst": args.burst,
            "delete_carried_out_s": {"median": round(statistics.median(deletes), 3),
                                     "max": round(max(deletes), 3)},
            "burst_led_s": {"median": round(statistics.median(creates), 3), "max": round(max(creates), 3)},
        }))


if __name__ == "__main__":
    main()
