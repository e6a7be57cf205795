"""`strom rebalance` as an operator runs it: a subprocess against a real cluster that grows.

Topics are created while only brokers 1 and 2 run; broker 3 then joins holding nothing. The dry run
must show a plan and change nothing; `--execute` must give broker 3 its share of replicas and
preferred leaders through throttled reassignments (the throttle configs are gone afterwards), while
a confluent-kafka acks=all producer writes and the checker reads every acknowledged record back.
A disk threshold below what a broker holds moves partitions away from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.checker import SequenceProducer, check_topic
from tests.support.cluster import ClusterProcess
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster

BOUND = 240.0  # seconds: generous on a loaded 2-core machine; never an assertion on time


def rebalance(cluster: ClusterProcess, *args: str, timeout: float = BOUND) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "rebalance", "--bootstrap-server",
                           cluster.bootstrap, *args], capture_output=True, text=True, timeout=timeout)


def proposed(output: str) -> dict[tuple[str, int], list[int]]:
    lines = output.splitlines()
    if "Proposed partition reassignment configuration" not in lines:
        return {}
    doc = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    return {(p["topic"], p["partition"]): p["replicas"] for p in doc["partitions"]}


def assignments(cluster: ClusterProcess, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    return {(t, p): r for t in topics for p, r in cluster.topic_assignment(t).items()}


def zk_config(cluster: ClusterProcess, kind: str, name: str) -> dict[str, str]:
    if cluster.zk.exists(f"/config/{kind}/{name}") is None:
        return {}
    data, _ = cluster.zk.get(f"/config/{kind}/{name}")
    return json.loads(data).get("config", {}) if data else {}


@pytest.fixture
def growing(tmp_path: Path) -> Iterator[ClusterProcess]:
    """Brokers 1 and 2 running; broker 3 configured but not started."""
    cluster = ClusterProcess(tmp_path, broker_ids=[1, 2, 3], offsets_replication_factor=2,
                             overrides={"auto.leader.rebalance.enable": "false"})
    try:
        cluster.start_zookeeper()
        for broker_id in (1, 2):
            cluster.start_broker(broker_id, timeout=90)
        cluster.wait_for(lambda: cluster.controller_id() is not None, BOUND, "a controller")
        yield cluster
    finally:
        cluster.close()


def test_a_joining_broker_gets_its_share_and_nothing_is_lost(growing: ClusterProcess) -> None:
    cluster = growing
    topics = [create_topic(cluster, partitions=6, replication_factor=2, config={"min.insync.replicas": "1"},
                           replicas=[[1, 2], [2, 1]] * 3),
              create_topic(cluster, replicas=[[1, 2], [2, 1]] * 3)]
    producer = SequenceProducer(cluster.broker(1).bootstrap + "," + cluster.broker(2).bootstrap, topics[0],
                                config={"acks": "all", "enable.idempotence": True}).start()
    try:
        assert producer.wait_acked(200, BOUND), producer
        cluster.start_broker(3, timeout=90)

        before = assignments(cluster, topics)
        dry = rebalance(cluster)
        assert dry.returncode == 0, dry.stderr
        plan = proposed(dry.stdout)
        assert plan, dry.stdout
        assert any(3 in replicas for replicas in plan.values()), dry.stdout
        assert "Broker" in dry.stdout and "Replicas before" in dry.stdout
        assert assignments(cluster, topics) == before  # a dry run moves nothing

        done = rebalance(cluster, "--execute", "--throttle", "10000000", "--batch-size", "4")
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "replication throttles removed" in done.stdout, done.stdout
        assert producer.wait_acked(producer.acked_count() + 200, BOUND), producer
    finally:
        producer.stop()

    after = assignments(cluster, topics)
    per_broker = Counter(b for replicas in after.values() for b in replicas)
    assert per_broker == {1: 8, 2: 8, 3: 8}, after  # 24 replicas over 3 brokers
    for replicas in after.values():
        assert len(replicas) == 2 == len(set(replicas))
    # Every partition's ISR is its full new replica set, and leaders follow the preferred order.
    leaders = Counter()
    for (topic, partition), replicas in after.items():
        state = cluster.wait_isr(topic, partition, replicas, timeout=BOUND)
        leaders[state.leader] += 1
    assert leaders[3] >= 3, leaders  # the newcomer leads its share (4 of 12, give or take one)
    # Throttles are removed from the brokers and topics once the moves are done.
    for broker_id in (1, 2, 3):
        assert not {k for k in zk_config(cluster, "brokers", str(broker_id)) if "throttled" in k}
    for topic in topics:
        assert not {k for k in zk_config(cluster, "topics", topic) if "throttled" in k}

    report = check_topic(cluster.bootstrap, topics[0], producer.acked, timeout=BOUND)
    assert report.lost == 0 and report.duplicated == 0, report

    # A second run finds nothing left to do for the counts. (Disk bytes it may still even out: the producer
    # wrote on during the moves, and moved-away copies are deleted some time after a move completes.)
    again = rebalance(cluster, "--goals", "replica-distribution,leader-distribution,minimal-movement")
    assert again.returncode == 0 and "nothing to move" in again.stdout, again.stdout


def test_a_broker_past_the_disk_threshold_sheds_partitions(growing: ClusterProcess) -> None:
    cluster = growing
    cluster.start_broker(3, timeout=90)
    big = create_topic(cluster, replicas=[[1], [1]])
    small = create_topic(cluster, replicas=[[2], [3]])
    producers = [SequenceProducer(cluster.bootstrap, big, name=f"p{p}", config={"acks": "all"}, partition=p)
                 for p in (0, 1)]
    for producer in producers:
        producer.produce_some(2000)
    total = sum(f.stat().st_size for p in (0, 1) for f in (cluster.log_dir(1) / f"{big}-{p}").glob("*.log"))
    assert total > 20_000
    # Broker 1 holds both partitions, 2/3 of its capacity; the limit (50 %) fits one partition, not two.
    out = rebalance(cluster, "--execute", "--goals", "disk-capacity", "--disk-capacity", str(int(total * 1.5)),
                    "--disk-threshold", "50", "--throttle", "-1")
    assert out.returncode == 0, (out.stdout, out.stderr)
    moved = cluster.topic_assignment(big)
    assert sorted(len(r) for r in moved.values()) == [1, 1] and [1] in moved.values(), out.stdout
    assert {b for r in moved.values() for b in r} - {1}, out.stdout  # one partition left broker 1
    for p, replicas in moved.items():
        cluster.wait_isr(big, p, replicas, timeout=BOUND)
    report = check_topic(cluster.bootstrap, big, [a for pr in producers for a in pr.acked], timeout=BOUND)
    assert report.lost == 0 and report.acked == 4000, report
    assert cluster.topic_assignment(small) == {0: [2], 1: [3]}


def test_bad_options_are_one_clear_line(growing: ClusterProcess) -> None:
    for args, message in [(("--goals", "nope"), "unknown goal 'nope'"),
                          (("--disk-threshold", "0"), "--disk-threshold is a percentage"),
                          (("--dry-run", "--execute"), "not both"),
                          (("--throttle", "-5"), "bytes/s")]:
        out = rebalance(growing, *args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert out.stderr.startswith("Error: ") and message in out.stderr and "Traceback" not in out.stderr


def test_the_controller_balancer_gives_a_joining_broker_its_share(tmp_path: Path) -> None:
    """strom.balancer.enable: no command at all; the controller moves replicas to the newcomer in throttled
    batches, clears the throttles and elects preferred leaders; an acks=all producer loses nothing."""
    cluster = ClusterProcess(tmp_path, broker_ids=[1, 2, 3], offsets_replication_factor=2,
                             overrides={"auto.leader.rebalance.enable": "false", "strom.balancer.enable": "true",
                                        "strom.balancer.interval.ms": 2000,
                                        "strom.balancer.max.partition.movements": 3,
                                        "strom.balancer.throttle.bytes.per.sec": 10_000_000})
    try:
        cluster.start_zookeeper()
        for broker_id in (1, 2):
            cluster.start_broker(broker_id, timeout=90)
        cluster.wait_for(lambda: cluster.controller_id() is not None, BOUND, "a controller")
        topic = create_topic(cluster, replicas=[[1, 2], [2, 1]] * 6)
        assert Counter(b for r in cluster.topic_assignment(topic).values() for b in r) == {1: 12, 2: 12}
        producer = SequenceProducer(cluster.broker(1).bootstrap + "," + cluster.broker(2).bootstrap, topic,
                                    config={"acks": "all", "enable.idempotence": True}).start()
        try:
            assert producer.wait_acked(200, BOUND), producer
            cluster.start_broker(3, timeout=90)

            def balanced() -> dict[int, list[int]] | None:
                assignment = cluster.topic_assignment(topic)
                counts = Counter(b for r in assignment.values() for b in r)
                return assignment if counts == {1: 8, 2: 8, 3: 8} else None

            assignment = cluster.wait_for(balanced, BOUND, "broker 3 holding 8 of the 24 replicas")
            assert producer.wait_acked(producer.acked_count() + 200, BOUND), producer
        finally:
            producer.stop()

        def settled() -> bool:
            leaders = Counter(cluster.wait_isr(topic, p, r, timeout=BOUND).leader for p, r in assignment.items())
            throttled = [k for b in (1, 2, 3) for k in zk_config(cluster, "brokers", str(b)) if "throttled" in k]
            throttled += [k for k in zk_config(cluster, "topics", topic) if "throttled" in k]
            return leaders[3] >= 3 and not throttled

        cluster.wait_for(settled, BOUND, "preferred leaders elected and throttles removed")
        report = check_topic(cluster.bootstrap, topic, producer.acked, timeout=BOUND)
        assert report.lost == 0 and report.duplicated == 0, report
    finally:
        cluster.close()


def test_leaders_are_evened_without_copying_data(growing: ClusterProcess) -> None:
    """Every partition prefers broker 1: the plan only reorders replicas (no byte moves) and the preferred
    leader election at the end hands half the leaderships to broker 2."""
    cluster = growing
    topic = create_topic(cluster, replicas=[[1, 2]] * 6)
    # Throttles an earlier run left behind (cut short): this run clears them once nothing moves.
    for kind, name, config in (("topics", topic, "leader.replication.throttled.replicas=0:1"),
                               ("brokers", "1", "leader.replication.throttled.rate=1000")):
        set_config = subprocess.run([sys.executable, "-m", "strom.cli.main", "configs", "--bootstrap-server",
                                     cluster.bootstrap, "--alter", "--entity-type", kind, "--entity-name", name,
                                     "--add-config", config], capture_output=True, text=True, timeout=BOUND)
        assert set_config.returncode == 0, set_config.stderr
    cluster.wait_for(lambda: zk_config(cluster, "topics", topic), BOUND, "the leftover throttle in ZooKeeper")
    out = rebalance(cluster, "--execute")
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "0 B (0 bytes) to move, 3 preferred-leader change(s) only" in out.stdout, out.stdout
    assignment = cluster.topic_assignment(topic)
    assert sorted(Counter(r[0] for r in assignment.values()).values()) == [3, 3], assignment
    assert all(sorted(r) == [1, 2] for r in assignment.values())

    def leaders() -> Counter[int] | None:
        led = Counter(cluster.partition_state(topic, p).leader for p in assignment)
        return led if led == Counter(r[0] for r in assignment.values()) else None

    cluster.wait_for(leaders, BOUND, "the preferred replicas leading")
    assert not zk_config(cluster, "topics", topic) and "throttled" not in str(zk_config(cluster, "brokers", "1"))


def test_a_new_controller_removes_the_throttles_of_a_balancer_that_died_mid_batch(tmp_path: Path) -> None:
    """The controller's balancer starts a throttled move to a joining broker and the controller is killed
    (kill -9) mid-batch. Its next round never comes; the new controller, whose own balancer has nothing to
    do, must remove the throttles it left once the move is over, and not before."""
    from confluent_kafka import Producer

    cluster = ClusterProcess(tmp_path, broker_ids=[1, 2, 3], offsets_replication_factor=2,
                             overrides={"auto.leader.rebalance.enable": "false", "strom.balancer.enable": "true",
                                        "strom.balancer.interval.ms": 600_000,  # only a join starts a round
                                        "strom.balancer.max.partition.movements": 1,
                                        "strom.balancer.throttle.bytes.per.sec": 200_000},
                             # Throttled from the start: a broker applies the balancer's throttle configs only
                             # once it has read them, and the copy must not outrun them meanwhile.
                             broker_overrides={3: {"follower.replication.throttled.rate": 200_000}})
    try:
        cluster.start_zookeeper()
        for broker_id in (1, 2):
            cluster.start_broker(broker_id, timeout=90)
        controller = cluster.wait_controller()
        topic = create_topic(cluster, replicas=[[1, 2], [2, 1]],
                             config={"follower.replication.throttled.replicas": "*"})
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0})
        for i in range(1000):  # 5 MB per partition: many seconds at the throttled rate
            producer.produce(topic, b"v" * 10_000, partition=i % 2)
            producer.poll(0)
        assert producer.flush(60) == 0

        def throttles() -> list[str]:
            found = [f"broker {b}: {k}" for b in (1, 2, 3) for k in zk_config(cluster, "brokers", str(b))
                     if "throttled" in k]
            return found + [f"topic: {k}" for k in zk_config(cluster, "topics", topic) if "throttled" in k]

        def moving() -> bool:
            data, _ = cluster.zk.get(f"/brokers/topics/{topic}")
            return bool(json.loads(data).get("adding_replicas"))

        cluster.start_broker(3, timeout=90)
        cluster.wait_for(moving, BOUND, "the balancer's move to broker 3")
        assert [t for t in throttles() if t.startswith("broker")], "the balancer set no throttle"
        cluster.kill9(controller)
        cluster.wait_controller(not_in=(controller,), timeout=BOUND)
        cluster.start_broker(controller, timeout=90)  # a replica the move keeps may be on it

        # Once they are gone, the move must be over: they were not removed while it still needed them.
        after = cluster.wait_for(lambda: None if throttles() else ("moving" if moving() else "done"), BOUND,
                                 "the dead controller's throttles removed by the new one")
        assert after == "done"
        assert 3 in {b for r in cluster.topic_assignment(topic).values() for b in r}  # the move happened
        assert cluster.zk.exists("/strom/balancer_throttles") is None
    finally:
        cluster.close()
