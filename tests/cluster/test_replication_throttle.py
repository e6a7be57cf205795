"""Replication throttles (KIP-73) in a 3-broker cluster: a replica catching up on a backlog is held to the
throttled rate (on the follower's side or the leader's), an unthrottled partition on the same fetcher
catches up meanwhile, removing the throttle lets it finish, and a caught-up replica in the ISR is never
slowed down by a throttle."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.protocol.admin import DescribeLogDirsRequest

from tests.integration.test_api_version_matrix import call
from tests.integration.test_dynamic_broker_configs import default_cli
from tests.support.broker import free_port
from tests.support.cluster import ClusterProcess
from tests.support.metrics import scrape
from tests.support.replicas import create_topic

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper]

RATE = 100_000  # bytes/s
WINDOW_S = 11  # replication.quota.window.num (11) x replication.quota.window.size.seconds (1)
FETCH_MAX = 1_048_576  # replica.fetch.max.bytes: one fetch may pass the bound by this much
VALUE = b"t" * 10_000
BACKLOG = 1600 * len(VALUE)  # 16 MB: 160 s at the throttled rate


def partition_size(cluster: ClusterProcess, broker_id: int, topic: str) -> int:
    """Bytes of the topic's partition 0 on one broker, as DescribeLogDirs (kafka-log-dirs.sh) reports them."""
    results = call(cluster.broker(broker_id), DescribeLogDirsRequest(topics=None), 1).results
    for r in results:
        for t in r.topics:
            if t.name == topic:
                return sum(p.partition_size for p in t.partitions if p.partition_index == 0)
    return 0


