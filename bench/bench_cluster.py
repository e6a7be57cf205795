"""Cluster benchmark: ZooKeeper + 3 brokers on this machine, confluent-kafka clients.

Prints JSON:
- produce throughput: acks=1 RF 1 and acks=all RF 3 (min.insync.replicas=2), 1 KiB and 100 B records;
- produce latency (p50/p99/p99.9/max) at a fixed rate, acks=all RF 3;
- failover: kill -9 of a partition leader under acks=all idempotent load -> first acknowledged
  produce on the new leader (zookeeper.session.timeout.ms=6000); controlled shutdown (SIGTERM)
  of a leader -> longest gap between acknowledgements.

Usage: python bench/bench_cluster.py [--quick]
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

from strom.metadata.zk.zookeeper_server import ZooKeeperServer  # noqa: E402

MB = 1_000_000
SESSION_TIMEOUT_MS = 6000


class Cluster:
    def __init__(self, workdir: str, brokers: int = 3) -> None:
        self.zk = ZooKeeperServer(os.path.join(workdir, "zk")).start()
        connect = f"{self.zk.connect_string}/bench"
        self.brokers: dict[int, BrokerProcess] = {}
        for i in range(1, brokers + 1):
            d = os.path.join(workdir, f"b{i}")
            os.makedirs(d)
            self.brokers[i] = BrokerProcess(d, {
                "broker.id": i, "zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS, "offsets.topic.replication.factor": 3,
                "auto.leader.rebalance.enable": "false"}).start()
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers.values())
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + 30
        while len(self.admin.list_topics(timeout=5).brokers) < brokers and time.monotonic() < deadline:
            time.sleep(0.2)

    def create_topic(self, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None) -> None:
        for f in self.admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})]).values():
            f.result()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            t = self.admin.list_topics(name, timeout=5).topics.get(name)
            if t and len(t.partitions) == partitions and all(
                    p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values()):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} not ready")

    def leader(self, topic: str, partition: int = 0) -> int:
        return self.admin.list_topics(topic, timeout=5).topics[topic].partitions[partition].leader

    def close(self) -> None:
        for b in self.brokers.values():
            b.close()
        self.zk.stop()


def produce_throughput(bootstrap: str, topic: str, n: int, size: int, acks: str) -> dict[str, Any]:
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1_000_000,
                  "queue.buffering.max.kbytes": 512 * 1024, "compression.type": "none",
                  "delivery.report.only.error": True,
                  "on_delivery": lambda e, _m: errors.append(e) if e else None})
    p.list_topics(topic, timeout=10)
    value = os.urandom(size)
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.005)
        if not i & 0x3FFF:
            p.poll(0)
    left = p.flush(120)
    secs = time.perf_counter() - start
    return {"acks": acks, "record_bytes": size, "records": n, "seconds": round(secs, 2),
            "mb_s": round(n * size / MB / secs, 1), "records_s": round(n / secs), "errors": len(errors) + left}


def latency(bootstrap: str, topic: str, size: int, mb_s: float, seconds: float, acks: str = "all") -> dict[str, Any]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "enable.idempotence": acks == "all"})
    partitions = len(p.list_topics(topic, timeout=10).topics[topic].partitions)
    # Warm up: connections to every leader and the producer id exist before the clock starts.
    for _ in range(20):
        for part in range(partitions):
            p.produce(topic, b"warm-up", partition=part)
        p.flush(30)
    lat: list[float] = []
    perf = time.perf_counter
    rate = mb_s * MB / size
    total = int(rate * seconds)
    value = os.urandom(size)
    start = perf()
    i = 0
    while i < total:
        due = min(total, int((perf() - start) * rate) + 1)
        while i < due:
            t0 = perf()
            while True:
                try:
                    p.produce(topic, value, on_delivery=lambda e, m, t0=t0: lat.append(perf() - t0) if e is None else None)
                    break
                except BufferError:  # the brokers fell behind on a loaded machine: the wait counts as latency
                    p.poll(0.01)
            i += 1
        p.poll(max(0.0, start + i / rate - perf()))
    p.flush(30)
    taken = perf() - start  # longer than `seconds` when the client could not keep the rate (a loaded machine)
    lat.sort()
    ms = [round(1000 * x, 2) for x in (lat[len(lat) // 2], lat[int(len(lat) * 0.99)],
                                       lat[int(len(lat) * 0.999)], lat[-1])] if lat else [None] * 4
    return {"acks": acks, "target_mb_s": mb_s, "record_bytes": size, "records": total, "acked": len(lat),
            "p50_ms": ms[0], "p99_ms": ms[1], "p999_ms": ms[2], "max_ms": ms[3], "seconds_taken": round(taken, 1)}


class AckTimeline:
    """An idempotent acks=all producer in a thread; records when each acknowledgement arrived."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acks: list[float] = []
        self.errors: list[Any] = []
        self._stop = False
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 1, "message.timeout.ms": 60000})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, _msg: Any) -> None:
        (self.errors.append(err) if err else self.acks.append(time.monotonic()))

    def _run(self) -> None:
        i = 0
        while not self._stop:
            try:
                self._p.produce(self._topic, b"%d" % i, on_delivery=self._cb)
                i += 1
            except BufferError:
                pass
            self._p.poll(0.001)

    def start(self) -> AckTimeline:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        self._thread.join()
        self._p.flush(60)

    def first_ack_after(self, t: float, timeout: float = 60) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [a for a in self.acks[-1000:] if a > t]
            if later:
                return min(later) - t
            time.sleep(0.005)
        return None

    def longest_gap(self, since: float, until: float) -> float:
        times = [a for a in self.acks if since <= a <= until]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=until - since)


