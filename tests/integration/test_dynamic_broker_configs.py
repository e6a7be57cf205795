"""Dynamic broker configs on one node, through confluent-kafka's AdminClient against a real broker.

Broker "0" is this broker's own layer, "" the cluster default; both are applied live and kept in
the embedded metadata store across a restart. librdkafka (and kafka-python) refuse the resource
name "", so the cluster default is changed through `strom configs --entity-default`, which sends
the same requests kafka-configs.sh does.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from typer.testing import CliRunner

from strom.cli.main import app
from tests.integration.test_admin_and_retention import watermarks
from tests.integration.test_produce_consume import new_topic, produce

BROKER = ConfigResource.Type.BROKER
TOPIC = ConfigResource.Type.TOPIC


def describe(admin: AdminClient, kind: ConfigResource.Type, name: str) -> dict:
    res = ConfigResource(kind, name)
    return admin.describe_configs([res])[res].result(15)


def alter(admin: AdminClient, name: str, validate_only: bool = False, **ops: str | None) -> None:
    """IncrementalAlterConfigs on broker `name`: key=value sets, key=None deletes (dots as __)."""
    entries = [
        ConfigEntry(k.replace("__", "."), v,
                    incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET)
        for k, v in ops.items()
    ]
    res = ConfigResource(BROKER, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(15)


def default_cli(b, *args: str, exit_code: int = 0) -> str:  # noqa: ANN001
    """`strom configs --entity-type brokers --entity-default ...` in this process."""
    result = CliRunner().invoke(app, ["configs", "--bootstrap-server", b.bootstrap, "--entity-type", "brokers",
                                      "--entity-default", *args])
    assert result.exit_code == exit_code, result.output
    return result.output


def error_of(call) -> KafkaError:  # noqa: ANN001
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


def source(entry) -> ConfigSource:  # noqa: ANN001
    return ConfigSource(entry.source)


def test_dynamic_keys_are_reported_writable_with_their_source(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"num.io.threads": 4})
    cfg = describe(AdminClient({"bootstrap.servers": b.bootstrap}), BROKER, "0")
    for key in ("advertised.listeners", "log.cleaner.threads", "log.retention.ms", "message.max.bytes",
                "num.io.threads", "log.segment.bytes"):
        assert cfg[key].is_read_only is False, key
    for key in ("num.partitions", "log.dirs", "broker.id", "log.retention.hours"):
        assert cfg[key].is_read_only is True, key
    assert source(cfg["num.io.threads"]) is ConfigSource.STATIC_BROKER_CONFIG
    assert source(cfg["message.max.bytes"]) is ConfigSource.DEFAULT_CONFIG and cfg["message.max.bytes"].is_default


def test_alter_apply_validate_and_persist(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"log.retention.check.interval.ms": 200, "log.retention.hours": 100})
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    plain = new_topic(b)
    own = new_topic(b, config={"retention.ms": "5000"})

    # The cluster default wins over server.properties; topics without an override follow it.
    out = default_cli(b, "--alter", "--add-config", "log.retention.ms=3600000,message.max.bytes=3000")
    assert "Completed updating default config for brokers in the cluster." in out
    cfg = describe(a, BROKER, "0")
    assert (cfg["log.retention.ms"].value, source(cfg["log.retention.ms"])) == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    lines = default_cli(b, "--describe").splitlines()
    assert lines[0] == "Default configs for brokers in the cluster are:"
    assert [line.split()[0] for line in lines[1:]] == ["log.retention.ms=3600000", "message.max.bytes=3000"]
    assert "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000" in lines[1]
    ret = describe(a, TOPIC, plain)["retention.ms"]
    assert (ret.value, source(ret)) == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    # confluent-kafka keys synonyms by name, so only one log.retention.hours row survives there.
    first = next(iter(ret.synonyms.values()))
    assert (first.name, first.value, source(first)) == (
        "log.retention.ms", "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert "log.retention.hours" in ret.synonyms
    assert describe(a, TOPIC, own)["retention.ms"].value == "5000"

    # Per broker wins over the cluster default, and reaches existing logs at once.
    alter(a, "0", message__max__bytes="2000")
    mmb = describe(a, BROKER, "0")["message.max.bytes"]
    assert (mmb.value, source(mmb)) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "retries": 0})
    errors: list = []
    p.produce(plain, value=b"x" * 2500, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    produce(b, plain, [{"value": b"y" * 1000}])

    # Errors as Kafka answers them; validate_only changes nothing.
    err = error_of(lambda: alter(a, "0", num__partitions="3"))
    assert err.code() == KafkaError.INVALID_REQUEST and "dynamically" in err.str()
    err = error_of(lambda: alter(a, "0", log__cleaner__threads="lots"))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = error_of(lambda: alter(a, "0", log__segment__bytes="10"))
    assert err.code() == KafkaError.INVALID_CONFIG
    out = default_cli(b, "--alter", "--add-config", "advertised.listeners=PLAINTEXT://127.0.0.1:1", exit_code=1)
    assert "broker id must be specified" in out
    alter(a, "0", validate_only=True, log__cleaner__threads="2")
    assert describe(a, BROKER, "0")["log.cleaner.threads"].value == "1"
    alter(a, "0", log__cleaner__threads="2", num__io__threads="16")
    assert describe(a, BROKER, "0")["log.cleaner.threads"].value == "2"

    # Legacy AlterConfigs replaces the whole per-broker layer.
    res = ConfigResource(BROKER, "0", set_config={"log.cleaner.threads": "3"})
    a.alter_configs([res])[res].result(15)
    cfg = describe(a, BROKER, "0")
    assert cfg["log.cleaner.threads"].value == "3"
    assert (cfg["message.max.bytes"].value, source(cfg["message.max.bytes"])) == (
        "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)

    # Both layers survive a restart (the embedded metadata store keeps them).
    b.restart()
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    cfg = describe(a, BROKER, "0")
    assert (cfg["log.cleaner.threads"].value, source(cfg["log.cleaner.threads"])) == (
        "3", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert (cfg["log.retention.ms"].value, source(cfg["log.retention.ms"])) == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert describe(a, TOPIC, plain)["retention.ms"].value == "3600000"
    default_cli(b, "--alter", "--delete-config", "log.retention.ms")
    assert describe(a, TOPIC, plain)["retention.ms"].value == str(100 * 3_600_000)


def test_existing_logs_follow_a_dynamic_retention_default(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory({"log.retention.check.interval.ms": 200})
    topic = new_topic(b)
    default_cli(b, "--alter", "--add-config", "log.segment.bytes=1024")  # new segments roll small from now on
    for _ in range(8):
        produce(b, topic, [{"value": b"z" * 600}])
    low, high = watermarks(b, topic)
    assert (low, high) == (0, 8)
    default_cli(b, "--alter", "--add-config", "log.retention.bytes=1200")
    deadline = time.monotonic() + 30
    while watermarks(b, topic)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert watermarks(b, topic)[0] > 0, b.log_tail()


def test_every_kafka_dynamic_key_is_accepted_and_stored(broker_factory) -> None:  # noqa: ANN001
    """Keys Kafka 3.9 lists as dynamic (per-broker or cluster-wide) are accepted and kept, even those with no
    effect in Strom, so tools and test suites written against Kafka can set them."""
    b = broker_factory()
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    alter(a, "0", sasl__kerberos__min__time__before__relogin="120000",
          leader__replication__throttled__rate="1048576", background__threads="12",
          sasl__login__refresh__window__factor="0.9", producer__id__expiration__ms="3600000")
    cfg = describe(a, BROKER, "0")
    for key, value in (("sasl.kerberos.min.time.before.relogin", "120000"),
                       ("leader.replication.throttled.rate", "1048576"), ("background.threads", "12"),
                       ("sasl.login.refresh.window.factor", "0.9"), ("producer.id.expiration.ms", "3600000")):
        assert (cfg[key].value, source(cfg[key]), cfg[key].is_read_only) == (
            value, ConfigSource.DYNAMIC_BROKER_CONFIG, False), key
    res = ConfigResource(BROKER, "0", set_config={"sasl.kerberos.service.name": "kafka",
                                                  "max.connections": "1000"})
    a.alter_configs([res])[res].result(15)  # legacy AlterConfigs: replaces the layer
    cfg = describe(a, BROKER, "0")
    assert cfg["sasl.kerberos.service.name"].value == "kafka" and cfg["max.connections"].value == "1000"
    assert source(cfg["sasl.kerberos.min.time.before.relogin"]) is ConfigSource.DEFAULT_CONFIG

    # Values are still checked against Kafka's types; TLS stores only per listener, as Kafka; per-broker keys
    # are refused at the cluster default.
    err = error_of(lambda: alter(a, "0", sasl__kerberos__min__time__before__relogin="soon"))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = error_of(lambda: alter(a, "0", ssl__keystore__location="/nowhere.pem"))
    assert err.code() == KafkaError.INVALID_REQUEST and "per-listener" in err.str()
    out = default_cli(b, "--alter", "--add-config", "sasl.kerberos.min.time.before.relogin=1", exit_code=1)
    assert "broker id must be specified" in out
    default_cli(b, "--alter", "--add-config", "log.cleaner.io.max.bytes.per.second=1000000.0")

    b.restart()
    cfg = describe(AdminClient({"bootstrap.servers": b.bootstrap}), BROKER, "0")
    assert (cfg["sasl.kerberos.service.name"].value, source(cfg["sasl.kerberos.service.name"])) == (
        "kafka", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert (cfg["log.cleaner.io.max.bytes.per.second"].value,
            source(cfg["log.cleaner.io.max.bytes.per.second"])) == (
        "1000000.0", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
