"""How the tools word librdkafka's errors for a person."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from strom.cli.common import describe_kafka_error


def test_waiting_for_a_dead_controller_is_explained() -> None:
    exc = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out"))
    text = describe_kafka_error(exc)
    assert text.startswith("No controller answered in time")
    assert "zookeeper.session.timeout.ms" in text
    other = describe_kafka_error(KafkaException(KafkaError(KafkaError._TIMED_OUT, "Local: Timed out")))
    assert other == "The broker did not answer in time."
