"""Idle replication cost: follower fetch CPU with 1,000 idle partitions, with or without fetch sessions.

Starts ZooKeeper and 3 brokers, creates one topic of `--partitions` partitions at each replication
factor asked for (nothing is ever produced to it), lets the followers settle, then measures over
`--seconds` the brokers' CPU time (user + system, from /proc: steady on a shared machine), the
follower fetches the leaders answered (FetchFollower on the metrics endpoint), and the bytes the
followers' sockets sent to the leaders (the kernel's tcp_info counters via `ss`).

Prints JSON per replication factor: CPU cores used by the 3 brokers together, CPU ms per follower
fetch, follower fetches per second, request bytes per follower fetch.

    python bench/bench_fetch_sessions.py [--partitions 1000] [--rf 2,3] [--seconds 30]
                                         [--src OTHER/src]  (brokers from another source tree, e.g. an older commit)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import free_port  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402
from tests.support.metrics import scrape  # noqa: E402
from tests.support.tcp_stats import bytes_sent  # noqa: E402

BROKERS = (1, 2, 3)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample(cluster: ClusterProcess, ports: dict[int, int]) -> tuple[float, float, int, float]:
    """(brokers' CPU seconds, follower fetches answered, follower->leader bytes, monotonic time)."""
    pids = {b: cluster.broker(b).pid for b in BROKERS}
    cpu = sum(cpu_seconds(p) for p in pids.values() if p)
    now = time.monotonic()
    fetches = sum(scrape(ports[b]).total("kafka_network_requestmetrics_requests_total", request="FetchFollower")
                  for b in BROKERS)
    sent = sum(bytes_sent(pids[f], cluster.broker(leader).port) for f in BROKERS for leader in BROKERS
               if f != leader and pids[f])
    return cpu, fetches, sent, now


def run(rf: int, args: argparse.Namespace) -> dict[str, Any]:
    ports = {b: free_port() for b in BROKERS}
    with tempfile.TemporaryDirectory(prefix="strom-bench-sessions-") as tmp:
        cluster = ClusterProcess(tmp, 3, overrides={"auto.leader.rebalance.enable": "false"},
                                 broker_overrides={b: {"metrics.listener": f"http://127.0.0.1:{p}"}
                                                   for b, p in ports.items()})
        cluster.start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
            admin.create_topics([NewTopic("idle", args.partitions, rf)])["idle"].result(120)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:  # every replica in the ISR: the followers are settled
                states = [cluster.partition_state("idle", p) for p in range(args.partitions)]
                if all(s is not None and len(s.isr) == rf for s in states):
                    break
                time.sleep(1)
            time.sleep(args.settle)
            c0, f0, b0, t0 = sample(cluster, ports)
            time.sleep(args.seconds)
            c1, f1, b1, t1 = sample(cluster, ports)
            fetches = f1 - f0
            return {"partitions": args.partitions, "rf": rf, "seconds": round(t1 - t0, 1),
                    "broker_cpu_cores": round((c1 - c0) / (t1 - t0), 4),
                    "follower_fetches_per_s": round(fetches / (t1 - t0), 2),
                    "cpu_ms_per_follower_fetch": round(1000 * (c1 - c0) / fetches, 3) if fetches else None,
                    "request_bytes_per_follower_fetch": round((b1 - b0) / fetches) if fetches else None}
        finally:
            cluster.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rf", type=lambda s: [int(x) for x in s.split(",")], default=[2, 3])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds between a full ISR and the measurement")
    ap.add_argument("--src", help="source tree to run the brokers from (PYTHONPATH), e.g. an older checkout")
    args = ap.parse_args()
    if args.src:  # the brokers inherit it; this process keeps its own imports
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(args.src).resolve()), str(ROOT)])
    out = {"benchmark": "idle follower fetch", "src": args.src or "this checkout", "machine_cores": os.cpu_count(),
           "runs": [run(rf, args) for rf in args.rf]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
