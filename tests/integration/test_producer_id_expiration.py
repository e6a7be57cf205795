"""producer.id.expiration.ms: an idle producer is forgotten, as in Kafka, unless its transaction is open.

DescribeProducers (what `strom transactions describe-producers` shows) stops listing it, and the
producer-state snapshot written at the next segment roll no longer carries it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse

from strom.storage.producer_state import ProducerStateManager
from tests.integration.test_produce_consume import new_topic
from tests.integration.test_txn_offsets_and_producers import call
from tests.support.broker import BrokerProcess

EXPIRATION_MS = 3000
WAIT_S = 60.0  # bounded, generous: the machine may be loaded


def active_producers(broker: BrokerProcess, topic: str) -> dict[int, int]:
    """producer id -> current transaction start offset (-1: none), as DescribeProducers answers."""
    req = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])])
    part = call(broker, req, DescribeProducersResponse, 0).topics[0].partitions[0]
    assert part.error_code == 0
    return {p.producer_id: p.current_txn_start_offset for p in part.active_producers}


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {WAIT_S}s waiting for {what}"
        time.sleep(0.2)


def newest_snapshot(partition_dir: Path) -> tuple[int, set[int]]:
    """(offset, producer ids) of the newest producer-state snapshot of a partition."""
    mgr = ProducerStateManager(str(partition_dir))
    offset = mgr.snapshot_offsets()[-1]
    return offset, set(ProducerStateManager.read_snapshot(mgr.snapshot_path(offset)))


def test_idle_producer_expires_but_an_open_transaction_keeps_its_producer(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory({"producer.id.expiration.ms": EXPIRATION_MS,
                             "producer.id.expiration.check.interval.ms": 200,
                             "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1})
    topic = new_topic(broker, config={"segment.bytes": "4096"})
    partition_dir = Path(broker.data_dir) / f"{topic}-0"

    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(3):
        idempotent.produce(topic, value=b"idempotent-%d" % i, partition=0)
    assert idempotent.flush(30) == 0
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"expiry-{topic}",
                    "transaction.timeout.ms": 120_000, "linger.ms": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"in an open transaction", partition=0)
    assert txn.flush(30) == 0

    producers = active_producers(broker, topic)
    assert len(producers) == 2
    (txn_pid,) = [pid for pid, start in producers.items() if start >= 0]
    (idle_pid,) = [pid for pid, start in producers.items() if start < 0]

    wait_until(lambda: idle_pid not in active_producers(broker, topic), "the idle producer to expire")
    time.sleep(EXPIRATION_MS / 1000)  # the transactional producer is idle as long, but its transaction is open
    assert set(active_producers(broker, topic)) == {txn_pid}

    # A segment roll snapshots the producer state (the file lands shortly after, written on the log dir's
    # storage thread): the expired producer is no longer in it.
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "linger.ms": 0,
                      "acks": "all"})
    before = ProducerStateManager(str(partition_dir)).snapshot_offsets()
    for _ in range(4):
        plain.produce(topic, value=b"x" * 1500, partition=0)
        assert plain.flush(30) == 0
    wait_until(lambda: ProducerStateManager(str(partition_dir)).snapshot_offsets() != before,
               "a segment roll's producer snapshot")
    offset, in_snapshot = newest_snapshot(partition_dir)
    assert idle_pid not in in_snapshot, f"snapshot {offset} still carries expired producer {idle_pid}"
    assert txn_pid in in_snapshot

    txn.commit_transaction(30)
    assert os.path.isdir(partition_dir)
