"""AlterPartitionReassignments / ListPartitionReassignments on a single node, as raw requests and through
kafka-python's admin client: a one-broker cluster has nothing to move, so a target equal to the current
replicas is done at once and any other broker is INVALID_REPLICA_ASSIGNMENT."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import NewTopic
from kafka.protocol.admin import AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest
from kafka.protocol.metadata import ApiVersionsRequest

from strom.protocol import codec
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient

Topic = AlterPartitionReassignmentsRequest.ReassignableTopic
Partition = Topic.ReassignablePartition


def call(broker: BrokerProcess, request, version: int = 0):  # noqa: ANN001, ANN201
    client = RawClient(broker)
    try:
        frame = client.request(request, version)
    finally:
        client.close()
    return codec.response_class(request.API_KEY).decode(frame[5:], version=version)  # flexible: header v1


def alter(broker: BrokerProcess, partitions: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[Partition]] = {}
    for (t, p), replicas in partitions.items():
        by_topic.setdefault(t, []).append(Partition(partition_index=p, replicas=replicas))
    response = call(broker, AlterPartitionReassignmentsRequest(timeout_ms=30_000, topics=[
        Topic(name=t, partitions=ps) for t, ps in by_topic.items()]))
    assert response.error_code == 0, response
    return {(t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}


def test_a_single_node_answers_both_apis(broker: BrokerProcess) -> None:
    topic = f"r-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
        [me] = list(AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0}).list_topics(
            timeout=30).brokers)  # the node's broker id
        assert admin.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [me]}) == {
            KafkaTopicPartition(topic, 0): None}
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()
    assert alter(broker, {(topic, 1): [me], (topic, 0): [me + 1], (topic, 7): [me], ("nope", 0): [me]}) == {
        (topic, 1): 0, (topic, 0): 39, (topic, 7): 3, ("nope", 0): 3}
    assert alter(broker, {(topic, 0): []}) == {(topic, 0): 39}
    assert alter(broker, {(topic, 0): [1, 1]}) == {(topic, 0): 39}
    assert alter(broker, {(topic, 0): None}) == {(topic, 0): 85}  # NO_REASSIGNMENT_IN_PROGRESS
    listed = call(broker, ListPartitionReassignmentsRequest(timeout_ms=30_000, topics=[
        ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(name=topic, partition_indexes=[0, 1])]))
    assert (listed.error_code, listed.topics) == (0, [])


def test_both_apis_are_advertised(broker: BrokerProcess) -> None:
    client = RawClient(broker)
    try:
        frame = client.request(ApiVersionsRequest(), 0)
    finally:
        client.close()
    versions = {k.api_key: (k.min_version, k.max_version)
                for k in codec.response_class(18).decode(frame[4:], version=0).api_keys}
    assert versions[45] == (0, 0) and versions[46] == (0, 0)
