"""Controller fail-over: the new controller watches what the old one did, topics it loaded included."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.support.cluster import ClusterProcess
from tests.support.replicas import create_topic
from tests.support.tcp_proxy import TcpProxy

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


# The leaders' own lag rule must not be what removes a dead broker from the ISR in these tests.
NO_LAG_SHRINK = {"replica.lag.time.max.ms": 600_000}


def _write_to_every_partition(cluster: ClusterProcess, topic: str, partitions: int) -> None:
    """One acks=all record per partition; each must be acknowledged (min.insync.replicas 2)."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60_000, "log_level": 0})
    errors: list[object] = []
    for p in range(partitions):
        producer.produce(topic, b"after", partition=p, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(90) == 0
    assert not errors, errors


@pytest.mark.parametrize("victims", ["controller", "controller+leader"])
def test_new_controller_removes_dead_brokers_from_every_isr_at_once(cluster_factory, victims: str) -> None:  # noqa: ANN001
    """Kafka's onBrokerFailure at failover: the new controller must not leave the dead controller (or
    any unregistered broker) in ISRs until the leaders' lag rule (here 10 min) shrinks them."""
    min_isr = "2" if victims == "controller" else "1"
    cluster: ClusterProcess = cluster_factory(3, overrides=NO_LAG_SHRINK)
    topic = create_topic(cluster, partitions=6, config={"min.insync.replicas": min_isr})
    old = cluster.controller_id()
    assert old is not None
    dead = {old}
    if victims == "controller+leader":
        other = next(cluster.partition_state(topic, p).leader for p in range(6)
                     if cluster.partition_state(topic, p).leader != old)
        dead.add(other)
    for broker_id in dead:
        cluster.kill9(broker_id)
    cluster.wait_controller(not_in=dead, timeout=60)
    for p in range(6):
        cluster.wait_for(lambda p=p: not set(cluster.partition_state(topic, p).isr) & dead
                         and cluster.partition_state(topic, p).leader not in dead,
                         60, f"{topic}-{p} led and in sync without the dead brokers {sorted(dead)}")
    _write_to_every_partition(cluster, topic, 6)


def test_controller_that_loses_its_zookeeper_session_resigns_before_acting(cluster_factory) -> None:  # noqa: ANN001
    """Every broker cut from a running ZooKeeper past the session timeout (their sessions expire).
    On the heal the old controller must not read "every broker left" from its new session and take
    partitions offline with its stale epoch: it resigns first, and a controller is elected afresh."""
    cluster: ClusterProcess = cluster_factory(3, start=False)
    proxy = TcpProxy(("127.0.0.1", cluster.zookeeper.client_port))
    try:
        for b in cluster.broker_ids:
            cluster.broker(b).overrides["zookeeper.connect"] = f"127.0.0.1:{proxy.port}{cluster.chroot}"
        cluster.start()
        topic = create_topic(cluster, partitions=3, config={"min.insync.replicas": "2"})
        epoch = cluster.controller_epoch() or 0
        leaders_seen: list[int] = []
        for p in range(3):
            cluster.zk.DataWatch(f"/brokers/topics/{topic}/partitions/{p}/state",
                                 lambda data, _stat: data and leaders_seen.append(json.loads(data)["leader"]))
        proxy.cut()
        time.sleep(cluster.session_timeout_ms / 1000 * 2)
        proxy.heal()
        cluster.wait_for(lambda: set(cluster.registered_brokers()) == {1, 2, 3}
                         and (cluster.controller_epoch() or 0) > epoch, 90,
                         "every broker registered again under a newly elected controller")
        for p in range(3):
            cluster.wait_for(lambda p=p: cluster.partition_state(topic, p).leader in (1, 2, 3), 60,
                             f"{topic}-{p} has a leader")
        _write_to_every_partition(cluster, topic, 3)
        assert -1 not in leaders_seen, f"a partition was taken offline: leaders written {leaders_seen}"
        for b in (1, 2, 3):
            text = cluster.broker(b).log_path.read_text(errors="replace")
            assert "left [1, 2, 3]" not in text, cluster.broker(b).log_tail()
    finally:
        cluster.close()
        proxy.close()
