"""Follower fetching (KIP-392): end-to-end latency from the leader and from a follower, and who sends the bytes.

Starts ZooKeeper and 3 brokers in racks r1, r2, r3 with the rack-aware replica selector, one RF 3
topic of one partition led by broker 1 (rack r1), and an acks=all producer at `--rate` records/s of
`--size` bytes for `--seconds`, each record carrying its send time. Two consumers read it at once:
`client.rack=r1` (served by the leader) and `client.rack=r2` (sent to the follower in r2). Prints
JSON: per consumer the end-to-end latency (send to receipt, same host clock) p50/p99/max and the
records read; per broker the record bytes it sent to consumers (BytesOut) and its CPU seconds.

The follower can only serve what its high watermark covers, and it learns the leader's HW with its
next fetch response, so its consumers trail the leader's by about one follower fetch round trip
under load, and by up to replica.fetch.wait.max.ms when traffic stops.

    python bench/bench_follower_fetch.py [--rate 500] [--size 1024] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import free_port  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402
from tests.support.metrics import scrape  # noqa: E402

RACKS = {1: "r1", 2: "r2", 3: "r3"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
STAMP = struct.Struct(">d")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentiles(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    if not s:
        return {"records": 0}
    return {"records": len(s), "p50_ms": round(1000 * s[len(s) // 2], 2),
            "p99_ms": round(1000 * s[int(len(s) * 0.99)], 2), "max_ms": round(1000 * s[-1], 2)}


class Reader(threading.Thread):
    """A consumer in one rack, reading from the end, noting each record's send-to-receipt latency."""

    def __init__(self, bootstrap: str, topic: str, rack: str) -> None:
        super().__init__(daemon=True)
        self.latencies: list[float] = []
        self.stop = False
        self.ready = threading.Event()
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                            "client.rack": rack, "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                            "log_level": 0})
        self._c.assign([TopicPartition(topic, 0, OFFSET_END)])

    def run(self) -> None:
        try:
            while not self.stop:
                m = self._c.poll(0.1)
                self.ready.set()
                if m is not None and not m.error() and m.value() and len(m.value()) >= STAMP.size:
                    self.latencies.append(time.time() - STAMP.unpack_from(m.value())[0])
        finally:
            self._c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="records per second")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    ports = {b: free_port() for b in RACKS}
    with tempfile.TemporaryDirectory(prefix="strom-bench-ffetch-") as tmp:
        cluster = ClusterProcess(tmp, 3, overrides={"auto.leader.rebalance.enable": "false",
                                                    "replica.selector.class": SELECTOR},
                                 broker_overrides={b: {"broker.rack": r, "metrics.listener": f"http://127.0.0.1:{ports[b]}"}
                                                   for b, r in RACKS.items()})
        cluster.start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
            admin.create_topics([NewTopic("ff", num_partitions=1, replication_factor=-1, replica_assignment=[[1, 2, 3]])])["ff"].result(60)
            cluster.wait_isr("ff", 0, [1, 2, 3], timeout=60)
            readers = {rack: Reader(cluster.bootstrap, "ff", rack) for rack in ("r1", "r2")}
            for r in readers.values():
                r.start()
                r.ready.wait(30)
            p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0})
            p.produce("ff", b"warm-up", partition=0)
            p.flush(30)
            time.sleep(3)  # both consumers settled on their replicas
            pids = {b: cluster.broker(b).pid for b in RACKS}
            cpu0 = {b: cpu_seconds(pid) for b, pid in pids.items() if pid}
            pad = b"x" * max(0, args.size - STAMP.size)
            total = int(args.rate * args.seconds)
            start = time.perf_counter()
            for i in range(total):
                p.produce("ff", STAMP.pack(time.time()) + pad, partition=0)
                p.poll(max(0.0, start + (i + 1) / args.rate - time.perf_counter()))
            p.flush(60)
            time.sleep(2)  # the last records reach both consumers (the follower's HW trails by a fetch)
            cpu = {b: round(cpu_seconds(pid) - cpu0[b], 2) for b, pid in pids.items() if pid}
            for r in readers.values():
                r.stop = True
                r.join(30)
            out = {"benchmark": "follower fetching", "machine_cores": os.cpu_count(), "rate_records_s": args.rate,
                   "record_bytes": args.size, "seconds": args.seconds, "records": total,
                   "end_to_end_latency": {"leader (client.rack=r1)": percentiles(readers["r1"].latencies),
                                          "follower (client.rack=r2)": percentiles(readers["r2"].latencies)},
                   "bytes_out_to_consumers": {b: scrape(ports[b]).get("kafka_server_brokertopicmetrics_bytesout_total",
                                                                      topic="ff") for b in RACKS},
                   "broker_cpu_s": cpu}
        finally:
            cluster.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
