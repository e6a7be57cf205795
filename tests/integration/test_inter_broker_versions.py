"""Every Kafka 3.9 version of the ZooKeeper-mode inter-broker APIs is parsed and answered by a cluster broker.

Strom's own controller and brokers send one version each; a request in any other version of Kafka 3.9's
range must get the Kafka answer in that version (here: the stale controller epoch, the broker that is not
the controller, the unknown broker, the unchanged ISR), never a closed connection. Sent as raw requests.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import MetadataRequest

from strom.protocol import codec
from strom.protocol.inter_broker import (
    AlterPartitionRequest,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
    build,
)
from tests.support.cluster import ClusterProcess
from tests.support.raw_client import RawClient

TOPIC = "inter-broker-versions"
STALE_CONTROLLER_EPOCH = 11


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    c = ClusterProcess(tmp_path_factory.mktemp("ib-versions"), 2, offsets_replication_factor=1)
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(60)
        c.wait_isr(TOPIC, 0, c.broker_ids)  # both brokers got a LeaderAndIsr: they know the controller epoch
        yield c
    finally:
        c.close()


def call(cluster: ClusterProcess, broker_id: int, request: Any, version: int) -> Any:
    client = RawClient(cluster.broker(broker_id))
    try:
        frame = client.request(request, version)
    finally:
        client.close()
    flexible = codec.is_flexible(request.API_KEY, version)
    return codec.response_class(request.API_KEY).decode(frame[5:] if flexible else frame[4:], version=version)


def stale_epoch(cluster: ClusterProcess) -> int:
    epoch = cluster.controller_epoch()
    assert epoch is not None and epoch >= 1
    return epoch - 1


def other_than_controller(cluster: ClusterProcess) -> int:
    controller = cluster.wait_controller()
    return next(b for b in cluster.broker_ids if b != controller)


@pytest.mark.parametrize("version", range(8))
def test_leader_and_isr_every_version(cluster: ClusterProcess, version: int) -> None:
    state = {"partition_index": 0, "controller_epoch": 0, "leader": 1, "leader_epoch": 0, "isr": [1, 2],
             "partition_epoch": 0, "replicas": [1, 2], "adding_replicas": [], "removing_replicas": [],
             "is_new": False, "leader_recovery_state": 0}
    req = build(LeaderAndIsrRequest, controller_id=1, is_k_raft_controller=False,
                controller_epoch=stale_epoch(cluster), broker_epoch=-1, request_type=0,
                ungrouped_partition_states=[{**state, "topic_name": TOPIC}],
                topic_states=[{"topic_name": TOPIC, "topic_id": uuid.uuid4(), "partition_states": [state]}],
                live_leaders=[])
    resp = call(cluster, other_than_controller(cluster), req, version)
    assert resp.error_code == STALE_CONTROLLER_EPOCH


@pytest.mark.parametrize("version", range(9))
def test_update_metadata_every_version(cluster: ClusterProcess, version: int) -> None:
    state = {"partition_index": 0, "controller_epoch": 0, "leader": 1, "leader_epoch": 0, "isr": [1],
             "zk_version": 0, "replicas": [1], "offline_replicas": []}
    req = build(UpdateMetadataRequest, controller_id=1, is_k_raft_controller=False,
                controller_epoch=stale_epoch(cluster), broker_epoch=-1,
                ungrouped_partition_states=[{**state, "topic_name": TOPIC}],
                topic_states=[{"topic_name": TOPIC, "topic_id": uuid.uuid4(), "partition_states": [state]}],
                live_brokers=[{"id": 1, "v0_host": "127.0.0.1", "v0_port": 1, "rack": None, "endpoints": [
                    {"port": 1, "host": "127.0.0.1", "listener": "PLAINTEXT", "security_protocol": 0}]}])
    resp = call(cluster, other_than_controller(cluster), req, version)
    assert resp.error_code == STALE_CONTROLLER_EPOCH


@pytest.mark.parametrize("version", range(5))
def test_stop_replica_every_version(cluster: ClusterProcess, version: int) -> None:
    req = build(StopReplicaRequest, controller_id=1, is_k_raft_controller=False,
                controller_epoch=stale_epoch(cluster), broker_epoch=-1, delete_partitions=True,
                ungrouped_partitions=[{"topic_name": TOPIC, "partition_index": 0}],
                topics=[{"name": TOPIC, "partition_indexes": [0]}],
                topic_states=[{"topic_name": TOPIC, "partition_states": [
                    {"partition_index": 0, "leader_epoch": -1, "delete_partition": True}]}])
    resp = call(cluster, other_than_controller(cluster), req, version)
    assert resp.error_code == STALE_CONTROLLER_EPOCH
    # Nothing was stopped or deleted: the replica is still in sync.
    cluster.wait_isr(TOPIC, 0, cluster.broker_ids)


def controlled_shutdown(cluster: ClusterProcess, to: int, broker_id: int, version: int) -> Any:
    """v0 has Kafka's one request header without a client id, framed by hand; the others as any request."""
    if version > 0:
        return call(cluster, to, build(ControlledShutdownRequest, broker_id=broker_id, broker_epoch=-1), version)
    client = RawClient(cluster.broker(to))
    try:
        body = struct.pack(">hhii", 7, 0, 42, broker_id)
        client.send_raw(struct.pack(">i", len(body)) + body)
        frame = client.read_frame()
    finally:
        client.close()
    assert struct.unpack_from(">i", frame)[0] == 42
    return ControlledShutdownResponse.decode(frame[4:], version=0)


