"""Every advertised version of every API answers a well-formed request with a decodable response.

Real clients cover only the versions they happen to send (see ARCHITECTURE.md); this walks the
whole advertised range so ApiVersions never promises a version that breaks.
"""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterReplicaLogDirsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from strom.broker.handlers import create_acls, delete_acls, describe_acls
from strom.protocol import codec
from strom.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from strom.protocol.record_batch import build_batch
from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient


def call(broker: BrokerProcess, request, version: int):  # noqa: ANN001, ANN201
    c = RawClient(broker)
    try:
        frame = c.request(request, version)
    finally:
        c.close()
    flexible = codec.is_flexible(request.API_KEY, version) and request.API_KEY != ApiKey.API_VERSIONS
    return codec.response_class(request.API_KEY).decode(frame[5:] if flexible else frame[4:], version=version)


def versions(key: ApiKey) -> list[int]:
    lo, hi = SUPPORTED_VERSIONS[key]
    return list(range(lo, hi + 1))


@pytest.fixture(scope="module")
def topic(broker: BrokerProcess) -> str:
    return new_topic(broker, partitions=2)


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions(broker: BrokerProcess, version: int) -> None:
    resp = call(broker, ApiVersionsRequest(client_software_name="t", client_software_version="1"), version)
    assert resp.error_code == 0
    assert {k.api_key for k in resp.api_keys} >= {0, 1, 2, 3, 18}


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata(broker: BrokerProcess, topic: str, version: int) -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                          include_cluster_authorized_operations=False)
    resp = call(broker, req, version)
    t = resp.topics[0]
    assert t.error_code == 0 and t.name == topic and len(t.partitions) == 2
    assert resp.brokers[0].port == broker.port


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
def test_produce(broker: BrokerProcess, topic: str, version: int) -> None:
    batch = build_batch([(b"k", f"v{version}".encode(), [], 1_700_000_000_000)])
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=1, records=batch)])])
    part = call(broker, req, version).responses[0].partition_responses[0]
    assert part.error_code == 0 and part.base_offset >= 0


@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
def test_fetch(broker: BrokerProcess, topic: str, version: int) -> None:
    meta = call(broker, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                        allow_auto_topic_creation=False), 12)
    batch = build_batch([(None, b"fetch-me", [], 1_700_000_000_000)])
    call(broker, ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), 7)
    fp = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                log_start_offset=-1, partition_max_bytes=1 << 20)
    ft = FetchRequest.FetchTopic(topic=topic, topic_id=meta.topics[0].topic_id, partitions=[fp])
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[ft], forgotten_topics_data=[], rack_id="")
    part = call(broker, req, version).responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark >= 1 and b"fetch-me" in bytes(part.records)


@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
def test_list_offsets(broker: BrokerProcess, topic: str, version: int) -> None:
    parts = [ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                       timestamp=-2, max_num_offsets=1)]
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=5000,
                             topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=parts)])
    p = call(broker, req, version).topics[0].partitions[0]
    if version == 0:  # the old answer: a list of offsets, at most max_num_offsets
        assert p.error_code == 0 and p.old_style_offsets == [0]
    else:
        assert p.error_code == 0 and p.offset == 0


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch(broker: BrokerProcess, topic: str, version: int) -> None:
    batch = build_batch([(None, b"epoch", [], 1_700_000_000_000)])
    produced = call(broker, ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=1, records=batch)])]), 7)
    leo = produced.responses[0].partition_responses[0].base_offset + 1
    R = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[R(topic=topic, partitions=[
        R.OffsetForLeaderPartition(partition=1, current_leader_epoch=0, leader_epoch=0)])])
    p = call(broker, req, version).topics[0].partitions[0]
    assert p.error_code == 0 and p.end_offset == leo
    if version >= 1:
        assert p.leader_epoch == 0


