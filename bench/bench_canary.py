"""Canary latency while the cluster moves leadership: does anything block a broker's event loop?

ZooKeeper + 3 brokers, N RF 3 partitions (default 1,500, in topics of 100), and one canary
partition led by a broker that no phase involves (not the controller, not the victim). A canary
producer (acks=1, so only the leader's loop is measured) sends one record every 20 ms; the figure of
each phase is the p50 / p99 / max produce latency of the records sent during it:

- baseline: nothing happens;
- kill9_restart: kill -9 of the victim, leaders move, the victim restarts and rejoins every ISR;
- preferred_election: a preferred leader election of every partition moves leadership back;
- zookeeper_sigstop: ZooKeeper SIGSTOPped for 5 s while a CreateTopics is in flight.

The canary's leader hosts followers of most partitions, so it takes every LeaderAndIsr,
UpdateMetadata and StopReplica of the phases: a blocking callback there shows as canary latency.
Prints one JSON document, with the number of loop stall WARNs each broker logged.
Usage: python bench/bench_canary.py [--partitions 1500] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import ElectionType, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402

from strom.server_common.stall_detector import LOOP_STALL_MARKER  # noqa: E402

INTERVAL_S = 0.02
TOPIC_PARTITIONS = 100  # load partitions per topic
SESSION_TIMEOUT_MS = 18_000  # Kafka's default: ZooKeeper's 5 s stop must not expire the sessions


class Canary:
    """Sends a record every INTERVAL_S to one partition; remembers (send time, latency) of each."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0,
                                  "message.timeout.ms": 120_000, "log_level": 0})
        self.topic = topic
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            sent = time.monotonic()

            def done(err: object, _msg: object, sent: float = sent) -> None:
                if err is None:
                    self.samples.append((sent, time.monotonic() - sent))
                else:
                    self.errors += 1

            self.producer.produce(self.topic, b"c" * 100, partition=0, on_delivery=done)
            next_at = max(next_at + INTERVAL_S, time.monotonic())
            while (left := next_at - time.monotonic()) > 0:
                self.producer.poll(left)  # returns early when it served a delivery

    def start(self) -> Canary:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(60)

    def figures(self, start: float, end: float) -> dict[str, float | int]:
        lat = sorted(lat for sent, lat in self.samples if start <= sent < end)
        if not lat:
            return {"records": 0}
        q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0]] * 99
        return {"records": len(lat), "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1),
                "max_ms": round(lat[-1] * 1000, 1)}


def create_load(admin: AdminClient, partitions: int) -> list[str]:
    topics = []
    left = partitions
    while left > 0:
        n = min(TOPIC_PARTITIONS, left)
        name = f"load-{len(topics)}"
        admin.create_topics([NewTopic(name, n, 3)])[name].result(timeout=120)
        topics.append(name)
        left -= n
    return topics


def wait_settled(cluster: ClusterProcess, topics: list[str], timeout: float, preferred: bool = False) -> bool:
    """Every load partition has a full ISR (and, with `preferred`, its first replica as leader)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = True
        for topic in topics:
            assignment = cluster.topic_assignment(topic)
            for p, replicas in assignment.items():
                state = cluster.partition_state(topic, p)
                if state is None or len(state.isr) < 3 or (preferred and state.leader != replicas[0]):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return True
        time.sleep(2)
    return False


def run(partitions: int, baseline_s: float, settle_s: float, keep: str | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-canary-") as tmp:
        workdir = Path(keep) if keep else Path(tmp)
        cluster = ClusterProcess(workdir, 3, session_timeout_ms=SESSION_TIMEOUT_MS,
                                 overrides={"auto.leader.rebalance.enable": "false"})
        cluster.start()
        try:
            result = measure(cluster, partitions, baseline_s, settle_s)
        finally:
            cluster.close()
        result["stall_warnings"] = {b: sum(1 for line in open(p.log_path, errors="replace")
                                           if LOOP_STALL_MARKER in line and "WARNING" in line)
                                    for b, p in cluster.brokers.items()}
        return result


def measure(cluster: ClusterProcess, partitions: int, baseline_s: float, settle_s: float) -> dict[str, object]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    started = time.monotonic()
    topics = create_load(admin, partitions)
    settled = wait_settled(cluster, topics, 600)
    setup_s = round(time.monotonic() - started, 1)
    controller = cluster.controller_id()
    others = [b for b in cluster.broker_ids if b != controller]
    canary_leader, victim = others[0], others[1]
    replicas = [canary_leader, *[b for b in cluster.broker_ids if b != canary_leader]]
    admin.create_topics([NewTopic("canary", num_partitions=1, replication_factor=-1,
                                  replica_assignment=[replicas])])["canary"].result(timeout=60)
    cluster.wait_isr("canary", 0, replicas, timeout=60)
    canary = Canary(cluster.bootstrap, "canary").start()
    phases: dict[str, dict[str, object]] = {}
    try:
        time.sleep(2)  # connection and metadata warm-up, not measured
        t0 = time.monotonic()
        time.sleep(baseline_s)
        phases["baseline"] = canary.figures(t0, time.monotonic())
        print("baseline", phases["baseline"], file=sys.stderr, flush=True)

        t0 = time.monotonic()
        cluster.kill9(victim)
        survivors = sorted(b for b in cluster.broker_ids if b != victim)
        cluster.wait_for(lambda: cluster.registered_brokers() == survivors or None, 120,
                         "the victim's session expired")
        time.sleep(settle_s)  # the controller moves leadership off the victim
        cluster.start_broker(victim)
        rejoined = wait_settled(cluster, topics, 600)
        time.sleep(settle_s)
        phases["kill9_restart"] = {**canary.figures(t0, time.monotonic()), "rejoined_every_isr": rejoined}
        print("kill9_restart", phases["kill9_restart"], file=sys.stderr, flush=True)

        t0 = time.monotonic()
        admin.elect_leaders(ElectionType.PREFERRED, None).result()
        moved_back = wait_settled(cluster, topics, 600, preferred=True)
        time.sleep(settle_s)
        phases["preferred_election"] = {**canary.figures(t0, time.monotonic()), "all_preferred": moved_back}
        print("preferred_election", phases["preferred_election"], file=sys.stderr, flush=True)

        t0 = time.monotonic()
        zk_pid = cluster.zookeeper.pid
        assert zk_pid is not None
        os.kill(zk_pid, signal.SIGSTOP)
        try:
            create = admin.create_topics([NewTopic("created-while-frozen", 10, 3)],
                                         operation_timeout=30, request_timeout=60)["created-while-frozen"]
            time.sleep(5)
        finally:
            os.kill(zk_pid, signal.SIGCONT)
        try:
            create.result(timeout=90)
            created = True
        except Exception as exc:  # noqa: BLE001 - report, do not abort the figures
            created = f"{type(exc).__name__}: {exc}"
        time.sleep(settle_s)
        phases["zookeeper_sigstop"] = {**canary.figures(t0, time.monotonic()), "create_topics": created}
    finally:
        canary.stop()
    return {"partitions": partitions, "rf": 3, "canary_acks": 1, "interval_ms": INTERVAL_S * 1000,
            "canary_leader": canary_leader, "victim": victim, "controller": controller,
            "setup_s": setup_s, "settled": settled, "canary_errors": canary.errors, "phases": phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1500, help="RF 3 load partitions")
    parser.add_argument("--baseline", type=float, default=10.0, help="seconds of the baseline phase")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds measured after each phase settles")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (broker logs name any loop stall)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the cluster on the way out
    json.dump(run(args.partitions, args.baseline, args.settle, args.keep), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
