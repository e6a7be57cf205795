"""Broker and topic configuration: server.properties parsing, validation, DescribeConfigs."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    DynamicUpdateError,
    InvalidTopicName,
    describe_topic_configs,
    effective_topic_configs,
    parse_properties,
    validate_topic_configs,
    validate_topic_name,
)

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "server.properties"
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_defaults() -> None:
    cfg = BrokerConfig.load(None, [])
    assert cfg.get("broker.id") == 0
    assert cfg.get("num.partitions") == 1
    assert cfg.get("log.segment.bytes") == 1073741824
    assert cfg.get("auto.create.topics.enable") is True
    assert cfg.get("log.retention.ms") == 168 * 3_600_000
    assert cfg.get("log.roll.ms") == 168 * 3_600_000
    assert cfg.get("message.max.bytes") == 1048588
    assert cfg.get("offsets.topic.replication.factor") == 3
    assert cfg.get("zookeeper.connect") == ""
    assert cfg.get("cluster.id") is None
    assert cfg["fetch.max.bytes"] == 57671680
    assert [(ep.host, ep.port) for ep in cfg.listeners()] == [("127.0.0.1", 9092)]
    assert cfg.advertised_host_port() == ("127.0.0.1", 9092)
    assert cfg.log_dirs() == ["./data"]


def test_properties_syntax(tmp_path: Path) -> None:
    text = (
        "# comment\n"
        "! also a comment\n"
        "\n"
        "broker.id=3\n"
        "num.partitions : 4\n"
        "   log.retention.hours   =  24  \n"
        "log.dirs=/a,\\\n"
        "         /b\n"
        "cluster.id=abc\\u0041\n"
    )
    cfg = BrokerConfig.load(write(tmp_path, text), [])
    assert cfg.get("broker.id") == 3
    assert cfg.get("num.partitions") == 4
    assert cfg.get("log.retention.ms") == 24 * 3_600_000
    assert cfg.log_dirs() == ["/a", "/b"]
    assert cfg.get("cluster.id") == "abcA"


def test_parse_properties_edge_cases() -> None:
    props = parse_properties("a b\nc==d\ne:\nf\\=g=h\n# x=y\nc=last\n")
    assert props == {"a": "b", "c": "last", "e": "", "f=g": "h"}


def test_overrides_win_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, "num.partitions=4\nlisteners=PLAINTEXT://0.0.0.0:9092\n"
                           "advertised.listeners=PLAINTEXT://broker1:19092\n")
    cfg = BrokerConfig.load(path, ["num.partitions=8", "log.dirs=/x"])
    assert cfg.get("num.partitions") == 8
    assert cfg.log_dirs() == ["/x"]
    assert [(ep.host, ep.port) for ep in cfg.listeners()] == [("0.0.0.0", 9092)]
    assert cfg.advertised_host_port() == ("broker1", 19092)
    with pytest.raises(ConfigError, match="expected key=value"):
        BrokerConfig.load(None, ["num.partitions"])


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, ["log.segmnt.bytes=100"])
    assert "Unknown configuration 'log.segmnt.bytes'" in str(e.value)
    assert "log.segment.bytes" in str(e.value)  # did-you-mean hint


def test_invalid_values_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(write(tmp_path, "num.partitions=abc\n"), [])
    assert str(e.value) == "Invalid value 'abc' for configuration 'num.partitions': must be an integer"
    cases = {
        "num.partitions=0": "must be at least 1",
        "auto.create.topics.enable=yes": "must be true or false",
        "log.cleanup.policy=delete,archive": "compact, delete",
        "log.message.timestamp.type=Now": "CreateTime",
        "log.segment.bytes=99999999999": "32-bit",
        "log.retention.ms=0": "unlimited",
        "log.cleaner.min.cleanable.ratio=x": "number",
        "listeners=PLAINTEXT://nohost": "host:port",
    }
    for override, reason in cases.items():
        with pytest.raises(ConfigError, match=reason) as e:
            BrokerConfig.load(None, [override])
        assert f"'{override.split('=')[0]}'" in str(e.value)


def test_retention_precedence() -> None:
    assert BrokerConfig.load(None, ["log.retention.hours=1"]).get("log.retention.ms") == 3_600_000
    cfg = BrokerConfig.load(None, ["log.retention.hours=1", "log.retention.minutes=2"])
    assert cfg.get("log.retention.ms") == 120_000
    cfg = BrokerConfig.load(None, ["log.retention.hours=1", "log.retention.minutes=2", "log.retention.ms=5000"])
    assert cfg.get("log.retention.ms") == 5000
    assert BrokerConfig.load(None, ["log.retention.ms=-1"]).get("log.retention.ms") == -1
    assert BrokerConfig.load(None, ["log.retention.hours=-1"]).get("log.retention.ms") == -1
    assert BrokerConfig.load(None, ["log.roll.hours=2"]).get("log.roll.ms") == 7_200_000
    assert BrokerConfig.load(None, ["log.roll.ms=10"]).get("log.roll.ms") == 10


def test_aliases_and_listeners() -> None:
    cfg = BrokerConfig.load(None, ["node.id=7"])
    assert cfg.get("broker.id") == 7 and cfg.get("node.id") == 7
    with pytest.raises(ConfigError, match="node.id"):
        BrokerConfig.load(None, ["node.id=7", "broker.id=8"])
    assert BrokerConfig.load(None, ["log.dir=/d"]).log_dirs() == ["/d"]
    cfg = BrokerConfig.load(None, ["listeners=localhost:9093"])
    assert [(ep.host, ep.port) for ep in cfg.listeners()] == [("localhost", 9093)]
    cfg = BrokerConfig.load(None, ["listeners=SSL://h:1,PLAINTEXT://[::1]:9094"])
    assert cfg.advertised_host_port() == ("::1", 9094)  # the inter-broker (PLAINTEXT) listener
    with pytest.raises(ConfigError, match="0.0.0.0"):
        BrokerConfig.load(None, ["listeners=PLAINTEXT://0.0.0.0:9092"])


def test_broker_items_for_describe_configs() -> None:
    cfg = BrokerConfig.load(None, ["num.partitions=3"])
    items = {e.name: e for e in cfg.items()}
    assert set(items) == set(BROKER_CONFIGS)
    np = items["num.partitions"]
    assert (np.value, np.is_default, np.is_sensitive, np.read_only) == ("3", False, False, True)
    assert np.source == ConfigSource.STATIC_BROKER_CONFIG and np.config_type == ConfigType.INT
    seg = items["log.segment.bytes"]
    assert (seg.value, seg.is_default, seg.source) == ("1073741824", True, ConfigSource.DEFAULT_CONFIG)
    assert items["log.retention.ms"].value is None  # unset, as Kafka shows it
    assert items["log.cleanup.policy"].value == "delete"
    assert items["auto.create.topics.enable"].value == "true"


def test_topic_defaults_follow_broker() -> None:
    cfg = BrokerConfig.load(None, ["log.segment.bytes=1048576", "log.retention.minutes=10", "message.max.bytes=2000"])
    d = cfg.topic_defaults()
    assert set(d) == set(TOPIC_CONFIGS)
    assert d["segment.bytes"] == "1048576"
    assert d["retention.ms"] == "600000"
    assert d["max.message.bytes"] == "2000"
    assert d["segment.ms"] == "604800000"
    assert d["cleanup.policy"] == "delete"
    assert d["message.timestamp.type"] == "CreateTime"
    assert d["min.cleanable.dirty.ratio"] == "0.5"
    assert d["flush.messages"] == str(2**63 - 1)
    assert d["compression.type"] == "producer"


def test_validate_topic_configs() -> None:
    assert validate_topic_configs({"cleanup.policy": "compact, delete", "retention.ms": "-1", "preallocate": "TRUE"}) == {
        "cleanup.policy": "compact,delete",
        "retention.ms": "-1",
        "preallocate": "true",
    }
    assert validate_topic_configs({"retention.ms": None}) == {}
    with pytest.raises(ConfigError, match="'retention.mss'"):
        validate_topic_configs({"retention.mss": "1"})
    bad = {
        "retention.ms": "-2",
        "segment.bytes": "10",
        "compression.type": "brotli",
        "min.cleanable.dirty.ratio": "1.5",
        "cleanup.policy": "forever",
        "max.message.bytes": "lots",
        "unclean.leader.election.enable": "maybe",
    }
    for key, value in bad.items():
        with pytest.raises(ConfigError) as e:
            validate_topic_configs({key: value})
        assert f"Invalid value '{value}' for configuration '{key}'" in str(e.value)


def test_describe_topic_configs_sources() -> None:
    cfg = BrokerConfig.load(None, ["log.retention.hours=24", "log.segment.bytes=1048576"])
    entries = {e.name: e for e in describe_topic_configs(cfg, {"cleanup.policy": "compact", "segment.bytes": "2048"})}
    assert set(entries) == set(TOPIC_CONFIGS)

    cp = entries["cleanup.policy"]
    assert (cp.value, cp.source, cp.is_default, cp.read_only) == ("compact", 1, False, False)
    assert cp.config_type == ConfigType.LIST and cp.documentation

    seg = entries["segment.bytes"]
    assert (seg.value, seg.source) == ("2048", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in seg.synonyms] == [
        ("segment.bytes", "2048", 1),
        ("log.segment.bytes", "1048576", 4),
        ("log.segment.bytes", "1073741824", 5),
    ]

    ret = entries["retention.ms"]
    assert (ret.value, ret.source, ret.is_default) == ("86400000", ConfigSource.STATIC_BROKER_CONFIG, False)
    assert ret.config_type == ConfigType.LONG
    assert [(s.name, s.source) for s in ret.synonyms] == [("log.retention.hours", 4), ("log.retention.hours", 5)]

    mmb = entries["max.message.bytes"]
    assert (mmb.value, mmb.source, mmb.is_default) == ("1048588", ConfigSource.DEFAULT_CONFIG, True)
    assert mmb.config_type == ConfigType.INT
    assert entries["preallocate"].config_type == ConfigType.BOOLEAN
    assert entries["min.cleanable.dirty.ratio"].config_type == ConfigType.DOUBLE


def test_effective_topic_configs_typed() -> None:
    cfg = BrokerConfig.load(None, ["log.retention.ms=1000"])
    eff = effective_topic_configs(cfg, {"segment.bytes": "4096", "cleanup.policy": "compact,delete"})
    assert eff["segment.bytes"] == 4096
    assert eff["retention.ms"] == 1000
    assert eff["cleanup.policy"] == ["compact", "delete"]
    assert eff["unclean.leader.election.enable"] is False


def test_topic_name_rules() -> None:
    for ok in ("a", "my-topic.v1_2", "x" * 249, "__consumer_offsets"):
        validate_topic_name(ok)
    for bad in ("", ".", "..", "x" * 250, "bad/name", "spaces here", "ünïcode"):
        with pytest.raises(InvalidTopicName):
            validate_topic_name(bad)
    assert issubclass(InvalidTopicName, ConfigError)


def test_shipped_server_properties_loads() -> None:
    cfg = BrokerConfig.load(str(REPO / "config" / "server.properties"), [])
    assert [(ep.host, ep.port) for ep in cfg.listeners()] == [("127.0.0.1", 9092)]
    assert cfg.log_dirs() == ["./data"]


def test_empty_log_dirs_and_zero_roll_ms_are_rejected() -> None:
    with pytest.raises(ConfigError, match="'log.dirs': at least one directory"):
        BrokerConfig.load(None, ["log.dirs="])
    with pytest.raises(ConfigError, match="'log.dirs': at least one directory"):
        BrokerConfig.load(None, ["log.dirs= , "])
    with pytest.raises(ConfigError, match="'log.dir'"):
        BrokerConfig.load(None, ["log.dir="])
    with pytest.raises(ConfigError, match="'log.roll.ms': must be at least 1"):
        BrokerConfig.load(None, ["log.roll.ms=0"])
    assert BrokerConfig.load(None, ["log.roll.ms=1"]).get("log.roll.ms") == 1


def test_check_log_dirs_names_the_key(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "nested" / "b"
    assert BrokerConfig.load(None, [f"log.dirs={a},{b}"]).check_log_dirs() == ([str(a), str(b)], {})
    assert a.is_dir() and b.is_dir()  # created, as Kafka does on first start
    afile = tmp_path / "afile"
    afile.write_text("x")
    # Next to a usable dir, a failing one goes offline (as Kafka); alone, it stops the broker.
    usable, failed = BrokerConfig.load(None, [f"log.dirs={a},{afile}"]).check_log_dirs()
    assert usable == [str(a)] and "it is a file" in failed[str(afile)]
    with pytest.raises(ConfigError, match=r"'log.dirs': it is a file") as e:
        BrokerConfig.load(None, [f"log.dirs={afile}"]).check_log_dirs()
    assert str(afile) in str(e.value)
    with pytest.raises(ConfigError, match=r"'log.dirs': cannot create the directory"):
        BrokerConfig.load(None, [f"log.dirs={afile}/sub"]).check_log_dirs()
    with pytest.raises(ConfigError, match=r"'log.dir': it is a file"):
        BrokerConfig.load(None, [f"log.dir={afile}"]).check_log_dirs()
    with pytest.raises(ConfigError, match="listed twice"):
        BrokerConfig.load(None, [f"log.dirs={a},{a}/"]).check_log_dirs()


def test_dynamic_layers_take_precedence_and_report_their_source() -> None:
    cfg = BrokerConfig.load(None, ["log.retention.hours=100", "message.max.bytes=5000"])
    changed, problems = cfg.set_dynamic_configs(default={"log.retention.ms": "60000", "message.max.bytes": "3000"})
    assert problems == [] and changed == {"log.retention.ms", "message.max.bytes"}
    cfg.set_dynamic_configs(per_broker={"message.max.bytes": "2000"})
    assert cfg.get("log.retention.ms") == 60000 and cfg.get("message.max.bytes") == 2000
    assert cfg.topic_defaults()["retention.ms"] == "60000"

    items = {e.name: e for e in cfg.items()}
    mmb = items["message.max.bytes"]
    assert (mmb.value, mmb.source, mmb.read_only) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert [(s.value, s.source) for s in mmb.synonyms] == [
        ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG), ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("5000", ConfigSource.STATIC_BROKER_CONFIG), ("1048588", ConfigSource.DEFAULT_CONFIG)]
    assert items["num.partitions"].read_only and not items["log.cleaner.threads"].read_only
    assert {e.name for e in cfg.items(per_broker=False)} == {"log.retention.ms", "message.max.bytes"}

    ret = {e.name: e for e in describe_topic_configs(cfg, {})}["retention.ms"]
    assert (ret.value, ret.source) == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [(s.name, s.source) for s in ret.synonyms] == [
        ("log.retention.ms", 3), ("log.retention.hours", 4), ("log.retention.hours", 5)]

    changed, _ = cfg.set_dynamic_configs(per_broker={}, default={})
    assert changed == {"log.retention.ms", "message.max.bytes"} and cfg.get("log.retention.ms") == 360_000_000


def test_dynamic_update_validation() -> None:
    cfg = BrokerConfig.load(None, ["log.cleaner.threads=2"])
    assert cfg.validate_dynamic_update({"log.retention.ms": " 1000 ", "log.cleanup.policy": "compact, delete"},
                                       per_broker=False) == {"log.retention.ms": "1000",
                                                             "log.cleanup.policy": "compact,delete"}
    with pytest.raises(DynamicUpdateError, match="dynamically: log.dirs, num.partitions"):
        cfg.validate_dynamic_update({"num.partitions": "2", "log.dirs": "/x", "log.retention.ms": "1"}, True)
    with pytest.raises(DynamicUpdateError, match="broker id must be specified: advertised.listeners"):
        cfg.validate_dynamic_update({"advertised.listeners": "PLAINTEXT://h:1"}, per_broker=False)
    assert cfg.validate_dynamic_update({"advertised.listeners": "PLAINTEXT://h:1"}, per_broker=True)
    for key, value in {"log.segment.bytes": "10", "log.cleaner.threads": "5", "num.io.threads": "0",
                       "advertised.listeners": "PLAINTEXT://0.0.0.0:1"}.items():
        with pytest.raises(ConfigError) as e:
            cfg.validate_dynamic_update({key: value}, per_broker=True)
        assert not isinstance(e.value, DynamicUpdateError), key
    # A persisted entry that no longer validates is skipped, not fatal.
    changed, problems = cfg.set_dynamic_configs(per_broker={"log.segment.bytes": "10", "num.partitions": "3"})
    assert changed == set() and len(problems) == 2


def test_replica_fetch_wait_above_the_replica_socket_timeout_is_rejected() -> None:
    # A follower's fetch would time out (and reconnect) while the leader still legitimately waits for data.
    with pytest.raises(ConfigError, match="replica.socket.timeout.ms must be at least replica.fetch.wait.max.ms"):
        BrokerConfig.load(None, ["replica.fetch.wait.max.ms=5000", "replica.socket.timeout.ms=1000"])
    cfg = BrokerConfig.load(None, ["replica.fetch.wait.max.ms=1000", "replica.socket.timeout.ms=1000"])
    assert cfg.get("replica.socket.timeout.ms") == 1000


def test_consumer_group_timeouts_are_bounded_as_kafka() -> None:
    assert BrokerConfig({}).get("group.consumer.session.timeout.ms") == 45000
    with pytest.raises(ConfigError, match="group.consumer.session.timeout.ms must be between"):
        BrokerConfig({"group.consumer.session.timeout.ms": "4000"})
    with pytest.raises(ConfigError, match="group.consumer.heartbeat.interval.ms must be less than"):
        BrokerConfig({"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "4000",
                      "group.consumer.heartbeat.interval.ms": "5000"})
    cfg = BrokerConfig({"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "4000",
                        "group.consumer.min.heartbeat.interval.ms": "100",
                        "group.consumer.heartbeat.interval.ms": "300"})
    assert cfg.get("group.consumer.heartbeat.interval.ms") == 300
    with pytest.raises(ConfigError, match="each item must be one of"):
        BrokerConfig({"group.consumer.assignors": "sticky"})
