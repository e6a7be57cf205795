"""SASL/PLAIN on a SASL_PLAINTEXT listener next to a PLAINTEXT one: every client library, failures, the rules
before authentication (only ApiVersions and the SASL APIs), the pre-1.0 bare-token format and session expiry."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.support.broker import BrokerProcess, free_port
from tests.support.raw_client import RawClient, decode
from tests.support.security import ROUND_TRIPS, ClientAuth, create_topic, start_sasl_broker

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SASL_AUTHENTICATION_FAILED = 58


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_sasl_broker(tmp_path_factory.mktemp("sasl"), PLAIN_JAAS)
    try:
        yield broker
    finally:
        broker.close()


def plain_auth(broker: BrokerProcess, user: str = "alice", password: str = "alice-secret") -> ClientAuth:
    return ClientAuth(f"127.0.0.1:{broker.sasl_port}", "SASL_PLAINTEXT", "PLAIN", user, password)


def auth_errors(auth: ClientAuth) -> list[str]:
    """What librdkafka reports when it cannot authenticate (through error_cb, served by poll)."""
    errors: list = []
    admin = AdminClient(auth.confluent(error_cb=errors.append, log_level=0))
    for _ in range(40):
        admin.poll(0.25)
        if any(e.name() == "_AUTHENTICATION" for e in errors):
            break
    return [e.str() for e in errors if e.name() == "_AUTHENTICATION"]


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_every_client_produces_and_consumes_with_plain(sasl_broker: BrokerProcess, client: str) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    auth = plain_auth(sasl_broker)
    topic = create_topic(auth)
    assert ROUND_TRIPS[client](auth, topic, 5) == [f"{client}-{i}".encode() for i in range(5)]


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret")])
def test_a_wrong_password_or_unknown_user_fails_clearly_and_others_keep_working(
        sasl_broker: BrokerProcess, user: str, password: str) -> None:
    errors = auth_errors(plain_auth(sasl_broker, user, password))
    assert errors and all("Invalid username or password" in e for e in errors)
    good = plain_auth(sasl_broker)
    assert ROUND_TRIPS["confluent-kafka"](good, create_topic(good), 2) == [b"confluent-kafka-0", b"confluent-kafka-1"]
    assert "failed authentication with 127.0.0.1" in sasl_broker.log_tail(200)
    assert password not in sasl_broker.log_path.read_text()


def handshake(c: RawClient, mechanism: str = "PLAIN", version: int = 1) -> SaslHandshakeResponse:
    return decode(SaslHandshakeResponse, c.request(SaslHandshakeRequest(mechanism=mechanism), version), version,
                  False)


def authenticate(c: RawClient, token: bytes, version: int) -> SaslAuthenticateResponse:
    return decode(SaslAuthenticateResponse, c.request(SaslAuthenticateRequest(auth_bytes=token), version), version,
                  version >= 2)


def metadata_works(c: RawClient) -> bool:
    from kafka.protocol.metadata import MetadataResponse

    frame = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 4)
    return len(decode(MetadataResponse, frame, 4, False).brokers) == 1


def test_before_authentication_only_api_versions_and_sasl_are_answered(sasl_broker: BrokerProcess) -> None:
    c = RawClient(sasl_broker, port=sasl_broker.sasl_port)
    try:
        frame = c.request(ApiVersionsRequest(), 0)
        assert frame[4:6] == b"\x00\x00"  # no error
        c.correlation += 1
        req = MetadataRequest(topics=None, allow_auto_topic_creation=False)
        req.with_header(correlation_id=c.correlation, client_id="raw")
        c.send_raw(bytes(req.encode(version=4, header=True, framed=True)))
        assert c.is_closed_by_peer()  # no answer: closed, as Kafka does
    finally:
        c.close()
    assert "METADATA request before authenticating" in sasl_broker.log_tail(50)


@pytest.mark.parametrize("handshake_version", [0, 1])
def test_unsupported_mechanism_lists_the_enabled_ones(sasl_broker: BrokerProcess, handshake_version: int) -> None:
    c = RawClient(sasl_broker, port=sasl_broker.sasl_port)
    try:
        resp = handshake(c, "GSSAPI", handshake_version)
        assert resp.error_code == 33
        assert resp.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.is_closed_by_peer()
    finally:
        c.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_authenticate_every_version(sasl_broker: BrokerProcess, version: int) -> None:
    c = RawClient(sasl_broker, port=sasl_broker.sasl_port)
    try:
        assert handshake(c).error_code == 0
        resp = authenticate(c, b"\0alice\0alice-secret", version)
        assert resp.error_code == 0 and resp.error_message is None
        if version >= 1:
            assert resp.session_lifetime_ms == 0  # connections.max.reauth.ms unset: the session never expires
        assert metadata_works(c)
    finally:
        c.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_failed_authenticate_answers_error_58_then_closes(sasl_broker: BrokerProcess, version: int) -> None:
    c = RawClient(sasl_broker, port=sasl_broker.sasl_port)
    try:
        assert handshake(c).error_code == 0
        resp = authenticate(c, b"\0alice\0nope", version)
        assert resp.error_code == SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in resp.error_message
        assert c.is_closed_by_peer()
    finally:
        c.close()


def test_bare_tokens_after_handshake_v0(sasl_broker: BrokerProcess) -> None:
    """SaslHandshake v0: the token goes without a Kafka header, the answer is a bare size-prefixed token."""
    c = RawClient(sasl_broker, port=sasl_broker.sasl_port)
    try:
        assert handshake(c, "PLAIN", 0).error_code == 0
        token = b"\0alice\0alice-secret"
        c.send_raw(len(token).to_bytes(4, "big") + token)
        assert c.read_frame() == b""  # PLAIN's empty server token
        frame = c.request(ApiVersionsRequest(), 0)
        assert frame[4:6] == b"\x00\x00"
        assert metadata_works(c)
    finally:
        c.close()


def test_a_frame_larger_than_sasl_server_max_receive_size_before_authentication_closes(
        sasl_broker: BrokerProcess) -> None:
    c = RawClient(sasl_broker, port=sasl_broker.sasl_port)
    try:
        c.send_raw((600_000).to_bytes(4, "big") + b"\0" * 16)
        assert c.is_closed_by_peer()
    finally:
        c.close()


def test_plain_without_users_refuses_to_start(tmp_path) -> None:
    broker = BrokerProcess(tmp_path, {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{free_port()}",
                                      "security.inter.broker.protocol": "SASL_PLAINTEXT",
                                      "sasl.enabled.mechanisms": "PLAIN",
                                      "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    with pytest.raises(RuntimeError, match="enables PLAIN but has no PlainLoginModule"):
        broker.start(timeout=30)


def test_session_expires_after_connections_max_reauth_ms(tmp_path) -> None:
    plain, sasl = free_port(), free_port()
    with BrokerProcess(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                                  "sasl.enabled.mechanisms": "PLAIN",
                                  "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                                  "connections.max.reauth.ms": 1000}, port=plain) as broker:
        c = RawClient(broker, sasl)
        try:
            assert handshake(c).error_code == 0
            resp = authenticate(c, b"\0alice\0alice-secret", 1)
            assert resp.error_code == 0 and resp.session_lifetime_ms == 1000
            # Re-authenticating before expiry keeps the connection; a request after expiry closes it.
            assert handshake(c).error_code == 0
            assert authenticate(c, b"\0alice\0alice-secret", 1).error_code == 0
            assert metadata_works(c)
            time.sleep(1.5)
            c.correlation += 1
            req = MetadataRequest(topics=None, allow_auto_topic_creation=False)
            req.with_header(correlation_id=c.correlation, client_id="raw")
            c.send_raw(bytes(req.encode(version=4, header=True, framed=True)))
            assert c.is_closed_by_peer()
        finally:
            c.close()
        assert "session of User:alice expired" in broker.log_tail(50)


def test_clients_re_authenticate_before_their_session_ends(tmp_path) -> None:
    """librdkafka (KIP-368) and the broker's own client renew 1-second sessions on their connections."""
    import asyncio

    from confluent_kafka import Consumer, Producer
    from kafka.protocol.metadata import MetadataRequest as Metadata

    from strom.client.broker_client import BrokerClient
    from strom.security.client_security import ClientSecurity

    plain, sasl = free_port(), free_port()
    with BrokerProcess(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                                  "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                                  "connections.max.reauth.ms": 1000}, port=plain) as broker:
        auth = ClientAuth(f"127.0.0.1:{sasl}", "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
        topic = create_topic(auth)
        errors: list = []
        producer = Producer(auth.confluent(error_cb=errors.append))
        consumer = Consumer(auth.confluent(**{"group.id": "reauth", "auto.offset.reset": "earliest",
                                              "error_cb": errors.append}))
        consumer.subscribe([topic])
        sent = received = 0
        deadline = time.monotonic() + 4  # several session lifetimes
        while time.monotonic() < deadline:
            producer.produce(topic, b"%d" % sent)
            sent += 1
            producer.poll(0)
            msg = consumer.poll(0.05)
            received += msg is not None and not msg.error()
        assert producer.flush(15) == 0
        for _ in range(100):
            if received == sent:
                break
            msg = consumer.poll(0.2)
            received += msg is not None and not msg.error()
        consumer.close()
        assert (received, errors) == (sent, [])

        async def broker_client() -> int:
            client = BrokerClient("127.0.0.1", sasl, security=ClientSecurity("SASL_PLAINTEXT", None, "PLAIN",
                                                                             "admin", "admin-secret"))
            try:
                answers = 0
                for _ in range(8):
                    meta = await client.send(Metadata(topics=None, allow_auto_topic_creation=False), 4)
                    answers += len(meta.brokers)
                    await asyncio.sleep(0.4)
                return answers
            finally:
                await client.close()

        assert asyncio.run(broker_client()) == 8
        assert "expired" not in broker.log_path.read_text()


def test_re_authentication_may_not_change_the_principal(sasl_broker: BrokerProcess) -> None:
    c = RawClient(sasl_broker, sasl_broker.sasl_port)
    try:
        assert handshake(c).error_code == 0
        assert authenticate(c, b"\0alice\0alice-secret", 2).error_code == 0
        assert handshake(c).error_code == 0  # KIP-368: a new exchange on the same connection
        resp = authenticate(c, b"\0admin\0admin-secret", 2)
        assert resp.error_code == 58 and "Cannot change principals" in resp.error_message
        assert c.is_closed_by_peer()
    finally:
        c.close()


def test_a_second_handshake_in_the_middle_of_an_exchange_is_an_illegal_state(sasl_broker: BrokerProcess) -> None:
    c = RawClient(sasl_broker, sasl_broker.sasl_port)
    try:
        assert handshake(c, "SCRAM-SHA-256").error_code == 0
        assert authenticate(c, b"n,,n=alice,r=abcdefgh", 2).error_code == 0  # server-first: exchange under way
        assert handshake(c).error_code == 34
        assert c.is_closed_by_peer()
    finally:
        c.close()
