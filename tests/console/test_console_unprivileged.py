"""The console used by ordinary SASL users of a broker with an authorizer: no cluster Describe, or only
Read on one topic. Pages refuse what the user may not do with a sentence, the console process stays up,
and the message browser needs nothing but Read on the topic (it joins no group and commits nothing).

Plain HTTP (urllib) against a real `strom console` process, so it runs without a browser."""

from __future__ import annotations

import http.cookiejar
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
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

from tests.support.broker import BrokerProcess
from tests.support.console import ConsoleProcess
from tests.support.security import start_acl_sasl_broker

if importlib.util.find_spec("strom.security.authorizer") is None:
    pytest.skip("this build of the broker has no ACL support", allow_module_level=True)

pytestmark = pytest.mark.slow

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Only a SASL listener; admin is a super user, alice and bob get only what a test grants."""
    b = start_acl_sasl_broker(tmp_path_factory.mktemp("console-unprivileged"), JAAS, "PLAIN,SCRAM-SHA-256")
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def console_process(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    process = ConsoleProcess(broker.bootstrap, tmp_path_factory.mktemp("console"), "--timeout", "5")
    process.start()
    try:
        yield process
    finally:
        process.stop()


class Browser:
    """A cookie-keeping HTTP client that logs in through the console's form, as a browser would."""

    def __init__(self, console: ConsoleProcess) -> None:
        self.console = console
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.console.url + path, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def log_in(self, user: str) -> None:
        _, form = self.get("/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
        data = urllib.parse.urlencode({"csrf": token, "username": user, "password": f"{user}-secret",
                                       "mechanism": "PLAIN", "security_protocol": "SASL_PLAINTEXT"}).encode()
        with self.opener.open(self.console.url + "/login", data=data, timeout=60) as response:
            body = response.read().decode()
        assert f"Logged in as {user}." in body, body


def error_text(body: str) -> str:
    found = re.search(r'id="error"[^>]*>(.*?)</', body, re.S)
    return found.group(1) if found else body


def test_users_page_without_cluster_describe_refuses_and_the_console_stays_up(console_process) -> None:
    alice = Browser(console_process)
    alice.log_in("alice")
    status, body = alice.get("/users")
    assert status == 403, body
    assert "not allowed for this user" in body and "Describe on the cluster" in body
    status, body = alice.get("/acls")  # librdkafka would have shown a refused DescribeAcls as "no ACLs"
    assert status == 403 and "not allowed for this user" in body, body
    for path in ("/topics", "/users", "/", "/groups", "/users"):
        status, body = alice.get(path)
        assert console_process.proc.poll() is None, console_process.log_tail()
        assert status in (200, 403), (path, status, body)
    assert alice.get("/healthz") == (200, "ok\n")


def test_scram_users_asked_anyway_is_a_refusal_not_a_crash(broker: BrokerProcess) -> None:
    """When the console cannot tell the user's rights beforehand, the request goes out and the refusal is a
    sentence. Run in a subprocess: a client abort there fails this test instead of ending the test run."""
    script = textwrap.dedent("""
        import json, sys
        from strom.console.errors import ConsoleError
        from strom.console.kafka_client import KafkaGateway
        gateway = KafkaGateway({"bootstrap.servers": sys.argv[1], "security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"},
                               timeout=10)
        gateway.cluster_operations = lambda: None  # a broker that cannot say
        for _ in range(2):
            try:
                gateway.scram_users()
                print(json.dumps(["listed"]), flush=True)
            except ConsoleError as exc:
                print(json.dumps([exc.status, exc.message]), flush=True)
        gateway.close()
    """)
    done = subprocess.run([sys.executable, "-c", script, broker.bootstrap], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exited with {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 2
    for status, message in rows:
        assert status == 403 and "Not authorized to Describe Cluster kafka-cluster" in message, message


def test_users_page_lists_users_for_a_user_with_describe(broker: BrokerProcess, console_process) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **sasl("admin")})
    grant = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    admin.create_acls([grant])[grant].result(15)
    try:
        bob = Browser(console_process)
        bob.log_in("bob")
        status, body = bob.get("/users")
        assert status == 200 and 'id="users"' in body, body
    finally:
        revoke = AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob", "*",
                                  AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        admin.delete_acls([revoke])[revoke].result(15)


def test_browse_with_only_read_on_the_topic(broker: BrokerProcess, console_process) -> None:
    topic = f"browse-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **sasl("admin")})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, **sasl("admin")})
    for i in range(6):
        producer.produce(topic, f"record-{i}".encode(), partition=i % 2)
    assert producer.flush(15) == 0
    read = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                      AclPermissionType.ALLOW)
    admin.create_acls([read])[read].result(15)  # and nothing else: no group, no cluster ACL

    bob = Browser(console_process)
    bob.log_in("bob")
    status, body = bob.get(f"/topics/{topic}/messages?partition=all&mode=offset&offset=0")
    assert status == 200, error_text(body)
    assert all(f"record-{i}" in body for i in range(6)), body
    status, body = bob.get(f"/topics/{topic}/messages?partition=1&mode=newest&search=record-5")
    assert status == 200 and "record-5" in body and "record-3" not in body, error_text(body)
    groups = admin.list_consumer_groups(request_timeout=15).result()
    assert not [g.group_id for g in groups.valid if g.group_id.startswith("strom-console")]
