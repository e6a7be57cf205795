"""Controller fail-over: the new controller watches what the old one did, topics it loaded included."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.support.cluster import ClusterProcess
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster


def test_partitions_added_after_a_controller_change_get_leaders(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(3)
    topic = create_topic(cluster)  # exists before the fail-over: the new controller loads it at start
    old = cluster.controller_id()
    cluster.stop(old)
    new = cluster.wait_controller(not_in=(old,), timeout=60)
    cluster.start_broker(old)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=60)
    for p in (1, 2):
        state = cluster.wait_leader(topic, p, timeout=60)
        assert state.leader in (1, 2, 3)
    assert cluster.controller_id() == new