@pytest.mark.parametrize("version", versions(ApiKey.CREATE_TOPICS))
def test_create_and_delete_topics(broker: BrokerProcess, version: int) -> None:
    name = f"v{version}-{uuid.uuid4().hex[:6]}"
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=2, replication_factor=1, assignments=[],
        configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name="retention.ms", value="60000")])],
        timeout_ms=5000, validate_only=False)
    assert call(broker, req, version).topics[0].error_code == 0
    dv = min(version, SUPPORTED_VERSIONS[ApiKey.DELETE_TOPICS][1])
    del_req = DeleteTopicsRequest(topic_names=[name], timeout_ms=5000,
                                  topics=[DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0))])
    assert call(broker, del_req, dv).responses[0].error_code == 0


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_TOPICS))
def test_delete_unknown_topic(broker: BrokerProcess, version: int) -> None:
    req = DeleteTopicsRequest(topic_names=["nope-none"], timeout_ms=5000,
                              topics=[DeleteTopicsRequest.DeleteTopicState(name="nope-none",
                                                                           topic_id=uuid.UUID(int=0))])
    assert call(broker, req, version).responses[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CONFIGS))
def test_describe_configs(broker: BrokerProcess, topic: str, version: int) -> None:
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=None)], include_synonyms=True,
        include_documentation=True)
    res = call(broker, req, version).results[0]
    assert res.error_code == 0
    configs = {c.name: c for c in res.configs}
    assert configs["cleanup.policy"].value == "delete"
    if version == 0:  # no synonyms yet, only whether each value is the default
        assert configs["cleanup.policy"].is_default
        return
    # segment.bytes falls back to the broker's log.segment.bytes: that synonym is listed
    assert "log.segment.bytes" in {s.name for s in configs["segment.bytes"].synonyms}


@pytest.mark.parametrize("version", versions(ApiKey.ALTER_CONFIGS))
def test_alter_configs(broker: BrokerProcess, topic: str, version: int) -> None:
    R = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest(resources=[R(resource_type=2, resource_name=topic, configs=[
        R.AlterableConfig(name="retention.ms", value=str(1000 + version))])], validate_only=False)
    assert call(broker, req, version).responses[0].error_code == 0


@pytest.mark.parametrize("version", versions(ApiKey.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_configs(broker: BrokerProcess, topic: str, version: int) -> None:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(resources=[R(resource_type=2, resource_name=topic, configs=[
        R.AlterableConfig(name="retention.bytes", config_operation=0, value="999999")])], validate_only=False)
    assert call(broker, req, version).responses[0].error_code == 0


@pytest.mark.parametrize("version", versions(ApiKey.CREATE_PARTITIONS))
def test_create_partitions(broker: BrokerProcess, version: int) -> None:
    name = new_topic(broker, partitions=1)
    req = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name=name, count=3, assignments=None)], timeout_ms=5000, validate_only=False)
    assert call(broker, req, version).results[0].error_code == 0


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_RECORDS))
def test_delete_records(broker: BrokerProcess, topic: str, version: int) -> None:
    req = DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(name=topic, partitions=[
        DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)])],
        timeout_ms=5000)
    p = call(broker, req, version).topics[0].partitions[0]
    assert p.error_code == 0 and p.low_watermark >= 0


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_LOG_DIRS))
def test_describe_log_dirs(broker: BrokerProcess, topic: str, version: int) -> None:
    resp = call(broker, DescribeLogDirsRequest(topics=None), version)
    names = {t.name for r in resp.results for t in r.topics}
    assert topic in names


@pytest.mark.parametrize("version", versions(ApiKey.ALTER_REPLICA_LOG_DIRS))
def test_alter_replica_log_dirs(broker: BrokerProcess, topic: str, version: int) -> None:
    log_dir = call(broker, DescribeLogDirsRequest(topics=None), 1).results[0].log_dir
    move = AlterReplicaLogDirsRequest.AlterReplicaLogDir
    req = AlterReplicaLogDirsRequest(dirs=[move(path=log_dir, topics=[
        move.AlterReplicaLogDirTopic(name=topic, partitions=[0])])])
    [result] = call(broker, req, version).results
    assert (result.topic_name, result.partitions[0].error_code) == (topic, 0)  # already there: nothing to do


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CLUSTER))
def test_describe_cluster(broker: BrokerProcess, version: int) -> None:
    resp = call(broker, DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1), version)
    assert resp.error_code == 0 and resp.brokers[0].port == broker.port


