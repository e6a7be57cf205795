"""TLS listeners next to plaintext ones: SSL with client certificates (mTLS principals), SASL_SSL with SCRAM, every
client library, and the failures a wrong client meets (plaintext on a TLS port, TLS on a plaintext port, a
certificate from an unknown CA) while the broker keeps serving everyone else."""

from __future__ import annotations

import shutil
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.integration.test_cli import strom
from tests.integration.test_sasl import PLAIN_JAAS
from tests.support.broker import BrokerProcess, free_port
from tests.support.certs import CertificateAuthority, Identity
from tests.support.security import ROUND_TRIPS, ClientAuth, create_topic


@dataclass
class TlsBroker:
    broker: BrokerProcess
    ports: dict[str, int]
    ca: CertificateAuthority
    alice: Identity
    stranger: Identity  # signed by a CA the broker does not trust

    def auth(self, listener: str, **kw: object) -> ClientAuth:
        protocol = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_SSL": "SASL_SSL",
                    "SASL_PLAINTEXT": "SASL_PLAINTEXT"}[listener]
        return ClientAuth(f"127.0.0.1:{self.ports[listener]}", protocol, ca_file=str(self.ca.ca_file), **kw)

    def ssl_auth(self, who: Identity | None = None) -> ClientAuth:
        who = who or self.alice
        return self.auth("SSL", cert_file=str(who.cert), key_file=str(who.key))


def start_tls_broker(tmp: Path, extra: dict[str, str] | None = None) -> TlsBroker:
    ca = CertificateAuthority(tmp / "certs")
    broker_id = ca.issue("broker", "localhost", server=True, password="key-secret")
    alice = ca.issue("alice", "alice", ou="Engineering")
    stranger = CertificateAuthority(tmp / "other", "Other CA").issue("stranger", "alice", ou="Engineering")
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")}
    broker = BrokerProcess(tmp, {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.location": str(broker_id.keystore),
        "ssl.key.password": "key-secret",
        "ssl.truststore.location": str(ca.ca_file),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **(extra or {}),
    }, port=ports["PLAINTEXT"])
    broker.start()
    return TlsBroker(broker, ports, ca, alice, stranger)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    t = start_tls_broker(tmp_path_factory.mktemp("tls"))
    done = strom("configs", "--bootstrap-server", t.broker.bootstrap, "--alter", "--add-config",
                 "SCRAM-SHA-512=[password=bob-secret]", "--entity-type", "users", "--entity-name", "bob")
    assert done.returncode == 0, done.stderr
    try:
        yield t
    finally:
        t.broker.close()


def test_four_security_protocols_side_by_side(tls: TlsBroker) -> None:
    auths = [tls.auth("PLAINTEXT"), tls.ssl_auth(),
             tls.auth("SASL_SSL", mechanism="SCRAM-SHA-512", username="bob", password="bob-secret"),
             tls.auth("SASL_PLAINTEXT", mechanism="PLAIN", username="alice", password="alice-secret")]
    topic = create_topic(auths[0])
    for i, auth in enumerate(auths):
        p = Producer(auth.confluent())
        p.produce(topic, f"via-{auth.security_protocol}".encode(), partition=0)
        assert p.flush(30) == 0
        meta = AdminClient(auth.confluent()).list_topics(timeout=10)
        assert [b.port for b in meta.brokers.values()] == [int(auth.bootstrap.rsplit(":", 1)[1])], i
    assert len(ROUND_TRIPS["confluent-kafka"](auths[1], topic, 1)) == 1


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_every_client_over_ssl_with_a_client_certificate(tls: TlsBroker, client: str) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    auth = tls.ssl_auth()
    assert ROUND_TRIPS[client](auth, create_topic(auth), 4) == [f"{client}-{i}".encode() for i in range(4)]


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_every_client_over_sasl_ssl_with_scram_sha_512(tls: TlsBroker, client: str) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    auth = tls.auth("SASL_SSL", mechanism="SCRAM-SHA-512", username="bob", password="bob-secret")
    assert ROUND_TRIPS[client](auth, create_topic(auth), 4) == [f"{client}-{i}".encode() for i in range(4)]