def failover(cluster: Cluster) -> dict[str, Any]:
    cluster.create_topic("failover", 1, 3, {"min.insync.replicas": "2"})
    timeline = AckTimeline(cluster.bootstrap, "failover").start()
    time.sleep(3)
    leader = cluster.leader("failover")
    killed = time.monotonic()
    cluster.brokers[leader].kill9()
    first = timeline.first_ack_after(killed)
    time.sleep(2)
    cluster.brokers[leader].start()
    time.sleep(8)  # back in the ISR
    leader = cluster.leader("failover")
    stop_at = time.monotonic()
    cluster.brokers[leader].stop()
    time.sleep(3)
    gap = timeline.longest_gap(stop_at - 0.5, time.monotonic())
    timeline.stop()
    cluster.brokers[leader].start()
    return {"session_timeout_ms": SESSION_TIMEOUT_MS,
            "kill9_leader_to_first_ack_s": round(first, 2) if first is not None else None,
            "controlled_shutdown_longest_ack_gap_s": round(gap, 3), "errors": len(timeline.errors)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["produce", "latency", "failover"], action="append",
                    help="run only these parts (repeatable); default all")
    ap.add_argument("--rates", default="20", help="comma-separated MB/s for the latency runs")
    args = ap.parse_args()
    parts = set(args.only or ["produce", "latency", "failover"])
    seconds = 5 if args.quick else 15
    n_kib = 100_000 if args.quick else 300_000
    n_small = 300_000 if args.quick else 1_000_000
    out: dict[str, Any] = {"machine_cores": os.cpu_count(), "brokers": 3}
    with tempfile.TemporaryDirectory(prefix="strom-bench-cluster-") as workdir:
        cluster = Cluster(workdir)
        try:
            cluster.create_topic("rf1", 6, 1)
            cluster.create_topic("rf3", 6, 3, {"min.insync.replicas": "2"})
            if "produce" in parts:
                out["produce"] = [
                    {"rf": 1, **produce_throughput(cluster.bootstrap, "rf1", n_kib, 1024, "1")},
                    {"rf": 3, **produce_throughput(cluster.bootstrap, "rf3", n_kib, 1024, "all")},
                    {"rf": 1, **produce_throughput(cluster.bootstrap, "rf1", n_small, 100, "1")},
                    {"rf": 3, **produce_throughput(cluster.bootstrap, "rf3", n_small, 100, "all")},
                ]
            if "latency" in parts:
                rates = [float(r) for r in args.rates.split(",")]
                out["latency_acks_1_rf1"] = [latency(cluster.bootstrap, "rf1", 1024, r, seconds, "1") for r in rates]
                out["latency_acks_all_rf3"] = [latency(cluster.bootstrap, "rf3", 1024, r, seconds) for r in rates]
            if "failover" in parts:
                out["failover"] = failover(cluster)
        finally:
            cluster.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
