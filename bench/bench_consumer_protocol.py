"""Rebalance cost of one join: classic eager and cooperative groups against a KIP-848 consumer group.

A group of N members (confluent-kafka consumers, one thread each) consumes a P-partition topic while
a producer writes at a steady rate. Once the group is settled (every partition owned, by exactly one
member) one more member joins. Measured per protocol, in the same run against one broker:

- settle_s: from the join until every partition is owned again by exactly one member, the new member
  included, and nothing has changed for a quiet second (the last change counts, not the quiet time);
- partition_pauses: partition ownership changes (revocations) the join caused; eager revokes everything;
- consumed_per_s_before / consumed_per_s_during: consumption rate in a steady window before the join
  and over the settle window; lost_records = what the steady rate would have consumed minus what was.

The upgrade-* modes start a classic group (cooperative-sticky or range) and let a consumer-protocol
member join it: the join converts the group online (KIP-848 migration) and the broker's assignor
takes over, the classic members following through JoinGroup/SyncGroup.

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_consumer_protocol.py                      # 10 members, 100 partitions
    python bench/bench_consumer_protocol.py --members 4 --partitions 24
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

HEARTBEAT_MS = 500
MODES = {
    "classic-eager": {"group.protocol": "classic", "partition.assignment.strategy": "range",
                      "heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": 10000},
    "classic-cooperative": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
                            "heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": 10000},
    "consumer": {"group.protocol": "consumer"},
}
# Online migration: a classic group whose joining member speaks the consumer protocol (the join upgrades it).
MIXED = {"upgrade-cooperative": ("classic-cooperative", "consumer"), "upgrade-eager": ("classic-eager", "consumer")}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Watch:
    """Who owns what, as the members' callbacks say, and how much was consumed when."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: dict[str, set[int]] = {}
        self.last_change = time.monotonic()
        self.revocations = 0
        self.consumed = 0

    def assign(self, member: str, parts: list[Any]) -> None:
        with self.lock:
            self.owned.setdefault(member, set()).update(tp.partition for tp in parts)
            self.last_change = time.monotonic()

    def revoke(self, member: str, parts: list[Any]) -> None:
        with self.lock:
            self.owned.setdefault(member, set()).difference_update(tp.partition for tp in parts)
            self.revocations += len(parts)
            self.last_change = time.monotonic()

    def settled(self, partitions: int, members: int) -> bool:
        with self.lock:
            sets = [s for s in self.owned.values()]
            total = sum(len(s) for s in sets)
            union = set().union(*sets) if sets else set()
            return len(sets) == members and all(sets) and total == partitions == len(union)


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, name: str, watch: Watch, config: dict[str, Any]
                 ) -> None:
        self.name, self.watch = name, watch
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
                                  "enable.auto.commit": True, "log_level": 0, **config})
        self.consumer.subscribe([topic], on_assign=lambda c, p: watch.assign(name, p),
                                on_revoke=lambda c, p: watch.revoke(name, p), on_lost=lambda c, p: watch.revoke(name, p))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(500, 0.1):
                if not m.error():
                    with self.watch.lock:
                        self.watch.consumed += 1
        self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def produce_steadily(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    interval = 1.0 / rate
    nxt = time.monotonic()
    while not stop.is_set():
        producer.produce(topic, b"x" * 100)
        producer.poll(0)
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(30)


def run_mode(bootstrap: str, mode: str, members: int, partitions: int, rate: int) -> dict[str, Any]:
    topic = f"bench-{mode}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    group = f"g-{topic}"
    stop = threading.Event()
    producer = threading.Thread(target=produce_steadily, args=(bootstrap, topic, rate, stop), daemon=True)
    producer.start()
    watch = Watch()
    initial, joiner = MIXED.get(mode, (mode, mode))
    group_members = [Member(bootstrap, group, topic, f"m{i}", watch, MODES[initial]) for i in range(members)]
    try:
        deadline = time.monotonic() + 180
        while not (watch.settled(partitions, members) and time.monotonic() - watch.last_change > 2):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: the group of {members} never settled")
            time.sleep(0.1)
        log(f"{mode}: {members} members settled")
        with watch.lock:
            c0 = watch.consumed
        t0 = time.monotonic()
        time.sleep(3)
        with watch.lock:
            steady_rate = (watch.consumed - c0) / (time.monotonic() - t0)
            c_join, revocations_before = watch.consumed, watch.revocations
        joined_at = time.monotonic()
        group_members.append(Member(bootstrap, group, topic, f"m{members}", watch, MODES[joiner]))
        deadline = joined_at + 180
        while not (watch.settled(partitions, members + 1) and time.monotonic() - watch.last_change > 1):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: the group never settled after the join")
            time.sleep(0.05)
        with watch.lock:
            settle = watch.last_change - joined_at
            window = time.monotonic() - joined_at
            consumed = watch.consumed - c_join
            revocations = watch.revocations - revocations_before
        log(f"{mode}: settled {settle:.2f} s after the join")
        return {"settle_s": round(settle, 3), "partition_pauses": revocations,
                "consumed_per_s_before": round(steady_rate, 1),
                "consumed_per_s_during": round(consumed / window, 1),
                "lost_records": max(0, round(steady_rate * window - consumed))}
    finally:
        for m in group_members:
            m.close()
        stop.set()
        producer.join(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rate", type=int, default=2000, help="records/s produced during the run")
    parser.add_argument("--modes", default=",".join([*MODES, *MIXED]))
    args = parser.parse_args()
    with BrokerProcess(overrides={"group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
                                  "group.consumer.min.heartbeat.interval.ms": HEARTBEAT_MS,
                                  "offsets.topic.num.partitions": 5}) as broker:
        results = {mode: run_mode(broker.bootstrap, mode, args.members, args.partitions, args.rate)
                   for mode in args.modes.split(",")}
    print(json.dumps({"members": args.members, "partitions": args.partitions, "rate": args.rate,
                      "heartbeat_interval_ms": HEARTBEAT_MS, "results": results}, indent=2))


if __name__ == "__main__":
    main()
