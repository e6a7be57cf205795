"""Old clients against a ZooKeeper cluster: OffsetCommit v0 / OffsetFetch v0 keep their offsets in ZooKeeper
as Kafka 3.9 does in ZooKeeper mode (v1+ commits stay in __consumer_offsets), and a message-format-v1
producer's records replicate as v2 batches."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer.group import OffsetFetchRequest

from strom.protocol import codec
from tests.support.cluster import ClusterProcess
from tests.support.raw_client import RawClient
from tests.support.replicas import create_topic

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper, pytest.mark.slow]


def call(cluster: ClusterProcess, broker_id: int, request, version: int):  # noqa: ANN001, ANN201
    c = RawClient(cluster.broker(broker_id))
    try:
        frame = c.request(request, version)
    finally:
        c.close()
    return codec.response_class(request.API_KEY).decode(frame[4:], version=version)


def test_offset_commit_v0_goes_to_zookeeper_and_offset_fetch_v0_reads_it(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(2)
    topic = create_topic(cluster, partitions=1, replication_factor=2)
    group = f"zk-{topic}"
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[T(
        name=topic, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=17,
                                                               commit_timestamp=-1, committed_metadata="")])])
    # any broker answers v0: ZooKeeper, not a group coordinator, holds these offsets (as in Kafka 3.9)
    assert call(cluster, 1, commit, 0).topics[0].partitions[0].error_code == 0
    data, _ = cluster.zk.get(f"/consumers/{group}/offsets/{topic}/0")
    assert data == b"17"
    F = OffsetFetchRequest.OffsetFetchRequestTopic
    fetch = OffsetFetchRequest(group_id=group, topics=[F(name=topic, partition_indexes=[0])])
    for broker_id in (1, 2):
        p = call(cluster, broker_id, fetch, 0).topics[0].partitions[0]
        assert (p.error_code, p.committed_offset) == (0, 17)
    unknown = OffsetFetchRequest(group_id=group, topics=[F(name="no-such-topic", partition_indexes=[0])])
    assert call(cluster, 1, unknown, 0).topics[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_message_format_v1_producer_replicates(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(2)
    topic = create_topic(cluster, partitions=1, replication_factor=2)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, api_version=(0, 10, 1),
                      acks="all", request_timeout_ms=30000)
    try:
        for i in range(10):
            p.send(topic, value=f"old-{i}".encode()).get(timeout=60)
    finally:
        p.close(timeout=10)
    leader = cluster.partition_state(topic, 0).leader
    follower = 1 if leader == 2 else 2
    deadline = time.monotonic() + 60
    segments = []
    while time.monotonic() < deadline:
        segments = sorted((cluster.log_dir(follower) / f"{topic}-0").glob("*.log"))
        if segments and b"old-9" in b"".join(s.read_bytes() for s in segments):
            break
        time.sleep(0.5)
    data = b"".join(s.read_bytes() for s in segments)
    assert b"old-9" in data  # replicated
    assert data[16] == 2  # message format v2 on disk on the follower too
