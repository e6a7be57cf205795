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
    for b in {cluster.partition_state(topic, p).leader for p in (0, 1)}:
        # Followers fetch from every leader (long polls, answered within replica.fetch.wait.max.ms), timed
        # there as FetchFollower.
        cluster.wait_for(lambda b=b: scrape(ports[b]).total("kafka_network_requestmetrics_requests_total",
                                                           request="FetchFollower") > 0 or None,
                         30, f"a FetchFollower answered by broker {b}")

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


def test_isr_shrink_and_expand_are_counted_by_the_leader(cluster_factory) -> None:  # noqa: ANN001
    """A frozen follower falls out of the ISR by the leader's own decision (replica.lag.time.max.ms), well
    before its ZooKeeper session expires; once thawed it catches up and the leader takes it back."""
    ports = {b: free_port() for b in sorted(ALL)}
    cluster: ClusterProcess = cluster_factory(
        3, overrides={"replica.lag.time.max.ms": 1000},
        broker_overrides={b: {"metrics.listener": f"http://127.0.0.1:{p}"} for b, p in ports.items()})
    topic = create_topic(cluster)
    cluster.wait_isr(topic, 0, ALL, timeout=60)
    leader = cluster.partition_state(topic, 0).leader
    controller = cluster.controller_id()
    follower = next(b for b in sorted(ALL) if b not in (leader, controller))
    before = scrape(ports[leader])
    shrinks = before.get("kafka_server_replicamanager_isrshrinks_total")
    expands = before.get("kafka_server_replicamanager_isrexpands_total")
    cluster.sigstop(follower)
    try:
        cluster.wait_isr(topic, 0, ALL - {follower}, timeout=60)
        after = cluster.wait_for(
            lambda: (s := scrape(ports[leader])).get("kafka_server_replicamanager_isrshrinks_total") > shrinks and s,
            30, "the leader to count its ISR shrink")
        assert after.get("kafka_cluster_partition_underreplicated", topic=topic, partition="0") == 1
        assert after.get("kafka_cluster_partition_insyncreplicascount", topic=topic, partition="0") == 2
    finally:
        cluster.sigcont(follower)
    cluster.wait_isr(topic, 0, ALL, timeout=90)
    final = cluster.wait_for(
        lambda: (s := scrape(ports[leader])).get("kafka_server_replicamanager_isrexpands_total") > expands and s,
        30, "the leader to count its ISR expansion")
    assert final.get("kafka_cluster_partition_underreplicated", topic=topic, partition="0") == 0
