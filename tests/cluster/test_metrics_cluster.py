"""Cluster metrics: one active controller, and under-replicated partitions after a follower dies."""

from __future__ import annotations

import pytest

from tests.support.broker import free_port
from tests.support.cluster import ClusterProcess
from tests.support.metrics import Samples, scrape
from tests.support.replicas import create_topic

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper, pytest.mark.slow]

ALL = {1, 2, 3}


def test_controller_count_and_under_replicated_partitions_after_kill9(cluster_factory) -> None:  # noqa: ANN001
    ports = {b: free_port() for b in sorted(ALL)}
    cluster: ClusterProcess = cluster_factory(
        3, broker_overrides={b: {"metrics.listener": f"http://127.0.0.1:{p}"} for b, p in ports.items()})
    topic = create_topic(cluster, partitions=2)
    for p in (0, 1):
        cluster.wait_isr(topic, p, ALL, timeout=60)

    def scrapes(brokers: set[int]) -> dict[int, Samples]:
        return {b: scrape(ports[b]) for b in brokers}

    def one_controller(brokers: set[int]) -> int | None:
        counts = {b: s.get("kafka_controller_kafkacontroller_activecontrollercount")
                  for b, s in scrapes(brokers).items()}
        active = [b for b, n in counts.items() if n == 1]
        return active[0] if len(active) == 1 and sum(counts.values()) == 1 else None

    controller = cluster.wait_for(lambda: one_controller(ALL), 60, "exactly one broker reporting the controller")
    assert controller == cluster.controller_id()
    everything = scrapes(ALL)
    assert sum(s.get("kafka_server_replicamanager_underreplicatedpartitions") for s in everything.values()) == 0
    assert sum(s.get("kafka_server_replicamanager_leadercount") for s in everything.values()) >= 2
    assert everything[controller].get("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert everything[controller].get("kafka_controller_kafkacontroller_globalpartitioncount") >= 2

    leader = cluster.partition_state(topic, 0).leader
    victim = next(b for b in sorted(ALL) if b not in (leader, controller))
    cluster.kill9(victim)
    alive = ALL - {victim}

    def under_replicated_on_leader() -> float | None:
        state = cluster.partition_state(topic, 0)
        if state is None or state.leader not in alive:
            return None
        s = scrape(ports[state.leader])
        if s.get("kafka_cluster_partition_underreplicated", topic=topic, partition="0") != 1:
            return None
        return s.get("kafka_server_replicamanager_underreplicatedpartitions") or None

    assert cluster.wait_for(under_replicated_on_leader, 90, "under-replicated partitions > 0 on the leader") > 0
    assert cluster.wait_for(lambda: one_controller(alive), 60, "still exactly one controller") == controller
