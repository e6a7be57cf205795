"""Followers on fetch sessions (KIP-227) and DeleteRecords waiting for the followers, on real clusters.

An idle follower's fetch carries no partitions once its session is open (measured on the wire: the
bytes its socket sent to the leader per fetch the leader answered), yet it stays in the ISR and
replication goes on. DeleteRecords answers once every in-sync replica moved its log start offset,
or REQUEST_TIMED_OUT when one cannot.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.broker import free_port
from tests.support.cluster import ClusterProcess
from tests.support.metrics import scrape
from tests.support.replicas import create_topic
from tests.support.tcp_stats import bytes_sent

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper, pytest.mark.slow]

LAG_MS = 10_000
PARTITIONS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    ports = {b: free_port() for b in (1, 2, 3)}
    cluster = ClusterProcess(tmp_path_factory.mktemp("sessions"), 3,
                             overrides={"replica.lag.time.max.ms": LAG_MS},
                             broker_overrides={b: {"metrics.listener": f"http://127.0.0.1:{p}"}
                                               for b, p in ports.items()})
    cluster.start()
    cluster.metrics_ports = ports  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        cluster.close()


def metrics(cluster: ClusterProcess, broker: int):  # noqa: ANN201
    return scrape(cluster.metrics_ports[broker])  # type: ignore[attr-defined]


def follower_fetches(cluster: ClusterProcess, leader: int) -> float:
    return metrics(cluster, leader).total("kafka_network_requestmetrics_requests_total", request="FetchFollower")


def test_an_idle_follower_fetch_carries_no_partitions_and_replication_goes_on(cluster: ClusterProcess) -> None:
    # Broker 1 leads every partition, broker 2 follows them all: its fetches to broker 1 are the only ones.
    topic = create_topic(cluster, replicas=[[1, 2]] * PARTITIONS)
    follower_pid = cluster.broker(2).pid
    assert follower_pid is not None
    leader_port = cluster.broker(1).port
    cluster.wait_for(lambda: follower_fetches(cluster, 1) >= 3 or None, 60, "the follower fetching from broker 1")
    sent, fetches = bytes_sent(follower_pid, leader_port), follower_fetches(cluster, 1)
    time.sleep(LAG_MS / 1000 + 2)  # idle for longer than the ISR lets a follower lag
    sent, fetches = bytes_sent(follower_pid, leader_port) - sent, follower_fetches(cluster, 1) - fetches
    assert fetches >= 5, f"only {fetches} follower fetches in the idle window"
    per_fetch = sent / fetches
    # A request naming its partitions needs over 30 bytes for each of them; a session fetch, only its header.
    assert per_fetch < 200, f"an idle follower fetch sent {per_fetch:.0f} bytes for {PARTITIONS} partitions"
    assert metrics(cluster, 1).get("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") == PARTITIONS
    for p in range(PARTITIONS):  # the idle follower was never taken for lagging
        state = cluster.partition_state(topic, p)
        assert state is not None and sorted(state.isr) == [1, 2], (p, state)

    # Replication still goes on: acks=all writes to every partition complete and read back.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for p in range(PARTITIONS):
        producer.produce(topic, value=f"v{p}".encode(), partition=p)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: set[tuple[int, bytes]] = set()
    deadline = time.monotonic() + 60
    try:
        while len(got) < PARTITIONS and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.add((m.partition(), m.value()))
    finally:
        consumer.close()
    assert got == {(p, f"v{p}".encode()) for p in range(PARTITIONS)}

    def follower_caught_up() -> bool | None:
        s = metrics(cluster, 2)
        return all(s.get("kafka_log_log_logendoffset", topic=topic, partition=str(p)) == 1
                   for p in range(PARTITIONS)) or None

    cluster.wait_for(follower_caught_up, 60, "the follower holding every record")


def test_delete_records_answers_once_every_isr_replica_moved_its_log_start(cluster: ClusterProcess) -> None:
    topic = create_topic(cluster, replicas=[[1, 2, 3]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(100):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 60)], operation_timeout=30, request_timeout=60)
    low = next(iter(futures.values())).result(60)
    assert low.low_watermark >= 60
    # When the answer came, every follower had already dropped the records.
    for b in (2, 3):
        start = metrics(cluster, b).get("kafka_log_log_logstartoffset", topic=topic, partition="0")
        assert start is not None and start >= 60, (b, start)

    # A follower that cannot move (stopped, still in the ISR) makes the request time out.
    cluster.sigstop(3)
    try:
        futures = admin.delete_records([TopicPartition(topic, 0, 80)], operation_timeout=2, request_timeout=30)
        with pytest.raises(KafkaException) as failed:
            next(iter(futures.values())).result(60)
        assert failed.value.args[0].name() == "REQUEST_TIMED_OUT", failed.value
        assert metrics(cluster, 2).get("kafka_log_log_logstartoffset", topic=topic, partition="0") >= 80
    finally:
        cluster.sigcont(3)
