"""Brokers that talk to each other over SASL_SSL: the controller's requests, replica fetching and ISR changes all
go through the inter-broker listener with TLS (trusting the configured CA) and SASL/PLAIN as the broker user.
Clients use SCRAM-SHA-512 on the same listener; the user is created once and every broker knows it at once."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_cli import strom
from tests.support.broker import free_port
from tests.support.certs import CertificateAuthority
from tests.support.cluster import ClusterProcess
from tests.support.security import ClientAuth

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper]

BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
               'password="broker-secret" user_broker="broker-secret";')


def test_replication_over_a_sasl_ssl_inter_broker_listener(cluster_factory: Callable[..., ClusterProcess],
                                                           tmp_path) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    server = ca.issue("broker", "localhost", server=True, password="key-secret")
    cluster = cluster_factory(3, start=False, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.location": str(server.keystore),
        "ssl.key.password": "key-secret",
        "ssl.truststore.location": str(ca.ca_file),
        "min.insync.replicas": 2,
    })
    internal: dict[int, int] = {}
    for broker_id, broker in cluster.brokers.items():
        internal[broker_id] = free_port()
        broker.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{broker.port},"
                                         f"INTERNAL://127.0.0.1:{internal[broker_id]}")
    cluster.start()

    done = strom("configs", "--bootstrap-server", cluster.broker(1).bootstrap, "--alter", "--add-config",
                 "SCRAM-SHA-512=[password=app-secret]", "--entity-type", "users", "--entity-name", "app")
    assert done.returncode == 0, done.stderr
    auth = {i: ClientAuth(f"127.0.0.1:{port}", "SASL_SSL", "SCRAM-SHA-512", "app", "app-secret",
                          ca_file=str(ca.ca_file)) for i, port in internal.items()}

    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(auth[2].confluent())
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(timeout=60)
    for p in (0, 1):
        cluster.wait_isr(topic, p, [1, 2, 3])
    producer = Producer(auth[3].confluent(acks="all", **{"enable.idempotence": True}))
    values = [f"v{i}".encode() for i in range(200)]
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % 2)
    assert producer.flush(60) == 0
    for p in (0, 1):  # every acknowledged record reached both followers: replication went through SASL_SSL
        cluster.wait_isr(topic, p, [1, 2, 3])
    consumer = Consumer(auth[1].confluent(**{"group.id": "secure", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got: list[bytes] = []
    for _ in range(600):
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
            if len(got) == len(values):
                break
    consumer.close()
    assert sorted(got) == sorted(values)

    # Stop the leader of partition 0: the survivors elect a new one and keep serving over the same channels.
    leader = cluster.partition_state(topic, 0).leader
    cluster.stop(leader)
    cluster.wait_leader(topic, 0, not_in=[leader])
    survivor = next(i for i in internal if i != leader)
    again = Producer(auth[survivor].confluent(acks="all"))
    again.produce(topic, b"after", partition=0)
    assert again.flush(60) == 0
    for broker_id, broker in cluster.brokers.items():
        text = broker.log_path.read_text()
        assert "failed authentication" not in text, broker_id
        assert "authentication with" not in text, broker_id  # no inter-broker login failure


def test_scram_between_brokers_with_the_broker_user_created_in_zookeeper_first(
        cluster_factory: Callable[..., ClusterProcess]) -> None:
    """As with Kafka: `configs --zookeeper` creates the brokers' SCRAM user before they start; then the brokers
    authenticate to each other with SCRAM-SHA-512 on a SASL_PLAINTEXT inter-broker listener."""
    cluster = cluster_factory(3, start=False, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            'password="broker-secret";',
    })
    for broker in cluster.brokers.values():
        broker.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port},INTERNAL://127.0.0.1:{free_port()}"
    cluster.start_zookeeper()
    done = strom("configs", "--zookeeper", cluster.zookeeper_connect, "--alter", "--add-config",
                 "SCRAM-SHA-512=[iterations=8192,password=broker-secret]", "--entity-type", "users",
                 "--entity-name", "broker")
    assert done.returncode == 0, done.stderr
    done = strom("configs", "--zookeeper", cluster.zookeeper_connect, "--describe", "--entity-type", "users")
    assert "'broker' are SCRAM-SHA-512=iterations=8192" in done.stdout
    cluster.start()

    topic = f"scram-{uuid.uuid4().hex[:8]}"
    plain = ClientAuth(cluster.bootstrap)
    admin = AdminClient(plain.confluent())
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=60)
    cluster.wait_isr(topic, 0, [1, 2, 3])
    producer = Producer(plain.confluent(acks="all"))
    for i in range(50):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(60) == 0
    cluster.wait_isr(topic, 0, [1, 2, 3])
    for broker in cluster.brokers.values():
        assert "failed authentication" not in broker.log_path.read_text()
