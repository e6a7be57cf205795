"""Dynamic broker configs in a ZooKeeper cluster: a cluster-default change reaches every broker.

The change is written once (to ``/config/brokers/<default>`` plus a ``/config/changes``
notification, as Kafka does); every broker applies it from the notification, and a restarted
broker reads it back from ZooKeeper.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from tests.integration.test_dynamic_broker_configs import default_cli

pytestmark = pytest.mark.cluster

BROKER = ConfigResource.Type.BROKER


def broker_value(admin: AdminClient, broker_id: int, key: str) -> tuple[str | None, ConfigSource]:
    """librdkafka sends a broker resource's DescribeConfigs to that broker itself."""
    res = ConfigResource(BROKER, str(broker_id))
    entry = admin.describe_configs([res])[res].result(15)[key]
    return entry.value, ConfigSource(entry.source)


def test_default_change_reaches_every_broker_and_survives_a_restart(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wanted = ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)

    # Sent to broker 1 only; broker 2 learns it from ZooKeeper's change notification.
    default_cli(cluster.broker(1), "--alter", "--add-config", "log.retention.ms=3600000")
    assert json.loads(cluster.zk.get("/config/brokers/<default>")[0]) == {
        "version": 1, "config": {"log.retention.ms": "3600000"}}
    changes = [json.loads(cluster.zk.get(f"/config/changes/{c}")[0]) for c in cluster.zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "brokers/<default>"} in changes
    for broker_id in (1, 2):
        cluster.wait_for(lambda b=broker_id: broker_value(admin, b, "log.retention.ms") == wanted, 30,
                         f"broker {broker_id} applying the cluster default")

    # A per-broker value on broker 2 beats the default there only.
    res = ConfigResource(BROKER, "2", incremental_configs=[
        ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)
    assert json.loads(cluster.zk.get("/config/brokers/2")[0])["config"] == {"message.max.bytes": "2000"}
    assert broker_value(admin, 2, "message.max.bytes") == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert broker_value(admin, 1, "message.max.bytes")[1] is ConfigSource.DEFAULT_CONFIG

    cluster.stop(2)
    cluster.start_broker(2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert cluster.wait_for(lambda: broker_value(admin, 2, "log.retention.ms"), 30, "broker 2 back") == wanted
    assert broker_value(admin, 2, "message.max.bytes") == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
