"""The rack-aware replica selector (KIP-392) and its broker config, without a broker."""

from __future__ import annotations

import pytest

from strom.broker.replica_selector import (
    KAFKA_RACK_AWARE,
    REPLICA_SELECTORS,
    ClientMetadata,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector_for,
)
from strom.config import BrokerConfig
from strom.config.broker_defs import BROKER_CONFIGS
from strom.config.values import ConfigError

LEADER = ReplicaView(1, "r1", 100, 0)


def pick(rack: str, *followers: ReplicaView) -> int | None:
    chosen = RackAwareReplicaSelector().select(ClientMetadata(rack), LEADER, [*followers, LEADER])
    return None if chosen is None else chosen.broker_id


def test_a_follower_in_the_consumers_rack_else_the_leader() -> None:
    r2 = ReplicaView(2, "r2", 100, 0)
    r3 = ReplicaView(3, "r3", 100, 0)
    assert pick("r2", r2, r3) == 2
    assert pick("r3", r2, r3) == 3
    assert pick("r1", r2, r3) == 1  # the leader is in the consumer's rack
    assert pick("r9", r2, r3) == 1  # no replica there
    assert pick("", r2, r3) == 1  # a consumer without client.rack


def test_among_followers_of_one_rack_the_most_caught_up() -> None:
    behind = ReplicaView(2, "r2", 90, 0)
    ahead = ReplicaView(3, "r2", 100, 500)
    fresh = ReplicaView(4, "r2", 100, 10)
    assert pick("r2", behind, ahead, fresh) == 4  # most records, then in sync most recently


def test_replica_selector_class_accepts_the_kafka_and_strom_names_and_refuses_others() -> None:
    assert BrokerConfig().get("replica.selector.class") is None
    assert replica_selector_for(None) is None
    for name in REPLICA_SELECTORS:
        assert BrokerConfig({"replica.selector.class": name}).get("replica.selector.class") == name
        assert isinstance(replica_selector_for(name), RackAwareReplicaSelector)
    with pytest.raises(ConfigError, match=KAFKA_RACK_AWARE.replace(".", r"\.")):
        BrokerConfig({"replica.selector.class": "com.example.NearestReplicaSelector"})
    # The validator and the selector table name the same classes.
    for name in REPLICA_SELECTORS:
        assert BROKER_CONFIGS["replica.selector.class"].validator(name) is None  # type: ignore[misc]