def produce(cluster: ClusterProcess, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0,
                  "message.timeout.ms": 120_000})
    errors: list[Any] = []
    for _ in range(count):
        while True:
            try:
                p.produce(topic, VALUE, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(120) == 0 and not errors, errors


def alter_topic(admin: AdminClient, topic: str, key: str, value: str | None) -> None:
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    res = ConfigResource(ConfigResource.Type.TOPIC, topic,
                         incremental_configs=[ConfigEntry(key, value or "", incremental_operation=op)])
    admin.incremental_alter_configs([res])[res].result(60)


def set_broker_rate(admin: AdminClient, broker_id: int, key: str, value: int) -> None:
    """A per-broker dynamic config: librdkafka sends it to that broker itself."""
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id), incremental_configs=[
        ConfigEntry(key, str(value), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(60)


@pytest.mark.parametrize("side", ["follower", "leader"])
def test_throttle_holds_back_a_catching_up_replica(cluster_factory: Any, side: str) -> None:
    ports = {b: free_port() for b in (1, 2, 3)}
    cluster = cluster_factory(
        3, broker_overrides={b: {"metrics.listener": f"http://127.0.0.1:{p}"} for b, p in ports.items()})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    throttled = create_topic(cluster, replicas=[[1, 2, 3]])
    free = create_topic(cluster, replicas=[[1, 2, 3]])  # same leader, so the same fetcher on broker 3

    cluster.stop(3)
    cluster.wait_isr(throttled, 0, [1, 2])
    cluster.wait_isr(free, 0, [1, 2])
    produce(cluster, throttled, BACKLOG // len(VALUE))
    produce(cluster, free, 400)  # 4 MB
    if side == "follower":
        # Broker 3 is down: its rate comes from the cluster default, which it reads when it starts.
        alter_topic(admin, throttled, "follower.replication.throttled.replicas", "0:3")
        default_cli(cluster.broker(1), "--alter", "--add-config", f"follower.replication.throttled.rate={RATE}")
    else:
        alter_topic(admin, throttled, "leader.replication.throttled.replicas", "0:1,0:2")
        set_broker_rate(admin, 1, "leader.replication.throttled.rate", RATE)

    started = time.monotonic()
    cluster.start_broker(3)
    # The unthrottled partition, fetched by the same fetcher from the same leader, catches up meanwhile.
    cluster.wait_isr(free, 0, [1, 2, 3], timeout=120)
    while time.monotonic() - started < 6:
        time.sleep(0.5)
    replicated = partition_size(cluster, 3, throttled)
    elapsed = time.monotonic() - started
    # What the rate lets through: its bound over the time since the start plus the window's first burst,
    # and one fetch past the bound.
    allowed = RATE * (elapsed + WINDOW_S) + FETCH_MAX
    assert 0 < replicated <= allowed, (replicated, allowed, elapsed)
    assert replicated < BACKLOG // 2, (replicated, elapsed)
    assert 3 not in cluster.partition_state(throttled, 0).isr
    # The throttling broker's metrics show it (FollowerReplication on broker 3, LeaderReplication on 1).
    kind, metered = ("FollowerReplication", 3) if side == "follower" else ("LeaderReplication", 1)
    samples = scrape(ports[metered])
    assert samples.total("kafka_server_replication_held_back_total", replication=kind) > 0
    assert 0 < samples.total("kafka_server_replication_throttled_bytes_total", replication=kind) <= allowed
    assert samples.total("kafka_server_replication_throttle_time_ms_total", replication=kind) > 0
    assert samples.total("kafka_server_replication_byte_rate", replication=kind) > 0

    # Throttle removed: the replica catches up fully and rejoins the ISR.
    key = f"{side}.replication.throttled.replicas"
    alter_topic(admin, throttled, key, None)
    cluster.wait_isr(throttled, 0, [1, 2, 3], timeout=180)
    sizes = {b: partition_size(cluster, b, throttled) for b in (1, 2, 3)}
    assert sizes[3] == sizes[1] >= BACKLOG, sizes

    # A throttle on every replica at a tiny rate never holds back replicas in the ISR: acks=all
    # produces go on and no follower drops out.
    alter_topic(admin, throttled, "leader.replication.throttled.replicas", "*")
    alter_topic(admin, throttled, "follower.replication.throttled.replicas", "*")
    for broker_id in (1, 2, 3):
        set_broker_rate(admin, broker_id, "leader.replication.throttled.rate", 1000)
        set_broker_rate(admin, broker_id, "follower.replication.throttled.rate", 1000)
    produce(cluster, throttled, 300)  # 3 MB, far beyond 1000 B/s
    assert set(cluster.partition_state(throttled, 0).isr) == {1, 2, 3}
    cluster.wait_for(lambda: len({partition_size(cluster, b, throttled) for b in (1, 2, 3)}) == 1, 60,
                     "every replica holding the same bytes")


def test_reassignment_with_a_throttle_copies_at_the_throttled_rate(cluster_factory: Any, tmp_path: Any) -> None:
    """`strom reassign-partitions --execute --throttle` (rcli) sets the lists Kafka's tool sets (current
    replicas lead, the new one follows): the new replica copies at the rate until the throttle is raised."""
    from tests.cluster.test_reassign_partitions_cli import strom, write_json

    cluster = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    topic = create_topic(cluster, replicas=[[1, 2]])
    produce(cluster, topic, BACKLOG // len(VALUE))
    plan = write_json(tmp_path / "plan.json",
                      {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 3]}]})
    started = time.monotonic()
    out = strom("--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file", str(plan),
                "--throttle", str(RATE))
    assert out.returncode == 0, out.stdout + out.stderr
    cluster.wait_for(lambda: partition_size(cluster, 3, topic) > 0, 120, "broker 3 copying")
    while time.monotonic() - started < 6:
        time.sleep(0.5)
    copied = partition_size(cluster, 3, topic)
    elapsed = time.monotonic() - started
    assert copied <= RATE * (elapsed + WINDOW_S) + FETCH_MAX, (copied, elapsed)
    assert copied < BACKLOG // 2, (copied, elapsed)
    verify = strom("--bootstrap-server", cluster.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    assert f"Reassignment of partition {topic}-0 is still in progress." in verify.stdout, verify.stdout

    # A higher throttle through the tool (--additional changes the throttle of a running move): it finishes.
    out = strom("--bootstrap-server", cluster.bootstrap, "--execute", "--additional", "--reassignment-json-file",
                str(plan), "--throttle", "1000000000")
    assert out.returncode == 0, out.stdout + out.stderr
    cluster.wait_for(lambda: cluster.topic_assignment(topic) == {0: [1, 3]}, 180, "the move finished")
    assert partition_size(cluster, 3, topic) == partition_size(cluster, 1, topic) >= BACKLOG
    verify = strom("--bootstrap-server", cluster.bootstrap, "--verify", "--reassignment-json-file", str(plan))
    assert f"Clearing topic-level throttles on topic {topic}" in verify.stdout, verify.stdout
