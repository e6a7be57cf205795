"""Follower fetching (KIP-392) on a real cluster: brokers in racks r1, r2, r3, consumers naming theirs.

With ``replica.selector.class`` set on the leader, a consumer with ``client.rack=r2`` is sent to the
in-sync follower in r2, which serves it up to its own high watermark; the bytes leave that follower
(BytesOut per broker says so). A leader without the selector serves everyone itself. Fetches older
than v11 stay leader-only, and when the follower dies the consumer goes back to the leader.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest

from strom.protocol.inter_broker import build
from tests.integration.test_api_version_matrix import call
from tests.support.broker import free_port
from tests.support.cluster import ClusterProcess
from tests.support.metrics import scrape
from tests.support.replicas import WHOLE_LOG, batches_below, create_topic

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper, pytest.mark.slow]

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RACKS = {1: "r1", 2: "r2", 3: "r3"}
NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE = 6, 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    """Brokers 1 and 2 run the rack-aware selector, broker 3 does not (what it leads stays on it)."""
    ports = {b: free_port() for b in RACKS}
    overrides: dict[int, dict[str, object]] = {
        b: {"broker.rack": rack, "metrics.listener": f"http://127.0.0.1:{ports[b]}"} for b, rack in RACKS.items()}
    for b in (1, 2):
        overrides[b]["replica.selector.class"] = SELECTOR
    cluster = ClusterProcess(tmp_path_factory.mktemp("ffetch"), 3, broker_overrides=overrides, session_timeout_ms=15_000,
                             overrides={"replica.lag.time.max.ms": 120_000, "offsets.topic.num.partitions": 3,
                                        "transaction.state.log.num.partitions": 3})
    cluster.start()
    cluster.metrics_ports = ports  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        cluster.close()


def bytes_out(cluster: ClusterProcess, broker: int, topic: str) -> float:
    """Record bytes broker sent to consumers for topic (BytesOutPerSec as a total)."""
    samples = scrape(cluster.metrics_ports[broker])  # type: ignore[attr-defined]
    return samples.get("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) or 0.0


def produce(cluster: ClusterProcess, topic: str, values: list[bytes], acks: str = "all",
            bootstrap: str | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap or cluster.bootstrap, "acks": acks, "linger.ms": 5,
                  "log_level": 0})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(60) == 0


def consumer(cluster: ClusterProcess, rack: str) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "client.rack": rack, "enable.auto.commit": False, "log_level": 0,
                     "fetch.wait.max.ms": 100})


def read_exactly(c: Consumer, n: int, timeout: float = 90.0, start: int = 0) -> list[bytes]:
    """Poll until the n records from offset start arrived, by offset (a re-fetch after a switch of
    replica may repeat some); no gap allowed."""
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got[m.offset()] = m.value()
    assert sorted(got) == list(range(start, start + len(got))), "a gap in the offsets read"
    return [got[o] for o in sorted(got)]


def fetch(cluster: ClusterProcess, broker: int, topic: str, offset: int, version: int = 12, rack: str = "r2",  # noqa: ANN201
          isolation_level: int = 0):
    """One raw consumer Fetch (kafka-python's codec) to one broker; returns its only partition."""
    req = build(FetchRequest, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                isolation_level=isolation_level,
                session_id=0, session_epoch=-1, topics=[{"topic": topic, "partitions": [{
                    "partition": 0, "fetch_offset": offset, "log_start_offset": -1,
                    "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}],
                forgotten_topics_data=[], rack_id=rack)
    return call(cluster.broker(broker), req, version).responses[0].partitions[0]


def list_latest(cluster: ClusterProcess, broker: int, topic: str) -> tuple[int, int]:
    """A consumer's ListOffsets (v7, latest) to one broker: (error code, offset)."""
    req = build(ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=[{"name": topic, "partitions": [{
        "partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    part = call(cluster.broker(broker), req, 7).topics[0].partitions[0]
    return part.error_code, part.offset


def offsets_in(records: bytes | None) -> list[int]:
    """Every offset the record batches cover (base offset + last offset delta of each batch header)."""
    out: list[int] = []
    data, pos = records or b"", 0
    while pos + 27 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        out.extend(range(base, base + delta + 1))
        pos += 12 + length
    return out


def test_metadata_carries_every_brokers_rack(cluster: ClusterProcess) -> None:
    req = build(MetadataRequest, topics=[], allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)
    brokers = call(cluster.broker(2), req, 12).brokers
    assert {b.node_id: b.rack for b in brokers} == RACKS


def test_a_broker_without_a_replica_sends_the_consumer_back_to_the_leader(cluster: ClusterProcess) -> None:
    """NOT_LEADER_OR_FOLLOWER (refresh metadata, go to the leader), not UNKNOWN_TOPIC_OR_PARTITION."""
    topic = create_topic(cluster, replicas=[[1, 2]])
    cluster.wait_for(lambda: fetch(cluster, 3, topic, 0).error_code != 3 or None, 30,
                     "broker 3 learning the topic from the controller")
    assert fetch(cluster, 3, topic, 0).error_code == NOT_LEADER_OR_FOLLOWER
    assert fetch(cluster, 2, topic, 0).error_code == 0


def test_a_consumer_in_r2_reads_everything_from_the_follower_in_r2(cluster: ClusterProcess) -> None:
    topic = create_topic(cluster, replicas=[[1, 2, 3]])  # broker 1 leads, 2 and 3 follow
    values = [f"v{i}".encode() * 20 for i in range(2000)]
    produce(cluster, topic, values)
    c = consumer(cluster, "r2")
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert read_exactly(c, len(values)) == values
    finally:
        c.close()
    # The leader sent the consumer to broker 2 and no records; broker 2 sent them all.
    assert bytes_out(cluster, 2, topic) >= sum(len(v) for v in values)
    assert bytes_out(cluster, 1, topic) == 0
    assert bytes_out(cluster, 3, topic) == 0


def test_a_leader_without_the_selector_serves_every_rack_itself(cluster: ClusterProcess) -> None:
    topic = create_topic(cluster, replicas=[[3, 2, 1]])  # broker 3 leads and has no replica.selector.class
    values = [f"w{i}".encode() * 20 for i in range(500)]
    produce(cluster, topic, values)
    c = consumer(cluster, "r2")
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert read_exactly(c, len(values)) == values
    finally:
        c.close()
    assert bytes_out(cluster, 3, topic) >= sum(len(v) for v in values)
    assert bytes_out(cluster, 2, topic) == 0
    answer = fetch(cluster, 3, topic, 0)
    assert answer.error_code == 0 and answer.preferred_read_replica == -1 and offsets_in(answer.records)


def test_a_follower_serves_fetch_v11_up_to_its_own_high_watermark(cluster: ClusterProcess) -> None:
    topic = create_topic(cluster, replicas=[[1, 2, 3]])
    produce(cluster, topic, [b"committed-%d" % i for i in range(10)])
    cluster.wait_for(lambda: fetch(cluster, 2, topic, 0).high_watermark == 10 or None, 30,
                     "broker 2 learning the high watermark 10")

    # The leader names the follower in the consumer's rack and sends no records; another rack stays.
    to_leader = fetch(cluster, 1, topic, 0, rack="r2")
    assert (to_leader.error_code, to_leader.preferred_read_replica, offsets_in(to_leader.records)) == (0, 2, [])
    assert fetch(cluster, 1, topic, 0, rack="r1").preferred_read_replica == -1
    assert fetch(cluster, 1, topic, 0, rack="").preferred_read_replica == -1

    # Broker 3 frozen: the leader's HW stays at 10 while broker 2 replicates 5 more records (acks=1).
    cluster.sigstop(3)
    try:
        produce(cluster, topic, [b"uncommitted-%d" % i for i in range(5)], acks="1",
                bootstrap=cluster.broker(1).bootstrap)
        cluster.wait_for(lambda: batches_below(cluster.log_dir(2), topic, 0, WHOLE_LOG)[1] == 15 or None, 30,
                         "broker 2's log holding offsets up to 14")
        on_follower = fetch(cluster, 2, topic, 0)
        assert on_follower.error_code == 0 and on_follower.high_watermark == 10
        assert offsets_in(on_follower.records) == list(range(10))  # never past its HW
        between = fetch(cluster, 2, topic, 12)  # held by the follower, above its HW: nothing yet
        assert (between.error_code, offsets_in(between.records)) == (0, [])
        assert fetch(cluster, 2, topic, 100).error_code == OFFSET_OUT_OF_RANGE  # beyond what it holds
        # Before KIP-392's Fetch v11 a consumer may only read from the leader; ListOffsets always.
        assert fetch(cluster, 2, topic, 0, version=10).error_code == NOT_LEADER_OR_FOLLOWER
        assert list_latest(cluster, 2, topic) == (NOT_LEADER_OR_FOLLOWER, -1)
        assert list_latest(cluster, 1, topic) == (0, 10)
    finally:
        cluster.sigcont(3)
    cluster.wait_for(lambda: fetch(cluster, 2, topic, 0).high_watermark == 15 or None, 60,
                     "broker 2's high watermark reaching 15 once broker 3 caught up")
    assert offsets_in(fetch(cluster, 2, topic, 0).records) == list(range(15))


def test_read_committed_on_the_follower_stops_at_its_last_stable_offset(cluster: ClusterProcess) -> None:
    """The follower's LSO comes from its HW and the transactions in its own log: an open transaction
    holds a read_committed consumer back, an aborted one is never delivered."""
    topic = create_topic(cluster, replicas=[[1, 2, 3]])
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5, "log_level": 0})
    p.init_transactions(60)
    for values, commit in (([b"c0", b"c1", b"c2"], True), ([b"a0", b"a1"], False), ([b"o0", b"o1"], None)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, v, partition=0)
        assert p.flush(60) == 0  # written (an abort would purge what is still queued)
        if commit:
            p.commit_transaction(60)
        elif commit is False:
            p.abort_transaction(60)  # None: the last one stays open
    # Offsets: c0-c2 0..2, commit marker 3, a0-a1 4..5, abort marker 6, o0-o1 7..8 (open).
    cluster.wait_for(lambda: fetch(cluster, 2, topic, 0).high_watermark == 9 or None, 60,
                     "broker 2's high watermark reaching 9")
    committed = fetch(cluster, 2, topic, 0, isolation_level=1)
    assert committed.error_code == 0 and committed.last_stable_offset == 7
    assert max(offsets_in(committed.records)) < 7
    assert [t.first_offset for t in committed.aborted_transactions] == [4]
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "client.rack": "r2", "isolation.level": "read_committed", "enable.auto.commit": False,
                  "log_level": 0, "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []

        def read(n: int) -> bool | None:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
            return len(got) >= n or None

        cluster.wait_for(lambda: read(3), 90, "the committed records")
        p.commit_transaction(60)
        cluster.wait_for(lambda: read(5), 90, "the records of the transaction committed last")
    finally:
        c.close()
    assert got == [b"c0", b"c1", b"c2", b"o0", b"o1"]
    assert bytes_out(cluster, 2, topic) > 0 and bytes_out(cluster, 1, topic) == 0


def test_kafka_python_reads_from_the_follower_on_an_incremental_fetch_session(cluster: ClusterProcess) -> None:
    """kafka-python (Fetch v12, KIP-227 sessions) with client_rack=r2: the follower opens a session for
    it and serves every record through incremental fetches."""
    topic = create_topic(cluster, replicas=[[1, 2, 3]])
    values = [f"k{i}".encode() for i in range(200)]
    produce(cluster, topic, values[:100])

    def sessions_on_2() -> float:  # the followers' own sessions with broker 2 count too: compare
        return scrape(cluster.metrics_ports[2]).get(  # type: ignore[attr-defined]
            "kafka_server_fetchsessioncache_numincrementalfetchsessions") or 0.0

    before = sessions_on_2()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, client_rack="r2", enable_auto_commit=False,
                             group_id=None, fetch_max_wait_ms=100, request_timeout_ms=30_000)
    got: dict[int, bytes] = {}
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)

        def read(n: int) -> bool | None:
            for records in consumer.poll(timeout_ms=500).values():
                got.update((r.offset, r.value) for r in records)
            return len(got) >= n or None

        cluster.wait_for(lambda: read(100), 90, "kafka-python reading the first 100 records")
        assert sessions_on_2() >= before + 1  # the follower holds the consumer's session
        produce(cluster, topic, values[100:])  # now read through incremental fetches of that session
        cluster.wait_for(lambda: read(200), 90, "kafka-python reading all 200 records")
    finally:
        consumer.close()
    assert [got[o] for o in sorted(got)] == values and sorted(got) == list(range(200))
    assert bytes_out(cluster, 2, topic) >= sum(len(v) for v in values)
    assert bytes_out(cluster, 1, topic) == 0


def test_the_consumer_goes_back_to_the_leader_when_its_follower_dies(cluster: ClusterProcess) -> None:
    """Last in this module: broker 2 is killed (and started again at the end)."""
    topic = create_topic(cluster, replicas=[[1, 2, 3]])
    first = [f"a{i}".encode() for i in range(300)]
    produce(cluster, topic, first)
    c = consumer(cluster, "r2")
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert read_exactly(c, len(first)) == first
        assert bytes_out(cluster, 2, topic) > 0 and bytes_out(cluster, 1, topic) == 0
        cluster.kill9(2)
        later = [f"b{i}".encode() for i in range(300)]
        writer = threading.Thread(target=produce, args=(cluster, topic, later))
        writer.start()
        writer.join(120)
        assert not writer.is_alive()
        assert read_exactly(c, len(later), timeout=120, start=len(first)) == later
    finally:
        c.close()
    assert bytes_out(cluster, 1, topic) > 0  # the leader served what the dead follower could not
    cluster.start_broker(2)
