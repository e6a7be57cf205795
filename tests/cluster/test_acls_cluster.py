"""ACLs in a ZooKeeper cluster: an ACL created through one broker is enforced by another without a restart,
lives in Kafka's znodes (/kafka-acl, /kafka-acl-extended, with acl_changes_ notifications) and survives a
broker restart.

Each broker has a PLAINTEXT listener for inter-broker traffic (User:ANONYMOUS, a super user, as a broker's own
principal would be in Kafka) and a SASL_PLAINTEXT listener where clients log in as admin or alice.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, ElectLeadersResponse
from kafka.protocol.admin import ElectLeadersRequest as ElectLeaders

from strom.protocol.inter_broker import (
    AlterPartitionRequest,
    ControlledShutdownRequest,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
    build,
)
from tests.integration.test_acl_users import sasl_call
from tests.integration.test_api_version_matrix import call
from tests.support.broker import free_port
from tests.support.cluster import ClusterProcess
from tests.support.security import ClientAuth

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper]

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
TOPIC = "payments"


def secured_cluster(cluster_factory) -> tuple[ClusterProcess, dict[int, str]]:  # noqa: ANN001 - the fixture
    cluster = cluster_factory(2, start=False, overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "inter.broker.listener.name": "PLAINTEXT",
    })
    sasl: dict[int, str] = {}
    for broker_id, broker in cluster.brokers.items():
        port = free_port()
        sasl[broker_id] = f"127.0.0.1:{port}"
        broker.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{port}"
    cluster.start()
    return cluster, sasl


def alice_produces(bootstrap: str) -> int:
    p = Producer(ClientAuth(bootstrap, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret").confluent(
        **{"message.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 500}))
    codes: list[int] = []
    p.produce(TOPIC, b"x", on_delivery=lambda err, _m: codes.append(err.code() if err else 0))
    p.flush(15)
    return codes[0] if codes else -1


def acl_request(cls, pattern_type: int, resource_type: int, name: str):  # noqa: ANN001, ANN201
    if cls is CreateAclsRequest:
        return build(cls, creations=[{"resource_type": resource_type, "resource_name": name,
                                      "resource_pattern_type": pattern_type, "principal": "User:alice", "host": "*",
                                      "operation": 4 if resource_type == 2 else 3, "permission_type": 3}])
    return build(cls, filters=[{"resource_type_filter": resource_type, "resource_name_filter": name,
                                "pattern_type_filter": pattern_type, "principal_filter": "User:alice",
                                "host_filter": None, "operation": 1, "permission_type": 1}])


def test_an_acl_made_through_one_broker_is_enforced_by_the_other(cluster_factory) -> None:  # noqa: ANN001
    cluster, sasl = secured_cluster(cluster_factory)
    admin = AdminClient(ClientAuth(sasl[1], "SASL_PLAINTEXT", "PLAIN", "admin", "admin-secret").confluent())
    # Broker 2 leads the partition, so alice's produce is decided there.
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=-1, replica_assignment=[[2, 1]])])[TOPIC].result(30)
    cluster.wait_leader(TOPIC, 0)
    assert alice_produces(sasl[2]) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # CreateAcls sent to broker 1 only (its inter-broker listener: ANONYMOUS is a super user there).
    created = call(cluster.broker(1), acl_request(CreateAclsRequest, 3, 2, TOPIC), 2)
    assert [r.error_code for r in created.results] == [0]
    created = call(cluster.broker(1), acl_request(CreateAclsRequest, 4, 3, "billing-"), 2)
    assert [r.error_code for r in created.results] == [0]

    zk = cluster.zk
    assert json.loads(zk.get(f"/kafka-acl/Topic/{TOPIC}")[0]) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]}
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Group/billing-")[0]) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    literal_changes = zk.get_children("/kafka-acl-changes")
    assert literal_changes and all(c.startswith("acl_changes_") for c in literal_changes)
    assert f"TOPIC:{TOPIC}".encode() in [zk.get(f"/kafka-acl-changes/{c}")[0] for c in literal_changes]
    extended = [json.loads(zk.get(f"/kafka-acl-extended-changes/{c}")[0])
                for c in zk.get_children("/kafka-acl-extended-changes")]
    assert {"version": 1, "resourceType": "GROUP", "name": "billing-", "patternType": "PREFIXED"} in extended

    cluster.wait_for(lambda: alice_produces(sasl[2]) == 0, 30, "broker 2 applying the new ACL")

    # Broker 2 restarted reads the ACLs back from ZooKeeper.
    cluster.stop(2)
    cluster.start_broker(2)
    cluster.wait_leader(TOPIC, 0)
    cluster.wait_for(lambda: alice_produces(sasl[2]) == 0, 30, "alice producing after broker 2's restart")

    # Removed through broker 1: broker 2 refuses again, and the znode is gone.
    deleted = call(cluster.broker(1), acl_request(DeleteAclsRequest, 3, 2, TOPIC), 2)
    assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
    assert zk.exists(f"/kafka-acl/Topic/{TOPIC}") is None
    cluster.wait_for(lambda: alice_produces(sasl[2]) == KafkaError.TOPIC_AUTHORIZATION_FAILED, 30,
                     "broker 2 applying the removal")


def test_inter_broker_and_election_apis_need_cluster_rights(cluster_factory) -> None:  # noqa: ANN001
    cluster, sasl = secured_cluster(cluster_factory)
    controller = cluster.wait_controller()
    requests = [
        (build(UpdateMetadataRequest, controller_id=controller, is_k_raft_controller=False, request_type=0,
               controller_epoch=99, broker_epoch=-1, ungrouped_partition_states=[], topic_states=[], live_brokers=[]),
         7),
        (build(LeaderAndIsrRequest, controller_id=controller, is_k_raft_controller=False, controller_epoch=99,
               broker_epoch=-1, request_type=0, ungrouped_partition_states=[], topic_states=[], live_leaders=[]), 6),
        (build(StopReplicaRequest, controller_id=controller, is_k_raft_controller=False, controller_epoch=99,
               broker_epoch=-1, ungrouped_partitions=[], topics=[], topic_states=[]), 3),
        (build(ControlledShutdownRequest, broker_id=1, broker_epoch=-1), 3),
        (build(AlterPartitionRequest, broker_id=1, broker_epoch=-1, topics=[]), 2),
        (build(ElectLeaders, election_type=0, topic_partitions=None, timeout_ms=1000), 2),
    ]
    for request, version in requests:
        got = sasl_call(sasl[controller], "alice", "alice-secret", request, version)
        assert got.error_code == 31, type(request).__name__  # CLUSTER_AUTHORIZATION_FAILED
    named = build(ElectLeaders, election_type=0, topic_partitions=[{"topic": TOPIC, "partitions": [0]}],
                  timeout_ms=1000)
    [part] = sasl_call(sasl[controller], "alice", "alice-secret", named, 2).replica_election_results[0].partition_result
    assert (part.error_code, part.error_message) == (31, "Not authorized to Alter Cluster kafka-cluster")
    # The admin (a super user) is let through to the API itself.
    got = sasl_call(sasl[controller], "admin", "admin-secret", requests[-1][0], 2)
    assert isinstance(got, ElectLeadersResponse) and got.error_code == 0
