"""The exactly-once delivery without Spark: markers, skipping, zombie fencing; sink option parsing.

``ExactlyOnceDelivery.write`` is called directly (outside a Spark task it runs as partition 0,
attempt 0 of a batch write), so these cases are fast and exact about who commits what.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from strom.spark.options import StromOptionError, parse_sink_options
from strom.spark.sink import ExactlyOnceDelivery, TaskScope, last_committed_batch, transactional_id
from tests.spark.conftest import create_topic, unique

pytestmark = [pytest.mark.spark]


def _rows(values: list[str]) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_arrays([pa.array(values, pa.string())], names=["value"])]


def _committed(bootstrap: str, topic: str) -> Counter[str]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("chk"), "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    got: Counter[str] = Counter()
    try:
        while True:
            m = c.poll(10)
            assert m is not None, "no end of partition within 10 s"
            if m.error() is not None:
                break
            got[m.value().decode()] += 1
    finally:
        c.close()
    return got


def test_second_attempt_skips_and_marker_is_readable(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("eo-direct"), 1)
    opts = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic, "delivery": "exactly-once"})
    delivery = ExactlyOnceDelivery(opts)
    first = delivery.write(iter(_rows(["a", "b", "c"])))
    assert (first.rows, first.skipped) == (3, False)
    again = delivery.write(iter(_rows(["a", "b", "c"])))  # same write, same partition: a retry
    assert (again.rows, again.skipped) == (0, True)
    txn_id = transactional_id(opts, TaskScope(0, 0, None, None), delivery.write_id)
    assert last_committed_batch(opts, txn_id) == 0
    other = ExactlyOnceDelivery(opts).write(iter(_rows(["d"])))  # another write: its own id
    assert other.rows == 1
    assert _committed(bootstrap, topic) == Counter({"a": 1, "b": 1, "c": 1, "d": 1})


def test_task_start_fences_a_zombie_attempt(bootstrap: str) -> None:
    from confluent_kafka import KafkaException, Producer

    topic = create_topic(bootstrap, unique("eo-zombie"), 1)
    opts = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic, "delivery": "exactly-once"})
    delivery = ExactlyOnceDelivery(opts)
    txn_id = transactional_id(opts, TaskScope(0, 0, None, None), delivery.write_id)
    zombie: Any = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    zombie.init_transactions(60)
    zombie.begin_transaction()
    for v in ("z1", "z2"):
        zombie.produce(topic, v.encode(), partition=0)
    assert zombie.flush(60) == 0  # the zombie's rows are in the log, its transaction open
    assert delivery.write(iter(_rows(["x", "y"]))).rows == 2
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    assert _committed(bootstrap, topic) == Counter({"x": 1, "y": 1})


def test_sink_option_validation() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t"}
    assert parse_sink_options(base).delivery == "at-least-once"
    eo = parse_sink_options({**base, "delivery": "Exactly-Once", "kafka.transactional.id": "app"})
    assert eo.exactly_once and eo.transactional_id_prefix == "app" and "transactional.id" not in eo.client
    assert eo.producer_config()["transaction.timeout.ms"] == 300_000
    with pytest.raises(StromOptionError, match="needs delivery=exactly-once"):
        parse_sink_options({**base, "kafka.transactional.id": "app"})
    with pytest.raises(StromOptionError, match="delivery"):
        parse_sink_options({**base, "delivery": "twice"})
    with pytest.raises(StromOptionError, match="enable.idempotence"):
        parse_sink_options({**base, "delivery": "exactly-once", "kafka.enable.idempotence": "false"})
    fault = parse_sink_options({**base, "failAfterWriteForTesting": '{"batch": 2, "attempts": 3}'})
    assert fault.fail_after_write == {"batch": 2, "attempts": 3}
    with pytest.raises(StromOptionError, match="failAfterWriteForTesting"):
        parse_sink_options({**base, "failAfterWriteForTesting": '{"when": "now"}'})
