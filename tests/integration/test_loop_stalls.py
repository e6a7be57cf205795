"""Nothing blocking runs on the broker's event loop (docs/decisions/0025-threading-model.md).

The loop stall detector logs a WARN with the blocking stack; these tests drive the work that
used to run on the loop and check that no broker logged one, while clients got their answers.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess
from tests.support.stalls import STALL_WARN_MS, is_known_unfixed, new_stall_reports

PARTITIONS = 50
COMMITS = 2_000  # x PARTITIONS offset records: a replay of 100,000 records


def _committed(broker: BrokerProcess, group: str, topic: str, deadline: float) -> list[int]:
    """The group's committed offsets, retried while the coordinator is still loading."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        while True:
            try:
                return [tp.offset for tp in c.committed(
                    [TopicPartition(topic, p) for p in range(PARTITIONS)], 30)]
            except Exception:  # noqa: BLE001 - COORDINATOR_LOAD_IN_PROGRESS surfaces as a timeout
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def test_loading_a_large_offsets_partition_does_not_stall_the_loop(broker_factory) -> None:  # noqa: ANN001
    """The replay of a whole __consumer_offsets partition (decoding every record) used to run on the
    loop after its read: 100,000 records blocked the broker for longer than the stall threshold."""
    b = broker_factory({"offsets.topic.num.partitions": 1})
    topic, group = "stall-offsets", "stall-group"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for n in range(1, COMMITS + 1):
            c.commit(offsets=[TopicPartition(topic, p, n) for p in range(PARTITIONS)], asynchronous=False)
    finally:
        c.close()
    b.restart()  # the new coordinator replays all 100,000 records
    assert _committed(b, group, topic, time.monotonic() + 120) == [COMMITS] * PARTITIONS
    b.stop()
    reports = [r for r in new_stall_reports() if not is_known_unfixed(r)]
    assert not reports, f"the broker's loop stalled past {STALL_WARN_MS} ms while loading:\n" + "\n".join(reports)
