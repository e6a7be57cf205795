"""replica.selector.class at start-up: a broker naming an unknown selector refuses to start and says why."""

from __future__ import annotations

import pytest

from strom.broker.replica_selector import KAFKA_RACK_AWARE


def test_an_unknown_replica_selector_class_is_a_clear_start_up_error(broker_factory) -> None:  # noqa: ANN001
    broker = broker_factory({"replica.selector.class": "com.example.NearestReplicaSelector"}, start=False)
    with pytest.raises(RuntimeError) as failure:
        broker.start(timeout=60)
    message = str(failure.value)
    assert "replica.selector.class" in message and "com.example.NearestReplicaSelector" in message
    assert KAFKA_RACK_AWARE in message  # the names it would accept


def test_the_kafka_selector_name_starts(broker_factory) -> None:  # noqa: ANN001
    broker = broker_factory({"replica.selector.class": KAFKA_RACK_AWARE, "broker.rack": "r1"})
    assert broker.pid is not None