@pytest.mark.parametrize("version", range(4))
def test_controlled_shutdown_every_version(cluster: ClusterProcess, version: int) -> None:
    controller = cluster.wait_controller()
    other = other_than_controller(cluster)
    assert controlled_shutdown(cluster, other, other, version).error_code == KafkaError.NOT_CONTROLLER
    assert controlled_shutdown(cluster, controller, 999, version).error_code == KafkaError.BROKER_NOT_AVAILABLE


def topic_id(cluster: ClusterProcess) -> uuid.UUID:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False)
    client = RawClient(cluster.broker(cluster.broker_ids[0]))
    try:
        frame = client.request(req, 12)
    finally:
        client.close()
    return codec.response_class(3).decode(frame[5:], version=12).topics[0].topic_id


@pytest.mark.parametrize("version", range(4))
def test_alter_partition_every_version(cluster: ClusterProcess, version: int) -> None:
    """The partition's leader proposes the ISR it already has: the controller answers the current state."""
    state = cluster.wait_isr(TOPIC, 0, cluster.broker_ids)
    controller = cluster.wait_controller()
    partition = {"partition_index": 0, "leader_epoch": state.leader_epoch, "new_isr": list(state.isr),
                 "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in state.isr],
                 "leader_recovery_state": 0, "partition_epoch": state.zk_version}
    req = build(AlterPartitionRequest, broker_id=state.leader, broker_epoch=-1, topics=[
        {"topic_name": TOPIC, "topic_id": topic_id(cluster), "partitions": [partition]}])
    resp = call(cluster, controller, req, version)
    assert resp.error_code == 0
    (p,) = resp.topics[0].partitions
    assert (p.error_code, p.leader_id, p.leader_epoch, sorted(p.isr)) == \
        (0, state.leader, state.leader_epoch, sorted(state.isr))
    if version < 2:
        assert resp.topics[0].topic_name == TOPIC
    not_controller = next(b for b in cluster.broker_ids if b != controller)
    assert call(cluster, not_controller, req, version).error_code == KafkaError.NOT_CONTROLLER


@pytest.mark.parametrize("version", range(8))
def test_leader_and_isr_every_version_answers_per_partition(cluster: ClusterProcess, version: int) -> None:
    """From the current controller epoch, a partition state older than the broker's is refused for that
    partition alone, answered in the version's layout: by topic name up to v4, by topic id from v5."""
    current = cluster.wait_isr(TOPIC, 0, cluster.broker_ids)
    epoch = cluster.controller_epoch()
    state = {"partition_index": 0, "controller_epoch": epoch, "leader": current.leader,
             "leader_epoch": current.leader_epoch - 1, "isr": list(current.isr), "partition_epoch": 0,
             "replicas": list(cluster.broker_ids), "adding_replicas": [], "removing_replicas": [],
             "is_new": False, "leader_recovery_state": 0}
    tid = topic_id(cluster)
    req = build(LeaderAndIsrRequest, controller_id=cluster.wait_controller(), is_k_raft_controller=False,
                controller_epoch=epoch, broker_epoch=-1, request_type=0,
                ungrouped_partition_states=[{**state, "topic_name": TOPIC}],
                topic_states=[{"topic_name": TOPIC, "topic_id": tid, "partition_states": [state]}],
                live_leaders=[])
    resp = call(cluster, other_than_controller(cluster), req, version)
    assert resp.error_code == 0
    if version < 5:
        assert [(p.topic_name, p.partition_index, p.error_code) for p in resp.partition_errors] == \
            [(TOPIC, 0, STALE_CONTROLLER_EPOCH)]
    else:
        assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partition_errors])
                for t in resp.topics] == [(tid, [(0, STALE_CONTROLLER_EPOCH)])]
    assert cluster.wait_isr(TOPIC, 0, cluster.broker_ids).leader_epoch == current.leader_epoch
