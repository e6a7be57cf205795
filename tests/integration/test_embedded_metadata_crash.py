"""A single broker killed (-9) while CreateTopics batches are being written keeps every topic it
acknowledged, each whole, and never shows a topic of the interrupted batch half created."""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from strom.metadata.embedded import METADATA_FILE
from tests.integration.test_produce_consume import consume_all, produce

PARTITIONS = 20


def create_batch(admin: AdminClient, names: list[str]) -> dict:
    return admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names], operation_timeout=60,
                               request_timeout=90)


def topics_with_leaders(bootstrap: str) -> dict[str, int]:
    """Topic -> number of partitions that have a leader, as a fresh client sees them after a restart."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        try:
            md = admin.list_topics(timeout=20)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return {name: sum(1 for p in t.partitions.values() if p.leader >= 0)
            for name, t in md.topics.items() if not name.startswith("__")}


def test_kill9_in_the_middle_of_topic_batches_loses_no_acknowledged_topic(broker_factory) -> None:  # noqa: ANN001
    broker = broker_factory()
    acknowledged: list[str] = []
    for round_, delay in enumerate((0.0, 0.05, 0.2, 0.5)):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        done = [f"r{round_}-acked-{i}" for i in range(5)]
        for name, fut in create_batch(admin, done).items():
            fut.result(90)
            acknowledged.append(name)
        in_flight = [f"r{round_}-in-flight-{i}" for i in range(5)]
        create_batch(admin, in_flight)
        time.sleep(delay)
        broker.kill9()
        broker.start(timeout=60)
        json.loads((Path(broker.data_dir) / METADATA_FILE).read_text())  # whole, never torn
        seen = topics_with_leaders(broker.bootstrap)
        missing = [t for t in acknowledged if seen.get(t) != PARTITIONS]
        assert not missing, {t: seen.get(t) for t in missing}
        half = {t: seen[t] for t in in_flight if t in seen and seen[t] != PARTITIONS}
        assert not half, half  # a topic of the interrupted batch is there whole or not at all
    topic = acknowledged[0]
    produce(broker, topic, [{"value": b"after the crashes", "partition": 3}])
    assert [m.value() for m in consume_all(broker, topic, 1, partitions=PARTITIONS)] == [b"after the crashes"]
