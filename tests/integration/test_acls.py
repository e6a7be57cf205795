"""ACL matrix on a real broker: for each API, a request without the ACL Kafka asks for is refused with Kafka's
error and changes nothing; once an AdminClient adds the ACL (no restart), the same request works.

Every client here is User:ANONYMOUS (PLAINTEXT). The broker is first started with ANONYMOUS as a super user to
create the data and one ACL (Alter on the cluster, so ANONYMOUS may manage ACLs), then restarted without super
users: from then on ANONYMOUS may do exactly what the ACLs a test adds allow.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol.admin import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

from strom.protocol.inter_broker import build
from strom.protocol.record_batch import build_batch
from tests.integration.test_api_version_matrix import call
from tests.support.broker import BrokerProcess

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ANON = "User:ANONYMOUS"
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
DATA = "data"  # one partition, RECORDS records, created while ANONYMOUS was a super user
RECORDS = 5

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
Op = AclOperation


def allow(rtype: ResourceType, name: str, op: AclOperation, pattern: ResourcePatternType = LIT,
          principal: str = ANON, permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def deny(rtype: ResourceType, name: str, op: AclOperation, pattern: ResourcePatternType = LIT) -> AclBinding:
    return allow(rtype, name, op, pattern, permission=AclPermissionType.DENY)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acl"), {"authorizer.class.name": AUTHORIZER, "super.users": ANON})
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(DATA, 1, 1)])[DATA].result(15)
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(RECORDS):
            p.produce(DATA, f"v{i}".encode())
        assert p.flush(15) == 0
        for f in admin.create_acls([allow(ResourceType.BROKER, "kafka-cluster", Op.ALTER)]).values():
            f.result(15)
        b.stop()
        b.overrides["super.users"] = ""
        b.start()
        yield b
    finally:
        b.close()


@pytest.fixture
def broker(secured: BrokerProcess) -> BrokerProcess:
    """The secured broker with only the baseline ACL (ANONYMOUS may Alter the cluster, i.e. manage ACLs)."""
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    filters = [AclBindingFilter(rt, None, ResourcePatternType.ANY, None, None, Op.ANY, AclPermissionType.ANY)
               for rt in (T, G, X)]
    filters += [AclBindingFilter(C, None, ResourcePatternType.ANY, None, None, op, AclPermissionType.ANY)
                for op in (Op.ALL, Op.CREATE, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE,
                           Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)]
    for f in admin.delete_acls(filters).values():
        f.result(15)
    return secured


def grant(broker: BrokerProcess, *bindings: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_acls(list(bindings)).values():
        f.result(15)


def revoke(broker: BrokerProcess, flt: AclBindingFilter) -> list[AclBinding]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return admin.delete_acls([flt])[flt].result(15)


def error_code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].code()


def end_offset(broker: BrokerProcess, topic: str = DATA) -> int:
    """The partition's high watermark (the test's principal gets Describe on the topic to read it)."""
    grant(broker, allow(T, topic, Op.DESCRIBE))
    req = build(ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=[
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}])
    part = call(broker, req, 5).topics[0].partitions[0]
    assert part.error_code == 0
    return part.offset


# -- ACL APIs ----------------------------------------------------------------------------------------------
def test_acl_apis_need_describe_and_alter_on_the_cluster(broker: BrokerProcess) -> None:
    describe = build(DescribeAclsRequest, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                     principal_filter=None, host_filter=None, operation=1, permission_type=1)
    assert call(broker, describe, 1).error_code == 0  # Alter on the cluster implies Describe
    grant(broker, deny(C, "kafka-cluster", Op.DESCRIBE))
    assert call(broker, describe, 1).error_code == CLUSTER_DENIED
    grant(broker, deny(C, "kafka-cluster", Op.ALL))
    create = build(CreateAclsRequest, creations=[{
        "resource_type": 2, "resource_name": "x", "resource_pattern_type": 3, "principal": "User:eve",
        "host": "*", "operation": 2, "permission_type": 3}])
    assert [r.error_code for r in call(broker, create, 2).results] == [CLUSTER_DENIED]
    delete = build(DeleteAclsRequest, filters=[{
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1}])
    assert [r.error_code for r in call(broker, delete, 2).filter_results] == [CLUSTER_DENIED]
    # nothing was removed: both DENY entries are still there, and survive a restart
    removed = remove_cluster_denies(broker)
    assert {(b.operation, b.permission_type) for b in removed} == {(Op.DESCRIBE, AclPermissionType.DENY),
                                                                   (Op.ALL, AclPermissionType.DENY)}


def remove_cluster_denies(broker: BrokerProcess) -> list[AclBinding]:
    """Lift DENYs on the cluster: restart with ANONYMOUS a super user for one call (the ACLs live in the store)."""
    broker.stop()
    broker.overrides["super.users"] = ANON
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    flt = AclBindingFilter(C, None, ResourcePatternType.ANY, None, None, Op.ANY, AclPermissionType.DENY)
    removed = admin.delete_acls([flt])[flt].result(15)
    broker.stop()
    broker.overrides["super.users"] = ""
    broker.start()
    return removed


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_acl_apis_every_version(broker: BrokerProcess, version: int) -> None:
    name = f"v{version}-{uuid.uuid4().hex[:6]}"
    pattern = 3 if version == 0 else 4  # v0 knows LITERAL only
    create = build(CreateAclsRequest, creations=[{
        "resource_type": 2, "resource_name": name, "resource_pattern_type": pattern, "principal": "User:eve",
        "host": "10.1.2.3", "operation": 3, "permission_type": 3}, {
        "resource_type": 4, "resource_name": "not-the-cluster", "resource_pattern_type": 3, "principal": "User:eve",
        "host": "*", "operation": 3, "permission_type": 3}])
    assert [r.error_code for r in call(broker, create, version).results] == [0, 42]  # INVALID_REQUEST
    describe = build(DescribeAclsRequest, resource_type_filter=2, resource_name_filter=name,
                     pattern_type_filter=1 if version else 3, principal_filter="User:eve", host_filter=None,
                     operation=1, permission_type=1)
    got = call(broker, describe, version)
    assert got.error_code == 0
    assert [(r.resource_name, [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls])
            for r in got.resources] == [(name, [("User:eve", "10.1.2.3", 3, 3)])]
    if version:
        assert got.resources[0].pattern_type == pattern
    delete = build(DeleteAclsRequest, filters=[{
        "resource_type_filter": 2, "resource_name_filter": name, "pattern_type_filter": 1 if version else 3,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}])
    [result] = call(broker, delete, version).filter_results
    assert result.error_code == 0 and [m.resource_name for m in result.matching_acls] == [name]
    assert call(broker, describe, version).resources == []


# -- produce, fetch and the metadata they need ------------------------------------------------------------
def test_produce_needs_write(broker: BrokerProcess) -> None:
    before = end_offset(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    errors: list[int] = []
    p.produce(DATA, b"refused", on_delivery=lambda err, _msg: errors.append(err.code() if err else 0))
    p.flush(10)
    assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert end_offset(broker) == before  # nothing appended
    grant(broker, allow(T, DATA, Op.WRITE))
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    p.produce(DATA, b"allowed", on_delivery=lambda err, _msg: errors.append(err.code() if err else 0))
    p.flush(10)
    assert errors[-1] == 0 and end_offset(broker) == before + 1


def test_produce_raw_partial_refusal(broker: BrokerProcess) -> None:
    """One request, two topics: the allowed one is appended, the other answered TOPIC_AUTHORIZATION_FAILED."""
    grant(broker, allow(T, DATA, Op.WRITE))
    batch = build_batch([(None, b"x", [], 1_700_000_000_000)])
    req = build(ProduceRequest, transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        {"name": DATA, "partition_data": [{"index": 0, "records": batch}]},
        {"name": "secret", "partition_data": [{"index": 0, "records": batch}]}])
    got = {t.name: t.partition_responses[0].error_code for t in call(broker, req, 9).responses}
    assert got == {DATA: 0, "secret": TOPIC_DENIED}
    req.transactional_id = "tx-1"  # a transactional id needs Write on it: the whole request is refused
    before = end_offset(broker)
    got = {t.name: t.partition_responses[0].error_code for t in call(broker, req, 9).responses}
    assert got == {DATA: TXN_DENIED, "secret": TXN_DENIED} and end_offset(broker) == before


def test_consume_needs_read_on_topic_and_group(broker: BrokerProcess) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    c.subscribe([DATA])
    msg = c.poll(5)
    assert msg is not None and msg.error() is not None
    assert msg.error().code() in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    c.close()
    grant(broker, allow(T, DATA, Op.READ), allow(G, "g-", Op.READ, PRE))
    c = Consumer(conf)
    c.subscribe([DATA])
    values = []
    for _ in range(40):
        m = c.poll(1)
        if m is not None and m.error() is None:
            values.append(m.value())
        if len(values) >= RECORDS:
            break
    assert values[:RECORDS] == [f"v{i}".encode() for i in range(RECORDS)]
    c.commit(asynchronous=False)
    c.close()


def test_fetch_raw(broker: BrokerProcess) -> None:
    req = build(FetchRequest, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=[{"topic": DATA, "partitions": [{
                    "partition": 0, "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20,
                    "current_leader_epoch": -1}]}], forgotten_topics_data=[], rack_id="")
    assert call(broker, req, 11).responses[0].partitions[0].error_code == TOPIC_DENIED
    req.replica_id = 7  # a follower needs ClusterAction, Read on the topic is not enough
    grant(broker, allow(T, DATA, Op.READ))
    assert call(broker, req, 11).responses[0].partitions[0].error_code == TOPIC_DENIED
    req.replica_id = -1
    part = call(broker, req, 11).responses[0].partitions[0]
    assert part.error_code == 0 and part.records


def test_metadata_hides_topics_and_fills_authorized_operations(broker: BrokerProcess) -> None:
    everything = build(MetadataRequest, topics=None, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=True)
    assert [t.name for t in call(broker, everything, 12).topics] == []
    named = build(MetadataRequest, topics=[{"name": DATA}], allow_auto_topic_creation=False,
                  include_topic_authorized_operations=True)
    assert call(broker, named, 12).topics[0].error_code == TOPIC_DENIED
    grant(broker, allow(T, DATA, Op.WRITE))
    topics = call(broker, everything, 12).topics
    assert [t.name for t in topics] == [DATA]
    assert topics[0].authorized_operations == {4, 8}  # WRITE, and DESCRIBE which it implies
    v10 = build(MetadataRequest, topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                include_cluster_authorized_operations=True)
    assert call(broker, v10, 10).authorized_operations == {7, 8}  # ALTER (the baseline ACL), DESCRIBE


def test_metadata_auto_create_needs_create(broker: BrokerProcess) -> None:
    name = f"auto-{uuid.uuid4().hex[:6]}"
    req = build(MetadataRequest, topics=[{"name": name}], allow_auto_topic_creation=True)
    grant(broker, allow(T, name, Op.DESCRIBE))
    assert call(broker, req, 9).topics[0].error_code == TOPIC_DENIED
    grant(broker, allow(T, "auto-", Op.CREATE, PRE))
    t = call(broker, req, 9).topics[0]
    assert t.error_code == 0 and len(t.partitions) == 1


def test_list_offsets_and_offset_for_leader_epoch_need_describe(broker: BrokerProcess) -> None:
    lo = build(ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=[
        {"name": DATA, "partitions": [{"partition_index": 0, "timestamp": -2, "current_leader_epoch": -1}]}])
    assert call(broker, lo, 5).topics[0].partitions[0].error_code == TOPIC_DENIED
    ep = build(OffsetForLeaderEpochRequest, replica_id=-1, topics=[
        {"topic": DATA, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}])
    assert call(broker, ep, 3).topics[0].partitions[0].error_code == TOPIC_DENIED
    grant(broker, allow(T, DATA, Op.READ))  # Read implies Describe
    assert call(broker, lo, 5).topics[0].partitions[0].error_code == 0
    assert call(broker, ep, 3).topics[0].partitions[0].error_code == 0


# -- topic administration ----------------------------------------------------------------------------------
def test_topic_admin_needs_create_alter_delete_and_configs(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"adm-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    assert error_code(exc.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(broker, allow(T, name, Op.CREATE), allow(T, name, Op.DESCRIBE))
    assert call(broker, build(MetadataRequest, topics=[{"name": name}], allow_auto_topic_creation=False),
                9).topics[0].error_code == 3  # still not created: UNKNOWN_TOPIC_OR_PARTITION
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)

    with pytest.raises(KafkaException) as exc:
        admin.create_partitions([NewPartitions(name, 2)])[name].result(15)
    assert error_code(exc.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(broker, allow(T, name, Op.ALTER))
    admin.create_partitions([NewPartitions(name, 2)])[name].result(15)

    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    with pytest.raises(KafkaException) as exc:
        admin.describe_configs([res])[res].result(15)
    assert error_code(exc.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    res.set_config("retention.ms", "12345")
    with pytest.raises(KafkaException) as exc:
        admin.alter_configs([res])[res].result(15)
    assert error_code(exc.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(broker, allow(T, name, Op.ALTER_CONFIGS))  # implies DescribeConfigs
    admin.alter_configs([res])[res].result(15)
    assert admin.describe_configs([res])[res].result(15)["retention.ms"].value == "12345"

    broker_res = ConfigResource(ConfigResource.Type.BROKER, "0")
    with pytest.raises(KafkaException) as exc:
        admin.describe_configs([broker_res])[broker_res].result(15)
    assert error_code(exc.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    grant(broker, allow(C, "kafka-cluster", Op.DESCRIBE_CONFIGS))
    assert admin.describe_configs([broker_res])[broker_res].result(15)

    dr = build(DeleteRecordsRequest, topics=[{"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}],
               timeout_ms=5000)
    assert call(broker, dr, 2).topics[0].partitions[0].error_code == TOPIC_DENIED
    with pytest.raises(KafkaException) as exc:
        admin.delete_topics([name])[name].result(15)
    assert error_code(exc.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(broker, allow(T, name, Op.DELETE))
    assert call(broker, dr, 2).topics[0].partitions[0].error_code == 0
    admin.delete_topics([name])[name].result(15)


def test_create_topics_with_cluster_create(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"cc-{uuid.uuid4().hex[:6]}"
    grant(broker, allow(C, "kafka-cluster", Op.CREATE))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)


def test_cluster_level_apis(broker: BrokerProcess) -> None:
    dc = build(DescribeClusterRequest, include_cluster_authorized_operations=True)
    assert call(broker, dc, 0).error_code == 0  # Alter implies Describe
    assert call(broker, dc, 0).authorized_operations == {7, 8}
    dl = build(DescribeLogDirsRequest, topics=None)
    grant(broker, deny(C, "kafka-cluster", Op.DESCRIBE))
    described = call(broker, dc, 0)  # as Kafka: answered to anyone, the operations only with Describe
    assert (described.error_code, described.authorized_operations) == (0, set())
    assert call(broker, dl, 3).error_code == CLUSTER_DENIED
    wm = build(WriteTxnMarkersRequest, markers=[{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                                                 "topics": [{"name": DATA, "partition_indexes": [0]}],
                                                 "coordinator_epoch": 0}])
    before = end_offset(broker)
    assert call(broker, wm, 1).markers[0].topics[0].partitions[0].error_code == CLUSTER_DENIED
    assert end_offset(broker) == before
    remove_cluster_denies(broker)


def until_coordinator_ready(send):  # noqa: ANN001, ANN201 - a request sender; its response
    """Resend while the coordinator is still loading its partition (a fresh internal topic)."""
    for _ in range(100):
        response = send()
        if response.error_code not in (14, 15, 16):
            return response
        time.sleep(0.1)
    return response


def commit_offset(broker: BrokerProcess, group: str, offset: int) -> int:
    """Commit as a simple consumer once the group's coordinator is ready; the partition's error code."""
    commit = build(OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                   group_instance_id=None, topics=[{"name": DATA, "partitions": [
                       {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                        "committed_metadata": ""}]}])
    call(broker, build(FindCoordinatorRequest, key=group, key_type=0), 3)  # creates __consumer_offsets
    for _ in range(100):
        code = call(broker, commit, 8).topics[0].partitions[0].error_code
        if code not in (14, 15, 16):  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
            return code
        time.sleep(0.1)
    return code


# -- groups ------------------------------------------------------------------------------------------------
def test_group_apis(broker: BrokerProcess) -> None:
    group = f"grp-{uuid.uuid4().hex[:6]}"
    fc = build(FindCoordinatorRequest, key=group, key_type=0)
    assert call(broker, fc, 3).error_code == GROUP_DENIED
    join = build(JoinGroupRequest, group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                 member_id="", group_instance_id=None, protocol_type="consumer",
                 protocols=[{"name": "range", "metadata": b""}])
    assert call(broker, join, 5).error_code == GROUP_DENIED
    hb = build(HeartbeatRequest, group_id=group, generation_id=1, member_id="m", group_instance_id=None)
    assert call(broker, hb, 3).error_code == GROUP_DENIED
    commit = build(OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                   group_instance_id=None, topics=[{"name": DATA, "partitions": [
                       {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                        "committed_metadata": ""}]}])
    assert call(broker, commit, 8).topics[0].partitions[0].error_code == GROUP_DENIED
    fetch = build(OffsetFetchRequest, group_id=group, topics=None, require_stable=False)
    assert call(broker, fetch, 7).error_code == GROUP_DENIED
    dg = build(DescribeGroupsRequest, groups=[group], include_authorized_operations=True)
    assert call(broker, dg, 5).groups[0].error_code == GROUP_DENIED

    grant(broker, allow(G, group, Op.READ))  # Read on the group, not yet on the topic
    assert call(broker, fc, 3).error_code == 0
    assert call(broker, commit, 8).topics[0].partitions[0].error_code == TOPIC_DENIED
    grant(broker, allow(T, DATA, Op.READ))
    assert call(broker, commit, 8).topics[0].partitions[0].error_code == 0
    got = call(broker, fetch, 7)
    assert got.error_code == 0 and got.topics[0].partitions[0].committed_offset == 3
    described = call(broker, dg, 5).groups[0]
    assert described.error_code == 0 and described.authorized_operations == {3, 8}  # READ, DESCRIBE

    lg = build(ListGroupsRequest, states_filter=[])
    assert group in [g.group_id for g in call(broker, lg, 4).groups]  # Describe on the group (implied by Read)

    od = build(OffsetDeleteRequest, group_id=group, topics=[{"name": DATA, "partitions": [{"partition_index": 0}]}])
    assert call(broker, od, 0).error_code == GROUP_DENIED
    delete = build(DeleteGroupsRequest, groups_names=[group])
    assert call(broker, delete, 2).results[0].error_code == GROUP_DENIED
    assert call(broker, fetch, 7).topics[0].partitions[0].committed_offset == 3  # nothing changed
    grant(broker, allow(G, group, Op.DELETE))
    assert call(broker, od, 0).error_code == 0
    assert call(broker, delete, 2).results[0].error_code == 0


def test_list_groups_is_filtered(broker: BrokerProcess) -> None:
    group = f"lst-{uuid.uuid4().hex[:6]}"
    grant(broker, allow(G, group, Op.READ), allow(T, DATA, Op.READ))
    assert commit_offset(broker, group, 1) == 0
    lg = build(ListGroupsRequest, states_filter=[])
    grant(broker, deny(C, "kafka-cluster", Op.DESCRIBE))  # else Describe on the cluster lists every group
    assert group in [g.group_id for g in call(broker, lg, 4).groups]  # Read on the group implies Describe
    flt = AclBindingFilter(G, group, ResourcePatternType.ANY, None, None, Op.ANY, AclPermissionType.ANY)
    revoke(broker, flt)
    assert group not in [g.group_id for g in call(broker, lg, 4).groups]
    remove_cluster_denies(broker)
    assert group in [g.group_id for g in call(broker, lg, 4).groups]  # Alter on the cluster implies Describe


# -- transactions and idempotence ---------------------------------------------------------------------------
def test_idempotent_producer_needs_idempotent_write_or_write_on_a_topic(broker: BrokerProcess) -> None:
    ip = build(InitProducerIdRequest, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
               producer_epoch=-1)
    assert call(broker, ip, 4).error_code == CLUSTER_DENIED
    grant(broker, allow(T, "some-", Op.WRITE, PRE))  # KIP-679: Write on any topic is enough
    assert call(broker, ip, 4).error_code == 0


def test_transactional_apis(broker: BrokerProcess) -> None:
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    group = f"txg-{uuid.uuid4().hex[:6]}"
    fc = build(FindCoordinatorRequest, key=tid, key_type=1)
    assert call(broker, fc, 3).error_code == TXN_DENIED
    ip = build(InitProducerIdRequest, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1,
               producer_epoch=-1)
    assert call(broker, ip, 4).error_code == TXN_DENIED
    grant(broker, allow(X, tid, Op.WRITE))
    assert call(broker, fc, 3).error_code == 0  # Write implies Describe
    got = until_coordinator_ready(lambda: call(broker, ip, 4))
    assert got.error_code == 0
    pid, epoch = got.producer_id, got.producer_epoch
    add = build(AddPartitionsToTxnRequest, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=[{"name": DATA, "partitions": [0]}])
    assert call(broker, add, 3).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code \
        == TOPIC_DENIED
    offsets = build(AddOffsetsToTxnRequest, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                    group_id=group)
    assert call(broker, offsets, 3).error_code == GROUP_DENIED
    grant(broker, allow(T, DATA, Op.WRITE), allow(G, group, Op.READ))
    assert call(broker, add, 3).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert call(broker, offsets, 3).error_code == 0
    dt = build(DescribeTransactionsRequest, transactional_ids=[tid, "someone-else"])
    states = call(broker, dt, 0).transaction_states
    assert [s.error_code for s in states] == [0, TXN_DENIED]
    assert [t.topic for t in states[0].topics] == [DATA]
    lt = build(ListTransactionsRequest, state_filters=[], producer_id_filters=[], duration_filter=-1)
    assert [s.transactional_id for s in call(broker, lt, 1).transaction_states] == [tid]
    end = build(EndTxnRequest, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=False)
    assert call(broker, end, 3).error_code == 0


def test_transactional_producer_end_to_end(broker: BrokerProcess) -> None:
    tid = f"txp-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 10000}
    p = Producer(conf)
    with pytest.raises(KafkaException) as exc:
        p.init_transactions(10)
    assert error_code(exc.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(broker, allow(X, tid, Op.WRITE), allow(T, DATA, Op.WRITE))
    before = end_offset(broker)
    p = Producer(conf)
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(DATA, b"in-txn")
    p.commit_transaction(10)
    assert end_offset(broker) == before + 2  # the record and the commit marker


def test_describe_producers_needs_read(broker: BrokerProcess) -> None:
    req = build(DescribeProducersRequest, topics=[{"name": DATA, "partition_indexes": [0]}])
    assert call(broker, req, 0).topics[0].partitions[0].error_code == TOPIC_DENIED
    grant(broker, allow(T, DATA, Op.READ))
    assert call(broker, req, 0).topics[0].partitions[0].error_code == 0


def test_consumer_group_offsets_for_unreadable_topics_are_hidden(broker: BrokerProcess) -> None:
    group = f"hid-{uuid.uuid4().hex[:6]}"
    grant(broker, allow(G, group, Op.READ), allow(T, DATA, Op.READ))
    assert commit_offset(broker, group, 2) == 0
    flt = AclBindingFilter(T, DATA, ResourcePatternType.ANY, None, None, Op.ANY, AclPermissionType.ANY)
    revoke(broker, flt)
    everything = build(OffsetFetchRequest, group_id=group, topics=None, require_stable=False)
    assert call(broker, everything, 7).topics == []
    named = build(OffsetFetchRequest, group_id=group, topics=[{"name": DATA, "partition_indexes": [0]}],
                  require_stable=False)
    assert call(broker, named, 7).topics[0].partitions[0].error_code == TOPIC_DENIED


def test_kafka_python_admin_sees_acls(broker: BrokerProcess) -> None:
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

    grant(broker, allow(T, "kp-", Op.READ, PRE, principal="User:alice"))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        acls, error = admin.describe_acls(ACLFilter(
            principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.TOPIC, None, ACLResourcePatternType.ANY)))
        assert [(a.principal, a.resource_pattern.resource_name) for a in acls] == [("User:alice", "kp-")]
    finally:
        admin.close()


def test_partition_reads_with_consumer_assign(broker: BrokerProcess) -> None:
    """A consumer without a group (assign) needs only Read on the topic."""
    grant(broker, allow(T, DATA, Op.READ))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(DATA, 0, 0)])
    msg = None
    for _ in range(20):
        msg = c.poll(1)
        if msg is not None and msg.error() is None:
            break
    c.close()
    assert msg is not None and msg.value() == b"v0"


def test_sync_leave_txn_offset_commit_end_txn_and_incremental_configs(broker: BrokerProcess) -> None:
    group, tid = f"sl-{uuid.uuid4().hex[:6]}", f"te-{uuid.uuid4().hex[:6]}"
    sync = build(SyncGroupRequest, group_id=group, generation_id=1, member_id="m", group_instance_id=None,
                 assignments=[])
    assert call(broker, sync, 3).error_code == GROUP_DENIED
    leave = build(LeaveGroupRequest, group_id=group, members=[{"member_id": "m", "group_instance_id": None}])
    assert call(broker, leave, 3).error_code == GROUP_DENIED
    grant(broker, allow(G, group, Op.READ))
    assert call(broker, sync, 3).error_code not in (GROUP_DENIED, TOPIC_DENIED)  # the coordinator answers now
    assert call(broker, leave, 3).error_code != GROUP_DENIED

    txn_commit = build(TxnOffsetCommitRequest, transactional_id=tid, group_id=group, producer_id=1,
                       producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None, topics=[
                           {"name": DATA, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    assert call(broker, txn_commit, 3).topics[0].partitions[0].error_code == TXN_DENIED
    end = build(EndTxnRequest, transactional_id=tid, producer_id=1, producer_epoch=0, committed=True)
    assert call(broker, end, 3).error_code == TXN_DENIED
    grant(broker, allow(X, tid, Op.WRITE))
    assert call(broker, txn_commit, 3).topics[0].partitions[0].error_code == TOPIC_DENIED  # group ok, topic not
    assert call(broker, end, 3).error_code not in (TXN_DENIED,)  # the coordinator judges it now

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"inc-{uuid.uuid4().hex[:6]}"
    grant(broker, allow(C, "kafka-cluster", Op.CREATE))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    inc = build(IncrementalAlterConfigsRequest, validate_only=False, resources=[{
        "resource_type": 2, "resource_name": name, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "54321"}]}])
    assert call(broker, inc, 1).responses[0].error_code == TOPIC_DENIED
    grant(broker, allow(T, name, Op.ALTER_CONFIGS))
    assert call(broker, inc, 1).responses[0].error_code == 0
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    assert admin.describe_configs([res])[res].result(15)["retention.ms"].value == "54321"


def test_an_unknown_authorizer_class_stops_the_broker(tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    b = BrokerProcess(tmp_path, {"authorizer.class.name": "com.example.HomeMadeAuthorizer"})
    try:
        with pytest.raises(RuntimeError, match="authorizer.class.name") as exc:
            b.start()
        assert "kafka.security.authorizer.AclAuthorizer" in str(exc.value)
    finally:
        b.close()