def test_large_fetches_over_tls_are_copied_intact(tls: TlsBroker) -> None:
    """Regions above the sendfile threshold go through the TLS copy path in chunks."""
    auth = tls.ssl_auth()
    topic = create_topic(auth)
    payloads = [bytes([i]) * 40_000 + i.to_bytes(4, "big") for i in range(60)]
    p = Producer(auth.confluent(**{"linger.ms": 50, "batch.size": 4_000_000}))
    for v in payloads:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0
    c = Consumer(auth.confluent(**{"group.id": "big", "auto.offset.reset": "earliest",
                                   "fetch.max.bytes": 8_000_000, "max.partition.fetch.bytes": 8_000_000}))
    c.subscribe([topic])
    got: list[bytes] = []
    for _ in range(300):
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
            if len(got) == len(payloads):
                break
    c.close()
    assert got == payloads


def confluent_fails(auth: ClientAuth) -> list[str]:
    errors: list = []
    admin = AdminClient(auth.confluent(error_cb=errors.append, log_level=0))
    for _ in range(20):
        admin.poll(0.25)
        if errors:
            break
    with pytest.raises(Exception):  # noqa: B017 - no metadata: the reason is in errors
        admin.list_topics(timeout=1)
    return [e.str() for e in errors]


def closed_without_a_kafka_answer(s: socket.socket) -> bool:
    """Read to the end: at most a TLS alert record (content type 21), then the broker closes."""
    received = b""
    try:
        while chunk := s.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    return received == b"" or received[0] == 21


def test_a_plaintext_client_on_a_tls_port_fails_without_a_stack_trace(tls: TlsBroker) -> None:
    plain_on_tls = ClientAuth(f"127.0.0.1:{tls.ports['SSL']}")
    assert confluent_fails(plain_on_tls)
    with socket.create_connection(("127.0.0.1", tls.ports["SASL_SSL"]), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")  # ApiVersions v0
        assert closed_without_a_kafka_answer(s)
    assert len(ROUND_TRIPS["confluent-kafka"](tls.ssl_auth(), create_topic(tls.ssl_auth()), 1)) == 1
    log = tls.broker.log_path.read_text()
    assert "Traceback" not in log
    assert "TLS handshake on listener" in log and "plaintext client on a TLS port" in log


def test_a_tls_client_on_a_plaintext_port_fails_clearly(tls: TlsBroker) -> None:
    tls_on_plain = ClientAuth(tls.broker.bootstrap, "SSL", ca_file=str(tls.ca.ca_file))
    errors = confluent_fails(tls_on_plain)
    assert any("SSL" in e or "ssl" in e for e in errors), errors
    assert len(ROUND_TRIPS["confluent-kafka"](tls.auth("PLAINTEXT"), create_topic(tls.auth("PLAINTEXT")), 1)) == 1
    assert "Traceback" not in tls.broker.log_path.read_text()


@pytest.mark.parametrize("case", ["untrusted CA", "no certificate"])
def test_client_certificates_are_required_and_verified(tls: TlsBroker, case: str) -> None:
    auth = tls.ssl_auth(tls.stranger) if case == "untrusted CA" else tls.auth("SSL")
    assert confluent_fails(auth)
    ctx = ssl.create_default_context(cafile=str(tls.ca.ca_file))
    if case == "untrusted CA":
        ctx.load_cert_chain(str(tls.stranger.cert), str(tls.stranger.key))
    with socket.create_connection(("127.0.0.1", tls.ports["SSL"]), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError)):
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
            if not s.recv(4):  # TLS 1.3: the refusal arrives after the handshake
                raise ConnectionError("closed")
    assert len(ROUND_TRIPS["confluent-kafka"](tls.ssl_auth(), create_topic(tls.ssl_auth()), 1)) == 1


@pytest.mark.parametrize(("user", "password"), [("bob", "nope"), ("nobody", "bob-secret")])
def test_wrong_scram_password_or_unknown_user_over_sasl_ssl(tls: TlsBroker, user: str, password: str) -> None:
    errors = confluent_fails(tls.auth("SASL_SSL", mechanism="SCRAM-SHA-512", username=user, password=password))
    assert any("invalid credentials" in e for e in errors), errors
    auth = tls.auth("SASL_SSL", mechanism="SCRAM-SHA-512", username="bob", password="bob-secret")
    assert len(ROUND_TRIPS["confluent-kafka"](auth, create_topic(auth), 1)) == 1


