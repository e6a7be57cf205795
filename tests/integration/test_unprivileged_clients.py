"""What an ordinary SASL user without any ACL gets from admin APIs: Kafka's refusals with a message, never
an answer that kills the client, and DescribeCluster like any client (Kafka answers it to every principal).

The confluent-kafka calls run in a subprocess: librdkafka aborted the whole process on the broker's old
DescribeUserScramCredentials refusal, and that must fail the test, not kill pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeUserScramCredentialsRequest,
)
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from strom.protocol.inter_broker import build
from tests.integration.test_acl_users import sasl_call
from tests.support.broker import BrokerProcess
from tests.support.security import start_acl_sasl_broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
CLUSTER_DENIED, GROUP_DENIED, TXN_DENIED = 31, 30, 53


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_acl_sasl_broker(tmp_path_factory.mktemp("unprivileged"), JAAS, "PLAIN")
    try:
        yield b
    finally:
        b.close()


def run_admin_script(broker: BrokerProcess, user: str, body: str) -> list[list[str]]:
    """Run `body` in a fresh Python with `admin`, an AdminClient logged in as `user`, and `report(*values)`;
    returns the reported rows. A crash of the client (abort, segfault) fails the test with its output."""
    script = textwrap.dedent("""
        import json, sys
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": sys.argv[1], "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": sys.argv[2],
                             "sasl.password": sys.argv[2] + "-secret"})
        def report(*values):
            print(json.dumps([str(v) for v in values]), flush=True)
        def error_of(call):
            try:
                return "ok", call()
            except Exception as exc:
                error = exc.args[0] if exc.args else exc
                return getattr(error, "name", lambda: type(exc).__name__)(), getattr(error, "str", lambda: "")()
    """) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script, broker.bootstrap, user], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"client exited with {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]


def test_describe_user_scram_credentials_refused_is_a_clean_error(broker: BrokerProcess) -> None:
    rows = run_admin_script(broker, "alice", """
        for _ in range(3):  # librdkafka used to abort on the first or the second refusal
            report("all", *error_of(lambda: admin.describe_user_scram_credentials(request_timeout=15).result()))
            report("named", *error_of(
                lambda: admin.describe_user_scram_credentials(["bob"], request_timeout=15)["bob"].result()))
    """)
    assert len(rows) == 6
    for _, name, message in rows:  # librdkafka may read a byte past the message's end: compare its start
        assert name == "CLUSTER_AUTHORIZATION_FAILED"
        assert message.startswith("Not authorized to Describe Cluster kafka-cluster"), message


def test_describe_cluster_is_answered_to_a_user_without_acls(broker: BrokerProcess) -> None:
    rows = run_admin_script(broker, "alice", """
        for ops in (False, True):
            result = admin.describe_cluster(include_authorized_operations=ops, request_timeout=15).result()
            report(result.cluster_id, [n.id for n in result.nodes], result.controller.id, result.authorized_operations)
    """)
    assert [row[1:] for row in rows] == [["[0]", "0", "None"]] * 2 and rows[0][0] not in ("", "None")
    plain = sasl_call(broker.bootstrap, "alice", "alice-secret",
                      build(DescribeClusterRequest, include_cluster_authorized_operations=False), 0)
    assert (plain.error_code, plain.authorized_operations) == (0, None)  # not asked for
    asked = sasl_call(broker.bootstrap, "alice", "alice-secret",
                      build(DescribeClusterRequest, include_cluster_authorized_operations=True), 0)
    assert (asked.error_code, asked.authorized_operations) == (0, set())  # no Describe: no operations shown


def test_describe_cluster_shows_the_operations_of_a_user_with_describe(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
    grants = [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:alice", "*", op,
                         AclPermissionType.ALLOW) for op in (AclOperation.ALTER, AclOperation.IDEMPOTENT_WRITE)]
    for future in admin.create_acls(grants, request_timeout=15).values():
        future.result()
    try:
        rows = run_admin_script(broker, "alice", """
            result = admin.describe_cluster(include_authorized_operations=True, request_timeout=15).result()
            report(sorted(op.name for op in result.authorized_operations))
        """)
        assert rows == [["['ALTER', 'DESCRIBE', 'IDEMPOTENT_WRITE']"]]  # Alter implies Describe
    finally:
        revoke = AclBindingFilter(ResourceType.BROKER, None, ResourcePatternType.ANY, "User:alice", None,
                                  AclOperation.ANY, AclPermissionType.ANY)
        admin.delete_acls([revoke], request_timeout=15)[revoke].result()


def test_authorization_refusals_carry_a_message(broker: BrokerProcess) -> None:
    def ask(request, version: int):  # noqa: ANN001, ANN202 - a kafka-python request; its decoded response
        return sasl_call(broker.bootstrap, "alice", "alice-secret", request, version)

    acls = ask(build(DescribeAclsRequest, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                     principal_filter=None, host_filter=None, operation=1, permission_type=1), 1)
    assert (acls.error_code, acls.error_message) == (CLUSTER_DENIED, "Not authorized to Describe Cluster kafka-cluster")
    [created] = ask(build(CreateAclsRequest, creations=[{
        "resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:bob", "host": "*",
        "operation": 3, "permission_type": 3}]), 1).results
    assert (created.error_code, created.error_message) == (CLUSTER_DENIED, "Not authorized to Alter Cluster kafka-cluster")
    [deleted] = ask(build(DeleteAclsRequest, filters=[{
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1}]), 1).filter_results
    assert (deleted.error_code, deleted.error_message) == (CLUSTER_DENIED, "Not authorized to Alter Cluster kafka-cluster")
    [altered] = ask(build(AlterUserScramCredentialsRequest, deletions=[], upsertions=[{
        "name": "bob", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]), 0).results
    assert (altered.error_code, altered.error_message) == (CLUSTER_DENIED, "Not authorized to Alter Cluster kafka-cluster")
    group = ask(build(FindCoordinatorRequest, key="g1", key_type=0), 3)
    assert (group.error_code, group.error_message) == (GROUP_DENIED, "Not authorized to Describe Group g1")
    [txn] = ask(build(FindCoordinatorRequest, key_type=1, coordinator_keys=["tx1"]), 4).coordinators
    assert (txn.error_code, txn.error_message) == (TXN_DENIED, "Not authorized to Describe TransactionalId tx1")
    [topic] = ask(build(DescribeProducersRequest, topics=[{"name": "t", "partition_indexes": [0]}]), 0).topics
    assert [(q.error_code, q.error_message) for q in topic.partitions] == [(29, "Not authorized to Read Topic t")]
    named = ask(build(DescribeUserScramCredentialsRequest, users=[{"name": "bob"}, {"name": "bob"}]), 0)
    assert named.error_code == 0
    assert [(r.user, r.error_code, r.error_message) for r in named.results] == [
        ("bob", CLUSTER_DENIED, "Not authorized to Describe Cluster kafka-cluster")]
