"""Leader epochs end to end: OffsetForLeaderEpoch, current_leader_epoch fencing in Fetch and ListOffsets,
and the leader-epoch-checkpoint file across a restart and a kill -9."""

from __future__ import annotations

import os

import pytest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.producer import ProduceRequest

from strom.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from strom.protocol.record_batch import build_batch
from tests.integration.test_api_version_matrix import call
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_LEADER_EPOCH = 75
EPOCH_VERSIONS = list(range(SUPPORTED_VERSIONS[ApiKey.OFFSET_FOR_LEADER_EPOCH][0],
                            SUPPORTED_VERSIONS[ApiKey.OFFSET_FOR_LEADER_EPOCH][1] + 1))


def produce(broker: BrokerProcess, topic: str, n: int) -> int:
    """Append one batch of n records to partition 0; returns the LEO after it."""
    batch = build_batch([(None, b"r%d" % i, [], 1_700_000_000_000 + i) for i in range(n)])
    resp = call(broker, ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), 7)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0
    return part.base_offset + n


def epoch_end(broker: BrokerProcess, topic: str, leader_epoch: int, version: int = 4,
              current_leader_epoch: int = -1, replica_id: int = -1):  # noqa: ANN201
    R = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    req = OffsetForLeaderEpochRequest(replica_id=replica_id, topics=[R(topic=topic, partitions=[
        R.OffsetForLeaderPartition(partition=0, current_leader_epoch=current_leader_epoch,
                                   leader_epoch=leader_epoch)])])
    return call(broker, req, version).topics[0].partitions[0]


def checkpoint_path(broker: BrokerProcess, topic: str) -> str:
    return os.path.join(broker.data_dir, f"{topic}-0", "leader-epoch-checkpoint")


@pytest.fixture(scope="module")
def topic_and_leo(broker: BrokerProcess) -> tuple[str, int]:
    topic = new_topic(broker)
    produce(broker, topic, 3)
    return topic, produce(broker, topic, 4)


@pytest.mark.parametrize("version", EPOCH_VERSIONS)
def test_end_offset_of_epoch_zero_is_the_leo(broker: BrokerProcess, topic_and_leo: tuple[str, int],
                                             version: int) -> None:
    topic, leo = topic_and_leo
    p = epoch_end(broker, topic, 0, version, current_leader_epoch=0)
    assert (p.error_code, p.end_offset) == (0, leo)
    if version >= 1:
        assert p.leader_epoch == 0
    if version >= 3:  # Kafka's debug replica id may ask any replica: same answer on the leader
        p = epoch_end(broker, topic, 0, version, replica_id=-2)
        assert (p.error_code, p.end_offset) == (0, leo)


def test_unknown_epochs_and_partitions(broker: BrokerProcess, topic_and_leo: tuple[str, int]) -> None:
    topic, _ = topic_and_leo
    p = epoch_end(broker, topic, 1)  # newer than any epoch of the log
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, -1, -1)
    p = epoch_end(broker, topic, -1)
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, -1, -1)
    assert epoch_end(broker, "no-such-topic", 0).error_code == UNKNOWN_TOPIC_OR_PARTITION
    empty = new_topic(broker)
    p = epoch_end(broker, empty, 0)  # the leader's epoch 0 starts at its LEO 0 when it becomes leader, as in Kafka
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 0)
    p = epoch_end(broker, empty, 1)
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, -1, -1)


@pytest.mark.parametrize("version", [v for v in EPOCH_VERSIONS if v >= 2])
def test_offset_for_leader_epoch_fences_a_newer_current_epoch(broker: BrokerProcess,
                                                              topic_and_leo: tuple[str, int], version: int) -> None:
    topic, _ = topic_and_leo
    p = epoch_end(broker, topic, 0, version, current_leader_epoch=1)
    assert (p.error_code, p.end_offset) == (UNKNOWN_LEADER_EPOCH, -1)


def _fetch(broker: BrokerProcess, topic: str, version: int, current_leader_epoch: int):  # noqa: ANN202
    from kafka.protocol.metadata import MetadataRequest

    meta = call(broker, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                        allow_auto_topic_creation=False), 12)
    fp = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=current_leader_epoch,
                                                fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)
    ft = FetchRequest.FetchTopic(topic=topic, topic_id=meta.topics[0].topic_id, partitions=[fp])
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[ft], forgotten_topics_data=[], rack_id="")
    return call(broker, req, version).responses[0].partitions[0]


@pytest.mark.parametrize("version", [8, 9, 12, 16])
def test_fetch_checks_current_leader_epoch_from_v9(broker: BrokerProcess, topic_and_leo: tuple[str, int],
                                                   version: int) -> None:
    topic, leo = topic_and_leo
    assert _fetch(broker, topic, version, 0).high_watermark == leo
    assert _fetch(broker, topic, version, -1).error_code == 0
    expected = UNKNOWN_LEADER_EPOCH if version >= 9 else 0  # before v9 the field is not sent
    assert _fetch(broker, topic, version, 1).error_code == expected


@pytest.mark.parametrize("version", [3, 4, 7, 11])
def test_list_offsets_checks_current_leader_epoch_from_v4(broker: BrokerProcess,
                                                          topic_and_leo: tuple[str, int], version: int) -> None:
    topic, leo = topic_and_leo

    def latest(current_leader_epoch: int):  # noqa: ANN202
        parts = [ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=current_leader_epoch, timestamp=-1)]
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=5000,
                                 topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=parts)])
        return call(broker, req, version).topics[0].partitions[0]

    assert (latest(0).error_code, latest(0).offset) == (0, leo)
    assert latest(-1).error_code == 0
    assert latest(1).error_code == (UNKNOWN_LEADER_EPOCH if version >= 4 else 0)


@pytest.mark.slow
def test_checkpoint_survives_restart_and_kill9(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b)
    leo = produce(b, topic, 5)
    with open(checkpoint_path(b, topic)) as f:
        assert f.read() == "0\n1\n0 0\n"
    b.restart()
    assert epoch_end(b, topic, 0).end_offset == leo
    leo = produce(b, topic, 2)
    b.kill9()
    b.start()
    with open(checkpoint_path(b, topic)) as f:
        assert f.read() == "0\n1\n0 0\n"
    p = epoch_end(b, topic, 0)
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, leo)
    # A lost checkpoint is rebuilt from the batch headers at the next start.
    b.kill9()
    os.unlink(checkpoint_path(b, topic))
    b.start()
    assert epoch_end(b, topic, 0).end_offset == leo
    assert os.path.exists(checkpoint_path(b, topic))
