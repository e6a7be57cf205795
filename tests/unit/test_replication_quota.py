"""Replication quotas (KIP-73): the throttled-replicas lists as Kafka validates and reads them, the
rate bound of one side, and the dynamic rates reaching the managers."""

from __future__ import annotations

import pytest
from tests.support.fake_clock import FakeClock

from strom.broker.quota import replication
from strom.broker.quota.replication import (
    ALL_PARTITIONS,
    ReplicationQuotaManager,
    ReplicationQuotas,
    throttled_partitions,
)
from strom.config import BrokerConfig, ConfigError
from strom.config.topic import validate_topic_configs
from strom.storage.log_config import LogConfig

LEADER_KEY = "leader.replication.throttled.replicas"
FOLLOWER_KEY = "follower.replication.throttled.replicas"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock(1_000_000)
    monkeypatch.setattr(replication, "now_ms", c)
    return c


@pytest.mark.parametrize("value", ["*", "0:101", "0:101,1:102", " 0:101 , 1:102 ", "", "0:101,,1:102", "*,"])
@pytest.mark.parametrize("key", [LEADER_KEY, FOLLOWER_KEY])
def test_valid_throttled_replica_lists(key: str, value: str) -> None:
    validate_topic_configs({key: value})


@pytest.mark.parametrize("value", ["0", "a:1", "0:b", "0:1:2", "*,0:1", "0;1", "-1:2", "0:-2", "**", "0 :1x"])
@pytest.mark.parametrize("key", [LEADER_KEY, FOLLOWER_KEY])
def test_bad_throttled_replica_lists_are_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=r"\[partitionId\]:\[brokerId\]"):
        validate_topic_configs({key: value})


def test_lists_name_the_partitions_of_one_broker() -> None:
    entries = ("0:101", "1:102", "2:101", "3:1010")
    assert throttled_partitions(entries, 101) == frozenset({0, 2})
    assert throttled_partitions(entries, 1010) == frozenset({3})
    assert throttled_partitions(entries, 7) == frozenset()
    assert throttled_partitions(("*",), 7) is ALL_PARTITIONS
    assert throttled_partitions(("zz", "1:7"), 7) == frozenset({1})  # a hand-written bad entry is skipped


def test_log_config_carries_the_lists() -> None:
    cfg = LogConfig.from_props({LEADER_KEY: "0:1, 1:2", FOLLOWER_KEY: "*"})
    assert cfg.leader_replication_throttled_replicas == ("0:1", "1:2")
    assert cfg.follower_replication_throttled_replicas == ("*",)
    assert LogConfig.from_props({LEADER_KEY: ""}).leader_replication_throttled_replicas == ()


def test_is_throttled_reads_this_brokers_entries() -> None:
    q = ReplicationQuotaManager("LeaderReplication", broker_id=2, samples=11, window_seconds=1)
    assert q.is_throttled(("0:2", "1:3"), 0)
    assert not q.is_throttled(("0:2", "1:3"), 1)
    assert not q.is_throttled((), 0)
    assert q.is_throttled(("*",), 5)


def test_quota_exceeded_over_the_window_and_recovers(clock: FakeClock) -> None:
    q = ReplicationQuotaManager("FollowerReplication", broker_id=1, samples=11, window_seconds=1,
                                bytes_per_second=100_000)
    assert not q.is_quota_exceeded()
    q.record(1_000_000)  # 1 MB over the 10 s the first sample counts for: exactly the bound
    assert not q.is_quota_exceeded()
    clock.now += 100
    q.record(20_000)  # 1.02 MB over 10.1 s: above the bound
    assert q.is_quota_exceeded()
    assert q.byte_rate() == pytest.approx(1_020_000 / 10.1)
    clock.now += 2_000
    assert q.throttle_time_ms() == pytest.approx(2_000)
    clock.now += 11_000  # every sample has aged out
    assert not q.is_quota_exceeded()
    assert q.throttle_time_ms_total == pytest.approx(13_000)
    assert q.throttled_bytes_total == 1_020_000


def test_unlimited_rate_is_never_exceeded(clock: FakeClock) -> None:
    q = ReplicationQuotaManager("LeaderReplication", broker_id=1, samples=11, window_seconds=1)
    q.record(10**12)
    assert not q.is_quota_exceeded()
    assert q.byte_rate() > 0  # still measured, for the byte-rate metric


def test_zero_rate_holds_back_after_any_byte(clock: FakeClock) -> None:
    q = ReplicationQuotaManager("LeaderReplication", broker_id=1, samples=11, window_seconds=1, bytes_per_second=0)
    assert not q.is_quota_exceeded()
    q.record(1)
    assert q.is_quota_exceeded()


def test_dynamic_rates_reach_the_managers(clock: FakeClock) -> None:
    config = BrokerConfig({"broker.id": "3"})
    quotas = ReplicationQuotas(config)
    assert quotas.leader.bound is None and quotas.follower.bound is None
    config.set_dynamic_configs({"follower.replication.throttled.rate": "1000"}, None)
    quotas.reconfigure({"follower.replication.throttled.rate"})
    assert quotas.follower.bound == 1000 and quotas.leader.bound is None
    quotas.follower.record(20_000)
    assert quotas.follower.is_quota_exceeded()
    config.set_dynamic_configs({}, None)
    quotas.reconfigure({"follower.replication.throttled.rate"})
    assert not quotas.follower.is_quota_exceeded()


@pytest.mark.parametrize("key", ["leader.replication.throttled.rate", "follower.replication.throttled.rate"])
def test_negative_rate_is_refused(key: str) -> None:
    config = BrokerConfig({"broker.id": "1"})
    with pytest.raises(ConfigError):
        config.validate_dynamic_update({key: "-1"}, per_broker=True)
    assert config.validate_dynamic_update({key: "0"}, per_broker=False) == {key: "0"}