@pytest.mark.parametrize("version", versions(ApiKey.ALTER_CLIENT_QUOTAS))
def test_alter_client_quotas(broker: BrokerProcess, version: int) -> None:
    entry = AlterClientQuotasRequest.EntryData
    req = AlterClientQuotasRequest(validate_only=False, entries=[entry(
        entity=[entry.EntityData(entity_type="client-id", entity_name=f"matrix-{version}")],
        ops=[entry.OpData(key="producer_byte_rate", value=1e9, remove=False)])])
    resp = call(broker, req, version)
    assert resp.entries[0].error_code == 0
    assert resp.entries[0].entity[0].entity_name == f"matrix-{version}"


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CLIENT_QUOTAS))
def test_describe_client_quotas(broker: BrokerProcess, version: int) -> None:
    test_alter_client_quotas(broker, version)
    req = DescribeClientQuotasRequest(strict=True, components=[DescribeClientQuotasRequest.ComponentData(
        entity_type="client-id", match_type=0, match=f"matrix-{version}")])
    resp = call(broker, req, version)
    assert resp.error_code == 0 and len(resp.entries) == 1
    assert [(v.key, v.value) for v in resp.entries[0].values] == [("producer_byte_rate", 1e9)]


@pytest.mark.parametrize("version", versions(ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id(broker: BrokerProcess, version: int) -> None:
    req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                producer_epoch=-1)
    resp = call(broker, req, version)
    assert resp.error_code == 0 and resp.producer_id >= 0 and resp.producer_epoch == 0


# Without authorizer.class.name the ACL APIs answer SECURITY_DISABLED, as Kafka does; with an authorizer every
# version is exercised in tests/integration/test_acls.py.
SECURITY_DISABLED = 54


@pytest.mark.parametrize("version", range(describe_acls.VERSIONS[0], describe_acls.VERSIONS[1] + 1))
def test_describe_acls_without_authorizer(broker: BrokerProcess, version: int) -> None:
    req = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=3,
                              principal_filter=None, host_filter=None, operation=1, permission_type=1)
    resp = call(broker, req, version)
    assert resp.error_code == SECURITY_DISABLED and resp.resources == []


@pytest.mark.parametrize("version", range(create_acls.VERSIONS[0], create_acls.VERSIONS[1] + 1))
def test_create_acls_without_authorizer(broker: BrokerProcess, version: int) -> None:
    req = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:alice", host="*", operation=3,
        permission_type=3)])
    assert [r.error_code for r in call(broker, req, version).results] == [SECURITY_DISABLED]


@pytest.mark.parametrize("version", range(delete_acls.VERSIONS[0], delete_acls.VERSIONS[1] + 1))
def test_delete_acls_without_authorizer(broker: BrokerProcess, version: int) -> None:
    req = DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=3, principal_filter=None,
        host_filter=None, operation=1, permission_type=1)])
    assert [r.error_code for r in call(broker, req, version).filter_results] == [SECURITY_DISABLED]


@pytest.mark.parametrize("version", versions(ApiKey.SASL_HANDSHAKE))
def test_sasl_handshake_on_a_plaintext_listener(broker: BrokerProcess, version: int) -> None:
    from kafka.protocol.sasl import SaslHandshakeRequest

    resp = call(broker, SaslHandshakeRequest(mechanism="PLAIN"), version)
    assert resp.error_code == 34  # ILLEGAL_SASL_STATE, as Kafka answers outside a SASL listener


@pytest.mark.parametrize("version", versions(ApiKey.SASL_AUTHENTICATE))
def test_sasl_authenticate_on_a_plaintext_listener(broker: BrokerProcess, version: int) -> None:
    from kafka.protocol.sasl import SaslAuthenticateRequest

    resp = call(broker, SaslAuthenticateRequest(auth_bytes=b"\0a\0b"), version)
    assert resp.error_code == 34


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS))
def test_describe_user_scram_credentials(broker: BrokerProcess, version: int) -> None:
    from kafka.protocol.admin import DescribeUserScramCredentialsRequest as R

    resp = call(broker, R(users=[R.UserName(name="nobody-here")]), version)
    assert resp.error_code == 0 and resp.results[0].error_code == 91  # RESOURCE_NOT_FOUND


@pytest.mark.parametrize("version", versions(ApiKey.ALTER_USER_SCRAM_CREDENTIALS))
def test_alter_user_scram_credentials(broker: BrokerProcess, version: int) -> None:
    from kafka.protocol.admin import AlterUserScramCredentialsRequest as R

    up = R.ScramCredentialUpsertion(name="matrix-user", mechanism=2, iterations=4096, salt=b"salt",
                                    salted_password=b"x" * 64)
    resp = call(broker, R(deletions=[], upsertions=[up]), version)
    assert resp.results[0].error_code == 0
