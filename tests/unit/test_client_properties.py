"""Kafka's Java client security keys become librdkafka's (client.properties of the tools, Spark's kafka.* options)."""

from __future__ import annotations

import pytest

from strom.security.client_properties import java_to_librdkafka
from strom.spark.options import StromOptionError, client_config

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        'password="alice-secret";')


def test_java_keys_are_translated_and_native_ones_kept() -> None:
    out = java_to_librdkafka({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM",
                              "ssl.truststore.location": "/etc/ca.pem", "ssl.keystore.location": "/etc/me.pem",
                              "ssl.endpoint.identification.algorithm": ""})
    assert out == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                   "sasl.password": "alice-secret", "ssl.ca.location": "/etc/ca.pem",
                   "ssl.certificate.location": "/etc/me.pem", "ssl.key.location": "/etc/me.pem",
                   "ssl.endpoint.identification.algorithm": "none"}
    assert java_to_librdkafka({"sasl.username": "bob", "sasl.jaas.config": JAAS})["sasl.username"] == "bob"


@pytest.mark.parametrize(("props", "message"), [
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type=JKS is not supported"),
    ({"sasl.jaas.config": "nonsense"}, "invalid sasl.jaas.config"),
])
def test_what_librdkafka_cannot_use_is_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        java_to_librdkafka(props)


def test_spark_kafka_options_take_the_java_security_keys() -> None:
    conf = client_config({"kafka.bootstrap.servers": "b:9094", "kafka.security.protocol": "SASL_SSL",
                          "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": JAAS,
                          "kafka.ssl.truststore.location": "/etc/ca.pem"}, {})
    assert conf["sasl.username"] == "alice" and conf["ssl.ca.location"] == "/etc/ca.pem"
    with pytest.raises(StromOptionError, match="JKS"):
        client_config({"kafka.bootstrap.servers": "b:9094", "kafka.ssl.keystore.type": "JKS"}, {})
