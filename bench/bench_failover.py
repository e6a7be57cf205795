"""Write gaps per partition when brokers die: kill -9 of the controller, of a leader, of both.

ZooKeeper + 3 brokers (`zookeeper.session.timeout.ms` 6000, `replica.lag.time.max.ms` Kafka's 30 s),
one RF 3 topic with 6 partitions. One idempotent acks=all producer per partition sends a record
every 20 ms; for each partition the figure is the longest time between two acknowledgements around
the kill (a partition that takes no write for 30 s shows a 30 s gap). min.insync.replicas is 2, and
1 for the scenario that kills two of the three brokers (with 2 nothing could be written there).

Prints one JSON document: per scenario, the gap per partition in seconds, its max, and the target
(session timeout + 3 s). Usage: python bench/bench_failover.py [--scenarios controller,leader,both]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402
from tests.support.replicas import create_topic  # noqa: E402

PARTITIONS = 6
INTERVAL_S = 0.02
SESSION_TIMEOUT_MS = 6000


class PartitionWriter:
    """Sends one record every INTERVAL_S to one partition and remembers when each was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": 120_000, "linger.ms": 0, "log_level": 0})
        self.topic, self.partition = topic, partition
        self.acks: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is None:
            self.acks.append(time.monotonic())
        else:
            self.errors += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, b"x" * 100, partition=self.partition, on_delivery=self._on_delivery)
            self.producer.poll(INTERVAL_S)

    def start(self) -> PartitionWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(60)

    def gap_around(self, t: float) -> float:
        """Longest time between consecutive acknowledgements from just before t on."""
        times = [a for a in self.acks if a >= t - 1.0]
        before = [a for a in self.acks if a < t]
        if before:
            times = [before[-1], *[a for a in times if a >= before[-1]]]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=float("inf"))


def run_scenario(workdir: str, scenario: str, settle_s: float) -> dict[str, object]:
    cluster = ClusterProcess(Path(workdir) / scenario, 3, session_timeout_ms=SESSION_TIMEOUT_MS,
                             overrides={"auto.leader.rebalance.enable": "false"})
    cluster.start()
    try:
        min_isr = "1" if scenario == "both" else "2"
        topic = create_topic(cluster, partitions=PARTITIONS, config={"min.insync.replicas": min_isr})
        writers = [PartitionWriter(cluster.bootstrap, topic, p).start() for p in range(PARTITIONS)]
        time.sleep(3)
        controller = cluster.controller_id()
        leaders = {p: cluster.partition_state(topic, p).leader for p in range(PARTITIONS)}
        if scenario == "controller":
            victims = [controller]
        elif scenario == "leader":
            victims = [next(b for b in leaders.values() if b != controller)]
        else:
            victims = [controller, next(b for b in leaders.values() if b != controller)]
        killed_at = time.monotonic()
        for v in victims:
            cluster.kill9(v)
        time.sleep(settle_s)
        for w in writers:
            w.stop()
        gaps = [round(w.gap_around(killed_at), 2) for w in writers]
        return {"victims": victims, "controller": controller, "min_insync_replicas": int(min_isr),
                "gap_s_per_partition": gaps, "max_gap_s": max(gaps),
                "target_s": SESSION_TIMEOUT_MS / 1000 + 3, "errors": sum(w.errors for w in writers)}
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="controller,leader,both")
    parser.add_argument("--settle", type=float, default=45.0, help="seconds of writing after the kill")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as workdir:
        result = {s: run_scenario(workdir, s, args.settle) for s in args.scenarios.split(",")}
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
