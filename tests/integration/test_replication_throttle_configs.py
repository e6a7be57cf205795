"""The replication throttle configs (KIP-73) through the Admin API: bad throttled-replica lists and bad
rates get INVALID_CONFIG, as Kafka answers; good ones are stored and described."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.integration.test_dynamic_broker_configs import BROKER, TOPIC, alter, describe

KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
BAD_LISTS = ("0", "a:1", "1:2:3", "*,0:1", "0;1")


def error_of(fn: Any) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        fn()
    return info.value.args[0]


def alter_topic(admin: AdminClient, topic: str, key: str, value: str) -> None:
    res = ConfigResource(TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)


@pytest.mark.parametrize("key", KEYS)
def test_bad_throttled_replica_lists_get_invalid_config(broker: Any, key: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for value in BAD_LISTS:
        name = f"t-{uuid.uuid4().hex[:8]}"
        err = error_of(lambda n=name, v=value: admin.create_topics([NewTopic(n, 1, 1, config={key: v})])[n]
                       .result(15))
        assert err.code() == KafkaError.INVALID_CONFIG, (value, err)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 2, 1, config={key: "0:0, 1:0"})])[topic].result(15)
    assert describe(admin, TOPIC, topic)[key].value == "0:0,1:0"
    for value in BAD_LISTS:
        err = error_of(lambda v=value: alter_topic(admin, topic, key, v))
        assert err.code() == KafkaError.INVALID_CONFIG, (value, err)
    alter_topic(admin, topic, key, "*")
    assert describe(admin, TOPIC, topic)[key].value == "*"


@pytest.mark.parametrize("key", ["leader.replication.throttled.rate", "follower.replication.throttled.rate"])
def test_bad_rates_get_invalid_config(broker: Any, key: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for value in ("-1", "fast", "1.5"):
        err = error_of(lambda v=value: alter(admin, "0", **{key.replace(".", "__"): v}))
        assert err.code() == KafkaError.INVALID_CONFIG, (value, err)
    alter(admin, "0", **{key.replace(".", "__"): "1048576"})
    assert describe(admin, BROKER, "0")[key].value == "1048576"
    alter(admin, "0", **{key.replace(".", "__"): None})
