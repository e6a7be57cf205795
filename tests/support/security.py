"""Client settings for secured listeners in each client library's own vocabulary, and produce/consume round trips.

`ClientAuth` describes how to reach one listener (protocol, SASL mechanism and user, TLS files); the
`round_trip_*` functions produce a few records with one client library and read them back with the same one.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class ClientAuth:
    bootstrap: str
    security_protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None  # CA that signed the broker's certificate
    cert_file: str | None = None  # client certificate (mTLS)
    key_file: str | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    def confluent(self, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        if self.uses_sasl:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})
        if self.uses_tls:
            conf["ssl.ca.location"] = self.ca_file
            if self.cert_file:
                conf.update({"ssl.certificate.location": self.cert_file, "ssl.key.location": self.key_file})
        return {**conf, **extra}

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def kafka_python(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "security_protocol": self.security_protocol}
        if self.uses_sasl:
            kw.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                       "sasl_plain_password": self.password})
        if self.uses_tls:
            kw["ssl_context"] = self.ssl_context()
        return kw

    def aiokafka(self) -> dict[str, Any]:
        return self.kafka_python()  # same keyword names

    def kcat(self) -> list[str]:
        args = ["-b", self.bootstrap, "-X", f"security.protocol={self.security_protocol}"]
        if self.uses_sasl:
            args += ["-X", f"sasl.mechanisms={self.mechanism}", "-X", f"sasl.username={self.username}",
                     "-X", f"sasl.password={self.password}"]
        if self.uses_tls:
            args += ["-X", f"ssl.ca.location={self.ca_file}"]
            if self.cert_file:
                args += ["-X", f"ssl.certificate.location={self.cert_file}", "-X", f"ssl.key.location={self.key_file}"]
        return args


def create_topic(auth: ClientAuth, partitions: int = 1, replication_factor: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(auth.confluent())
    admin.create_topics([NewTopic(name, partitions, replication_factor)])[name].result(timeout=30)
    return name


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def round_trip_confluent(auth: ClientAuth, topic: str, n: int = 5, **producer_conf: Any) -> list[bytes]:
    errors: list[Any] = []
    producer = Producer(auth.confluent(**producer_conf, error_cb=errors.append))
    for v in values(n, "confluent-kafka"):
        producer.produce(topic, v, on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(30) == 0, errors
    assert not errors, errors
    consumer = Consumer(auth.confluent(**{"group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
                if len(got) == n:
                    break
    finally:
        consumer.close()
    return got


def round_trip_kafka_python(auth: ClientAuth, topic: str, n: int = 5) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    producer = KafkaProducer(**auth.kafka_python())
    for v in values(n, "kafka-python"):
        producer.send(topic, v, partition=0)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(**auth.kafka_python(), enable_auto_commit=False, consumer_timeout_ms=10000)
    consumer.assign([KTP(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for m in consumer:
        got.append(m.value)
        if len(got) == n:
            break
    consumer.close()
    return got


def round_trip_aiokafka(auth: ClientAuth, topic: str, n: int = 5) -> list[bytes]:
    import aiokafka

    async def run() -> list[bytes]:
        p = aiokafka.AIOKafkaProducer(**auth.aiokafka())
        await p.start()
        try:
            for v in values(n, "aiokafka"):
                await p.send_and_wait(topic, v, partition=0)
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(**auth.aiokafka(), enable_auto_commit=False)
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out: list[bytes] = []
            while len(out) < n:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 20)
                for msgs in batch.values():
                    out.extend(m.value for m in msgs)
            return out
        finally:
            await c.stop()

    return asyncio.run(run())


def round_trip_kcat(auth: ClientAuth, topic: str, n: int = 5) -> list[bytes]:
    lines = "".join(v.decode() + "\n" for v in values(n, "kcat"))
    subprocess.run(["kcat", *auth.kcat(), "-P", "-t", topic, "-p", "0"], input=lines.encode(), check=True,
                   timeout=60, capture_output=True)
    out = subprocess.run(["kcat", *auth.kcat(), "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=60)
    return [line.encode() for line in out.stdout.decode().splitlines()]


ROUND_TRIPS = {"confluent-kafka": round_trip_confluent, "kafka-python": round_trip_kafka_python,
               "aiokafka": round_trip_aiokafka, "kcat": round_trip_kcat}


def start_sasl_broker(directory: Path, jaas: str, extra: dict[str, object] | None = None) -> Any:
    """A started broker with a PLAINTEXT listener (its `port`) and a SASL_PLAINTEXT one (`sasl_port`) offering
    PLAIN (users from `jaas`) and both SCRAM mechanisms."""
    from tests.support.broker import BrokerProcess, free_port

    plain, sasl = free_port(), free_port()
    broker = BrokerProcess(directory, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        **(extra or {}),
    }, port=plain)
    broker.sasl_port = sasl  # type: ignore[attr-defined]
    broker.start()
    return broker


def start_acl_sasl_broker(directory: Path, jaas: str, mechanisms: str = "PLAIN") -> Any:
    """A started broker whose only listener is SASL_PLAINTEXT (also between brokers), with the ACL
    authorizer on and `User:admin` as the one super user: everyone else gets what a test grants."""
    from tests.support.broker import BrokerProcess, free_port

    port = free_port()
    broker = BrokerProcess(directory, {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": mechanisms,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }, port=port)
    return broker.start()