def test_principal_mapping_rules_apply_to_client_certificates(tmp_path: Path) -> None:
    """A rule that maps alice's DN lets her in; a certificate no rule maps is refused, naming the DN."""
    t = start_tls_broker(tmp_path, {"listener.name.ssl.ssl.principal.mapping.rules":
                                    "RULE:^CN=([a-z]+),OU=Engineering,O=Strom Test,C=DE$/$1/U"})
    try:
        assert len(ROUND_TRIPS["confluent-kafka"](t.ssl_auth(), create_topic(t.auth("PLAINTEXT")), 1)) == 1
        bad = t.ca.issue("robot", "robot-7")  # no OU: the rule does not match and there is no DEFAULT
        assert confluent_fails(t.ssl_auth(bad))
        log = t.broker.log_path.read_text()
        assert "No rules apply to CN=robot-7,O=Strom Test,C=DE" in log
    finally:
        t.broker.close()


def test_inline_pem_key_store_and_trust_store(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    me = ca.issue("broker", "localhost", server=True)
    port, plain = free_port(), free_port()
    with BrokerProcess(tmp_path, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{port}",
        # as a properties file holds PEM text: lines joined by continuations
        "listener.name.ssl.ssl.keystore.key": me.key.read_text().replace("\n", " "),
        "listener.name.ssl.ssl.keystore.certificate.chain": me.cert.read_text().replace("\n", " "),
        "listener.name.ssl.ssl.truststore.certificates": ca.ca_file.read_text().replace("\n", " "),
        "listener.name.ssl.ssl.client.auth": "requested",
    }, port=plain) as broker:
        anonymous = ClientAuth(f"127.0.0.1:{port}", "SSL", ca_file=str(ca.ca_file))
        assert len(ROUND_TRIPS["confluent-kafka"](anonymous, create_topic(anonymous), 2)) == 2
        assert "Traceback" not in broker.log_path.read_text()


@pytest.mark.parametrize(("extra", "message"), [
    ({"ssl.key.password": "wrong"}, "cannot load the key store"),
    ({"ssl.keystore.location": "/nonexistent/keystore.pem"}, "/nonexistent/keystore.pem does not exist"),
    ({"ssl.keystore.location": ""}, "has no key store"),
    ({"listener.name.ssl.ssl.principal.mapping.rules": "RULE:broken"}, "invalid rule"),
])
def test_bad_tls_settings_stop_the_broker_with_a_reason(tmp_path: Path, extra: dict[str, str],
                                                        message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        start_tls_broker(tmp_path, extra)


def test_the_cli_over_sasl_ssl_and_mtls_with_java_client_properties(tls: TlsBroker, tmp_path: Path) -> None:
    """librdkafka-based tools and the ones speaking the protocol themselves read the same client.properties."""
    scram = tmp_path / "scram.properties"
    scram.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     "username=\"bob\" password=\"bob-secret\";\n"
                     f"ssl.truststore.type=PEM\nssl.truststore.location={tls.ca.ca_file}\n")
    mtls = tmp_path / "mtls.properties"
    mtls.write_text(f"security.protocol=SSL\nssl.truststore.location={tls.ca.ca_file}\n"
                    f"ssl.keystore.location={tls.alice.cert.parent / 'alice.keystore.pem'}\n")
    for props, port in ((scram, tls.ports["SASL_SSL"]), (mtls, tls.ports["SSL"])):
        bootstrap = f"127.0.0.1:{port}"
        done = strom("topics", "--bootstrap-server", bootstrap, "--command-config", str(props), "--list")
        assert done.returncode == 0, done.stderr
        done = strom("configs", "--bootstrap-server", bootstrap, "--command-config", str(props), "--describe",
                     "--entity-type", "brokers", "--entity-default")
        assert done.returncode == 0, done.stderr
        assert "Default configs for brokers in the cluster are" in done.stdout
