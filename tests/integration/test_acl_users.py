"""ACLs between real users: a SASL_PLAINTEXT listener with PLAIN users admin (a super user), alice and bob.

What one user is granted does not leak to another; DENY beats ALLOW; User:* grants everyone; a change made by
the admin applies to connections already open, without a restart.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from strom.protocol import codec
from strom.protocol.inter_broker import build
from tests.integration.test_cli import ok, strom
from tests.support.broker import BrokerProcess, free_port
from tests.support.raw_client import RawClient
from tests.support.security import ClientAuth

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
Op, Perm = AclOperation, AclPermissionType
T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("acl-users"), {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin",
    }, port=port)
    b.start()
    try:
        yield b
    finally:
        b.close()


def user(broker: BrokerProcess, name: str) -> ClientAuth:
    return ClientAuth(broker.bootstrap, "SASL_PLAINTEXT", "PLAIN", name, f"{name}-secret")


def admin_of(broker: BrokerProcess, name: str = "admin") -> AdminClient:
    return AdminClient(user(broker, name).confluent())


def acl(principal: str, rtype: ResourceType, name: str, op: AclOperation, perm: Perm = Perm.ALLOW,
        pattern: ResourcePatternType = LIT) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def grant(broker: BrokerProcess, *bindings: AclBinding) -> None:
    admin = admin_of(broker)
    for f in admin.create_acls(list(bindings)).values():
        f.result(15)


def revoke(broker: BrokerProcess, flt: AclBindingFilter) -> None:
    admin = admin_of(broker)
    admin.delete_acls([flt])[flt].result(15)


def new_topic(broker: BrokerProcess) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = admin_of(broker)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


def produce(broker: BrokerProcess, who: str, topic: str, values: list[bytes]) -> list[int]:
    """Delivery error codes (0 = delivered), one per value."""
    p = Producer(user(broker, who).confluent(**{"message.timeout.ms": 5000}))
    codes: list[int] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: codes.append(err.code() if err else 0))
    p.flush(15)
    return codes


def consume(broker: BrokerProcess, who: str, topic: str, group: str, n: int) -> tuple[list[bytes], set[int]]:
    c = Consumer(user(broker, who).confluent(**{"group.id": group, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    values: list[bytes] = []
    errors: set[int] = set()
    deadline = time.monotonic() + 15
    while len(values) < n and time.monotonic() < deadline and not errors:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            errors.add(m.error().code())
        else:
            values.append(m.value())
    c.close()
    return values, errors


def test_the_super_user_may_do_everything_others_nothing(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    assert produce(broker, "admin", topic, [b"a"]) == [0]
    assert produce(broker, "alice", topic, [b"b"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    alice = admin_of(broker, "alice")
    with pytest.raises(KafkaException) as exc:
        alice.create_topics([NewTopic("alice-topic", 1, 1)])["alice-topic"].result(15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    flt = AclBindingFilter(T, "*", LIT, "User:alice", None, Op.ANY, Perm.ANY)
    with pytest.raises(KafkaException) as exc:
        alice.create_acls([acl("User:alice", T, "*", Op.ALL)])[acl("User:alice", T, "*", Op.ALL)].result(15)
    assert exc.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert admin_of(broker).describe_acls(flt).result(15) == []  # nothing was created
    kp = KafkaAdminClient(**user(broker, "alice").kafka_python())
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                       permission_type=ACLPermissionType.ANY,
                                       resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                              ACLResourcePatternType.ANY)))
    finally:
        kp.close()


def test_a_grant_to_alice_is_not_a_grant_to_bob(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    group = f"alice-{uuid.uuid4().hex[:6]}"
    grant(broker, acl("User:alice", T, topic, Op.WRITE), acl("User:alice", T, topic, Op.READ),
          acl("User:alice", G, group, Op.READ))
    assert produce(broker, "alice", topic, [b"1", b"2"]) == [0, 0]
    assert produce(broker, "bob", topic, [b"x"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert consume(broker, "alice", topic, group, 2) == ([b"1", b"2"], set())
    values, errors = consume(broker, "bob", topic, group, 2)
    assert values == [] and errors & {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_deny_beats_a_wildcard_allow(broker: BrokerProcess) -> None:
    prefix = f"shared-{uuid.uuid4().hex[:6]}-"
    topic = prefix + "a"
    admin = admin_of(broker)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    grant(broker, acl("User:*", T, prefix, Op.WRITE, pattern=PRE), acl("User:bob", T, topic, Op.WRITE, Perm.DENY))
    assert produce(broker, "alice", topic, [b"ok"]) == [0]
    assert produce(broker, "bob", topic, [b"no"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_a_revoke_applies_to_an_open_connection(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    grant(broker, acl("User:alice", T, topic, Op.WRITE))
    p = KafkaProducer(**user(broker, "alice").kafka_python(), max_block_ms=5000, retries=0, acks=1,
                      enable_idempotence=False)
    try:
        p.send(topic, b"before").get(10)
        revoke(broker, AclBindingFilter(T, topic, ResourcePatternType.ANY, "User:alice", None, Op.ANY, Perm.ANY))
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(topic, b"after").get(10)
    finally:
        p.close(timeout=5)
    grant(broker, acl("User:alice", T, topic, Op.READ))
    c = KafkaConsumer(topic, **user(broker, "alice").kafka_python(), auto_offset_reset="earliest",
                      consumer_timeout_ms=5000, enable_auto_commit=False, group_id=None)
    try:
        assert [m.value for m in c] == [b"before"]
    finally:
        c.close()


def test_strom_acls_cli_round_trip(broker: BrokerProcess, tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    topic = new_topic(broker)
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.username=admin\nsasl.password=admin-secret\n")
    common = ["acls", "--bootstrap-server", broker.bootstrap, "--command-config", str(props)]
    added = ok(strom(*common, "--add", "--producer", "--allow-principal", "User:alice", "--topic", topic))
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`: " \
        in added.stdout
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in added.stdout
    assert produce(broker, "alice", topic, [b"via-cli"]) == [0]
    listed = ok(strom(*common, "--list", "--topic", topic)).stdout
    assert sorted(line.strip() for line in listed.splitlines() if "principal=" in line) == [
        f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)" for op in ("CREATE", "DESCRIBE",
                                                                                          "WRITE")]
    kept = strom(*common, "--remove", "--topic", topic, stdin="n\n")
    assert kept.returncode == 1 and "nothing removed" in kept.stderr
    assert produce(broker, "alice", topic, [b"still"]) == [0]
    removed = ok(strom(*common, "--remove", "--topic", topic, "--force")).stdout
    assert removed.count("Removed ACL for resource") == 3
    assert produce(broker, "alice", topic, [b"refused"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    denied = strom("acls", "--bootstrap-server", broker.bootstrap, "--list", STROM_CONNECT_TIMEOUT="3")
    assert denied.returncode != 0  # no credentials: the SASL listener does not answer


class _Endpoint:
    def __init__(self, hostport: str) -> None:
        self.port = int(hostport.rsplit(":", 1)[1])


def sasl_call(hostport: str, user: str, password: str, request, version: int):  # noqa: ANN001, ANN201
    """One request over a fresh SASL/PLAIN connection (what a client library cannot send: inter-broker APIs)."""
    c = RawClient(_Endpoint(hostport))  # type: ignore[arg-type]
    try:
        c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 1)
        frame = c.request(request, version)
    finally:
        c.close()
    flexible = codec.is_flexible(request.API_KEY, version)
    return codec.response_class(request.API_KEY).decode(frame[5:] if flexible else frame[4:], version=version)


def test_scram_credential_apis_need_describe_and_alter_on_the_cluster(broker: BrokerProcess) -> None:
    describe = build(DescribeUserScramCredentialsRequest, users=None)
    refused = sasl_call(broker.bootstrap, "alice", "alice-secret", describe, 0)  # per user: see the handler
    assert (refused.error_code, [(r.user, r.error_code) for r in refused.results]) == (0, [("", 31)])
    assert refused.results[0].error_message == "Not authorized to Describe Cluster kafka-cluster"
    assert sasl_call(broker.bootstrap, "admin", "admin-secret", describe, 0).error_code == 0
    alter = build(AlterUserScramCredentialsRequest, deletions=[], upsertions=[{
        "name": "carol", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}])
    [result] = sasl_call(broker.bootstrap, "alice", "alice-secret", alter, 0).results
    assert (result.user, result.error_code) == ("carol", 31)
    users = sasl_call(broker.bootstrap, "admin", "admin-secret", describe, 0).results
    assert "carol" not in [u.user for u in users]  # nothing was stored
    [result] = sasl_call(broker.bootstrap, "admin", "admin-secret", alter, 0).results
    assert result.error_code == 0
    users = sasl_call(broker.bootstrap, "admin", "admin-secret", describe, 0).results
    assert "carol" in [u.user for u in users]


def test_client_quota_apis_need_describe_configs_and_alter_configs_on_the_cluster(broker: BrokerProcess) -> None:
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    describe = build(DescribeClientQuotasRequest, strict=False, components=[
        {"entity_type": "client-id", "match_type": 2, "match": None}])
    alter = build(AlterClientQuotasRequest, validate_only=False, entries=[{
        "entity": [{"entity_type": "client-id", "entity_name": "acl-quota-app"}],
        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}])
    assert sasl_call(broker.bootstrap, "alice", "alice-secret", describe, 1).error_code == 31
    [entry] = sasl_call(broker.bootstrap, "alice", "alice-secret", alter, 1).entries
    assert entry.error_code == 31
    found = sasl_call(broker.bootstrap, "admin", "admin-secret", describe, 1)
    assert found.error_code == 0 and not found.entries  # nothing was stored
    grant(broker, acl("User:alice", ResourceType.BROKER, "kafka-cluster", Op.ALTER_CONFIGS))
    [entry] = sasl_call(broker.bootstrap, "alice", "alice-secret", alter, 1).entries
    assert entry.error_code == 0
    found = sasl_call(broker.bootstrap, "alice", "alice-secret", describe, 1)  # AlterConfigs implies Describe
    assert found.error_code == 0
    assert [(e.entity[0].entity_name, e.values[0].value) for e in found.entries] == [("acl-quota-app", 1024.0)]


def test_reassignment_apis_need_alter_and_describe_on_the_cluster(broker: BrokerProcess) -> None:
    """AlterPartitionReassignments: ALTER on the cluster (every partition and the top level refused);
    ListPartitionReassignments: DESCRIBE on the cluster. The super user gets real answers."""
    alter = AlterPartitionReassignmentsRequest(timeout_ms=30_000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name="any", partitions=[
            AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(partition_index=0,
                                                                                      replicas=[0])])])
    listing = ListPartitionReassignmentsRequest(timeout_ms=30_000, topics=None)
    refused = sasl_call(broker.bootstrap, "alice", "alice-secret", alter, 0)
    assert refused.error_code == 31 and refused.error_message
    assert [p.error_code for t in refused.responses for p in t.partitions] == [31]
    assert sasl_call(broker.bootstrap, "alice", "alice-secret", listing, 0).error_code == 31
    allowed = sasl_call(broker.bootstrap, "admin", "admin-secret", alter, 0)
    assert allowed.error_code == 0
    assert [p.error_code for t in allowed.responses for p in t.partitions] == [3]  # no such topic
    assert sasl_call(broker.bootstrap, "admin", "admin-secret", listing, 0).error_code == 0
