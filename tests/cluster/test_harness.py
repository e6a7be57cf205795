"""The cluster harness itself, on what works without cluster-mode brokers: ZooKeeper reads, waits, clean-up.

The znodes here are written by the test into a real ZooKeeper, in the shapes Kafka 3.x's
controller writes them, so the harness's readers are checked against the layout, not against
Strom's own ZooKeeper client.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess
from tests.support.checker import Acked, SequenceProducer, check_topic, parse_value, record_value
from tests.support.cluster import ClusterProcess, ClusterTimeout, PartitionState, pid_alive


@pytest.fixture
def zk_only(tmp_path: Path):  # noqa: ANN201
    cluster = ClusterProcess(tmp_path, 3)
    cluster.start_zookeeper()
    try:
        yield cluster
    finally:
        cluster.close()


def test_broker_configs_carry_cluster_settings(tmp_path: Path) -> None:
    cluster = ClusterProcess(tmp_path, 2, overrides={"min.insync.replicas": 2},
                             broker_overrides={2: {"num.io.threads": 4}})
    assert cluster.broker_ids == [1, 2]
    assert cluster.chroot.startswith("/strom-")
    assert cluster.bootstrap == f"{cluster.broker(1).bootstrap},{cluster.broker(2).bootstrap}"
    one, two = cluster.broker(1).overrides, cluster.broker(2).overrides
    assert one["broker.id"] == 1 and two["broker.id"] == 2
    assert one["zookeeper.connect"] == cluster.zookeeper_connect == two["zookeeper.connect"]
    assert cluster.zookeeper_connect.endswith(cluster.chroot)
    assert one["zookeeper.session.timeout.ms"] == 6000
    assert one["offsets.topic.replication.factor"] == 2  # 3 capped by the broker count
    assert one["group.initial.rebalance.delay.ms"] == 0
    assert one["min.insync.replicas"] == 2 and two["min.insync.replicas"] == 2
    assert "num.io.threads" not in one and two["num.io.threads"] == 4
    assert cluster.broker(1).data_dir != cluster.broker(2).data_dir
    assert cluster.broker(1).port != cluster.broker(2).port
    assert ClusterProcess(tmp_path / "other", 2).chroot != cluster.chroot


def test_reads_kafka_znodes_from_its_chroot(zk_only: ClusterProcess) -> None:
    zk = zk_only.zk
    assert zk_only.registered_brokers() == [] and zk_only.controller_id() is None
    assert zk_only.partition_state("orders", 0) is None
    for broker_id in (1, 2, 3):
        zk.create(f"/brokers/ids/{broker_id}", json.dumps({"version": 5, "host": "127.0.0.1", "port": 9092}).encode(),
                  makepath=True, ephemeral=True)
    zk.create("/controller", json.dumps({"version": 2, "brokerid": 2, "timestamp": "1"}).encode(), ephemeral=True)
    zk.create("/controller_epoch", b"7")
    zk.create("/brokers/topics/orders", json.dumps({"version": 3, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA",
                                                    "partitions": {"0": [2, 3, 1]}}).encode(), makepath=True)
    path = "/brokers/topics/orders/partitions/0/state"
    zk.create(path, json.dumps({"controller_epoch": 7, "leader": 2, "version": 1, "leader_epoch": 4,
                                "isr": [2, 3]}).encode(), makepath=True)
    assert zk_only.registered_brokers() == [1, 2, 3]
    assert zk_only.controller_id() == 2 and zk_only.controller_epoch() == 7
    assert zk_only.topic_assignment("orders") == {0: [2, 3, 1]}
    assert zk_only.partition_state("orders", 0) == PartitionState(leader=2, leader_epoch=4, isr=(2, 3),
                                                                  controller_epoch=7, zk_version=0)

    def move_leadership() -> None:
        time.sleep(0.5)
        zk.set(path, json.dumps({"controller_epoch": 7, "leader": 3, "version": 1, "leader_epoch": 5,
                                 "isr": [3, 1, 2]}).encode())

    mover = threading.Thread(target=move_leadership)
    mover.start()
    state = zk_only.wait_leader("orders", 0, not_in={2}, timeout=20)
    mover.join()
    assert (state.leader, state.leader_epoch) == (3, 5)
    assert zk_only.wait_isr("orders", 0, {1, 2, 3}, timeout=5).isr == (3, 1, 2)
    assert zk_only.wait_controller(timeout=5) == 2
    # Nothing leaks out of the chroot: the root of the ensemble has no Kafka znodes.
    from kazoo.client import KazooClient

    root = KazooClient(hosts=zk_only.zookeeper.connect_string)
    root.start(timeout=15)
    try:
        assert "brokers" not in root.get_children("/")
        assert zk_only.chroot.lstrip("/") in root.get_children("/")
    finally:
        root.stop()
        root.close()


def test_wait_for_failure_names_the_wait_and_shows_every_broker(zk_only: ClusterProcess) -> None:
    with pytest.raises(ClusterTimeout) as info:
        zk_only.wait_isr("nowhere", 0, {1, 2, 3}, timeout=0.5)
    text = str(info.value)
    assert "ISR of nowhere-0 == [1, 2, 3]" in text
    assert "registered=[] controller=None" in text
    for broker_id in (1, 2, 3):
        assert f"--- broker {broker_id} (" in text and "never started" in text
    # 0 is an answer (broker 0 may be a leader); None and False are not.
    assert zk_only.wait_for(lambda: 0, 1, "zero") == 0
    with pytest.raises(ClusterTimeout, match="last error: ValueError: boom"):
        zk_only.wait_for(lambda: (_ for _ in ()).throw(ValueError("boom")), 0.3, "raising predicate")


def test_failed_start_leaves_no_process(tmp_path: Path) -> None:
    # An unknown key makes every broker exit with a config error whatever cluster mode can do.
    cluster = ClusterProcess(tmp_path, 2, overrides={"no.such.broker.setting": 1})
    with pytest.raises(RuntimeError, match="no.such.broker.setting"):
        cluster.start(timeout=30)
    assert not cluster.zookeeper.is_running()
    assert not cluster.running(1) and not cluster.running(2)
    assert cluster.broker(2).proc is None  # start stopped at the first broker that failed


def test_checker_reports_lost_duplicated_and_reordered(broker: BrokerProcess) -> None:
    topic = "checker-self-test"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=15)
    writer = SequenceProducer(broker.bootstrap, topic, "a", {"acks": "all"}, partition=0).produce_some(50)
    other = SequenceProducer(broker.bootstrap, topic, "b", {"acks": "all"}, partition=1).produce_some(20)
    assert writer.unflushed == 0 and not writer.errors and writer.acked_count() == 50
    clean = check_topic(broker.bootstrap, topic, writer.acked + other.acked)
    assert clean.ok, str(clean)
    assert (clean.consumed, clean.acked, clean.lost) == (70, 70, 0)

    # Damage the stream by hand: a duplicate, an older seq after a newer one, a foreign record.
    raw = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for value in (record_value("a", 10), record_value("b", 30), b"not a checker record"):
        raw.produce(topic, value, partition=0)
    raw.produce(topic, record_value("b", 19), partition=1)
    raw.produce(topic, record_value("b", 25), partition=1)
    assert raw.flush(15) == 0
    ghost = writer.acked + other.acked + [Acked("a", 999, 0, 9999)]
    report = check_topic(broker.bootstrap, topic, ghost)
    assert not report.ok
    assert report.lost == 1 and report.lost_examples == [("a", 999)]
    assert report.duplicated == 2  # a-10 again in p0, b-19 again in p1
    assert {e[:2] for e in report.duplicated_examples} == {("a", 10), ("b", 19)}
    assert report.reordered == 0  # b-30 is b's first record in partition 0: order is per partition
    assert report.unacked_present == 2 and report.foreign == 1  # b-30 and b-25 were never acked
    raw.produce(topic, record_value("b", 21), partition=1)
    raw.produce(topic, record_value("b", 20), partition=1)
    assert raw.flush(15) == 0
    again = check_topic(broker.bootstrap, topic, writer.acked + other.acked)
    assert again.reordered == 2 and {e[1] for e in again.reordered_examples} == {20, 21}
    assert parse_value(b"name-with-dash-3") == ("name-with-dash", 3) and parse_value(b"x") is None


@pytest.mark.cluster
def test_process_control_shows_in_zookeeper(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(2, session_timeout_ms=4000)
    assert cluster.registered_brokers() == [1, 2] and cluster.controller_id() in (1, 2)
    pids = {b: cluster.broker(b).pid for b in (1, 2)}
    cluster.kill9(2)
    assert not pid_alive(pids[2])
    cluster.wait_for(lambda: cluster.registered_brokers() == [1], 30, "broker 2's session expired")
    assert cluster.wait_controller(timeout=30) == 1
    cluster.start_broker(2)
    assert cluster.registered_brokers() == [1, 2] and cluster.broker(2).pid != pids[2]
    cluster.sigstop(2)  # frozen: its session expires although the process lives
    cluster.wait_for(lambda: cluster.registered_brokers() == [1], 30, "frozen broker 2's session expired")
    assert pid_alive(cluster.broker(2).pid)
    cluster.sigcont(2)
    cluster.wait_for(lambda: cluster.registered_brokers() == [1, 2], 60, "broker 2 registered again after SIGCONT")
    assert cluster.stop(1) == 0
    cluster.wait_for(lambda: cluster.registered_brokers() == [2], 30, "broker 1 deregistered on SIGTERM")
    assert cluster.wait_controller(not_in={1}, timeout=30) == 2
    pid2 = cluster.broker(2).pid
    cluster.close()
    assert not pid_alive(pid2) and not cluster.zookeeper.is_running()
