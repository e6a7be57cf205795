"""Faults on a real cluster: frozen and killed brokers, divergent logs, unclean election, ZooKeeper outages.

Every test builds its own cluster (ZooKeeper plus broker processes) and drives it with real clients.
A broker is cut off without being killed by SIGSTOP (its sockets stay open, nothing answers), which
is what a long GC pause or a partitioned host looks like to its peers. After the faults heal, the
replicas are compared byte for byte below the high watermark, read straight from their segment files.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from strom.protocol.record_batch import build_batch
from tests.support.checker import Acked, SequenceProducer, check_topic
from tests.support.cluster import ClusterProcess, PartitionState
from tests.support.raw_client import RawClient, decode
from tests.support.replicas import (
    IDEMPOTENT,
    WHOLE_LOG,
    batches_below,
    create_topic,
    high_watermark,
    log_contains,
    metadata_partition,
    wait_identical_replicas,
)

pytestmark = pytest.mark.cluster

ALL = {1, 2, 3}
NO_LEADER = -1


def write(bootstrap: str, topic: str, name: str, count: int, acks: str) -> list[Acked]:
    """`count` sequence records to partition 0, flushed; every one must be acknowledged."""
    producer = SequenceProducer(bootstrap, topic, name, {"acks": acks, "message.timeout.ms": 30_000},
                                partition=0).produce_some(count, flush_timeout=45)
    assert producer.unflushed == 0 and not producer.errors, producer.errors[:5]
    assert producer.acked_count() == count
    return producer.acked


def send_one(bootstrap: str, topic: str, acks: str) -> tuple[KafkaError | None, int]:
    """One record without retries: the first answer of the partition leader."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "retries": 0, "enable.idempotence": False,
                         "message.timeout.ms": 30_000, "log_level": 0})
    result: list[tuple[KafkaError | None, int]] = []
    producer.produce(topic, b"payload", partition=0,
                     on_delivery=lambda err, msg: result.append((err, msg.offset())))
    assert producer.flush(45) == 0
    return result[0]


def raw_produce(cluster: ClusterProcess, broker_id: int, topic: str, value: bytes, acks: int) -> int:
    """Produce one record straight to `broker_id` (no client-side redirect); returns the error code."""
    batch = build_batch([(None, value, (), 1_700_000_000_000)])
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(batch))])])
    client = RawClient(cluster.broker(broker_id))
    client.sock.settimeout(60)
    try:
        response = decode(ProduceResponse, client.request(request, 7), 7, flexible_header=False)
    finally:
        client.close()
    return response.responses[0].partition_responses[0].error_code


def wait_converged(cluster: ClusterProcess, topic: str, partition: int, replicas: set[int],
                   timeout: float = 90.0) -> int:
    """Wait for a full ISR, then for every replica's whole log to equal the leader's below the HW.

    Returns the HW. The HW is read again on every try: a follower may join the ISR at the old HW
    and the leader's HW moves up only as followers fetch (records written with acks=1). A replica
    keeping a suffix the others lack never converges (its log is longer); one differing below the
    HW fails wait_identical_replicas' assertion, reported when the wait times out.
    """
    cluster.wait_isr(topic, partition, replicas, timeout=timeout)

    def converged() -> int | None:
        hw = high_watermark(cluster, topic, partition)
        reference = wait_identical_replicas(cluster, topic, partition, hw, replicas, timeout=min(timeout, 30.0))
        whole = [batches_below(cluster.log_dir(b), topic, partition, WHOLE_LOG)[0] for b in replicas]
        return hw if all(data == reference for data in whole) else None

    return cluster.wait_for(converged, timeout, f"every replica of {topic}-{partition} ending at the HW")


def test_isolated_leader_truncates_its_divergent_suffix_by_leader_epoch(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(3)
    topic = create_topic(cluster, config={"min.insync.replicas": "1"})
    before = cluster.partition_state(topic, 0)
    old = before.leader
    followers = sorted(ALL - {old})
    common = write(cluster.bootstrap, topic, "common", 100, "all")
    wait_identical_replicas(cluster, topic, 0, 100, ALL)

    # The followers freeze for less than the session timeout, so they stay in the ISR meanwhile.
    for f in followers:
        cluster.sigstop(f)
    try:
        # A frozen follower may have a Fetch parked at the leader: the first append answers it into the
        # socket buffer and the follower takes it on SIGCONT. Let a bridge record use that answer up,
        # so that nothing written after it can reach the followers.
        bridge = write(cluster.broker(old).bootstrap, topic, "bridge", 1, "1")
        assert bridge[0].offset == 100
        time.sleep(1.0)  # > replica.fetch.wait.max.ms: every parked Fetch has been answered
        isolated = write(cluster.broker(old).bootstrap, topic, "isolated", 20, "1")
        assert [a.offset for a in isolated] == list(range(101, 121))
        cluster.sigstop(old)
    finally:
        for f in followers:
            cluster.sigcont(f)
    after: PartitionState = cluster.wait_leader(topic, 0, not_in={old}, timeout=60)
    assert after.leader_epoch > before.leader_epoch
    newer = write(cluster.broker(after.leader).bootstrap, topic, "newer", 30, "1")
    start = newer[0].offset
    assert start in (100, 101), start  # the bridge record reached the new leader or it did not
    assert [a.offset for a in newer] == list(range(start, start + 30))  # offsets the isolated records took
    cluster.sigcont(old)

    hw = wait_converged(cluster, topic, 0, ALL)
    assert hw == start + 30
    for b in ALL:
        assert not log_contains(cluster.log_dir(b), topic, 0, b"isolated-"), f"broker {b} kept isolated records"
    report = check_topic(cluster.bootstrap, topic, common + newer)
    assert report.ok and report.consumed == hw, str(report)


def test_leader_frozen_past_its_session_is_fenced(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(3)
    topic = create_topic(cluster, config={"min.insync.replicas": "2"})
    before = cluster.partition_state(topic, 0)
    old = before.leader
    writer = SequenceProducer(cluster.bootstrap, topic, "w", IDEMPOTENT, partition=0, rate_sleep=0.002).start()
    direct: SequenceProducer | None = None
    try:
        assert writer.wait_acked(200, 60)
        cluster.sigstop(old)
        after = cluster.wait_leader(topic, 0, not_in={old}, timeout=60)
        assert after.leader_epoch > before.leader_epoch
        cluster.wait_isr(topic, 0, ALL - {old}, timeout=60)
        assert writer.wait_acked(writer.acked_count() + 200, 90), cluster.describe_failure("producer progress", 90)
        cluster.sigcont(old)

        # The old leader must not take an acks=all write as leader any more: an error, never success.
        code = raw_produce(cluster, old, topic, b"fenced-0", acks=-1)
        assert code != 0, "the fenced leader acknowledged an acks=all write"
        # A client bootstrapped only from it is redirected to the new leader (or fails).
        direct = SequenceProducer(cluster.broker(old).bootstrap, topic, "direct", IDEMPOTENT, partition=0)
        direct.produce_some(50, flush_timeout=90)
        assert writer.wait_acked(writer.acked_count() + 100, 90)
    finally:
        writer.stop()
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]
    assert direct is not None and direct.unflushed == 0
    state = cluster.partition_state(topic, 0)
    assert state.leader_epoch >= after.leader_epoch
    wait_converged(cluster, topic, 0, ALL)
    for b in ALL:
        assert not log_contains(cluster.log_dir(b), topic, 0, b"fenced-0")
    report = check_topic(cluster.bootstrap, topic, writer.acked + direct.acked)
    assert report.ok, str(report)


def test_isr_shrinks_for_a_frozen_follower_and_expands_when_it_resumes(cluster_factory) -> None:  # noqa: ANN001
    # A session timeout well above replica.lag.time.max.ms: the shrink must come from the leader's lag check.
    cluster = cluster_factory(3, session_timeout_ms=20_000, overrides={"replica.lag.time.max.ms": 3000})
    # The leader is the controller: the followers frozen below must not include the controller, through
    # which every ISR change goes (AlterPartition); a frozen controller changes nothing until its session ends.
    controller = cluster.controller_id()
    follower, other = sorted(ALL - {controller})
    topic = create_topic(cluster, config={"min.insync.replicas": "2"}, replicas=[[controller, follower, other]])
    leader = cluster.partition_state(topic, 0).leader
    assert leader == controller
    seed = write(cluster.bootstrap, topic, "seed", 50, "all")

    cluster.sigstop(follower)
    try:
        during = write(cluster.broker(leader).bootstrap, topic, "during", 20, "1")
        shrunk = cluster.wait_isr(topic, 0, ALL - {follower}, timeout=15)
        assert shrunk.leader == leader
        assert follower in cluster.registered_brokers()  # still registered: the leader dropped it, not ZooKeeper
    finally:
        cluster.sigcont(follower)
    assert cluster.wait_isr(topic, 0, ALL, timeout=60).leader == leader
    assert wait_converged(cluster, topic, 0, ALL) == 70

    for f in (follower, other):
        cluster.sigstop(f)
    try:
        cluster.wait_isr(topic, 0, {leader}, timeout=15)
        # ZooKeeper may show the shrink a moment before the leader applies it: then the record is appended
        # and refused afterwards (NOT_ENOUGH_REPLICAS_AFTER_APPEND); once applied it is refused up front.
        appended = 0
        for _ in range(20):
            err, _ = send_one(cluster.broker(leader).bootstrap, topic, "all")
            assert err is not None, "acks=all acknowledged with an ISR of 1 and min.insync.replicas=2"
            if err.code() == KafkaError.NOT_ENOUGH_REPLICAS:
                break
            assert err.code() == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, err
            appended += 1
            time.sleep(0.5)
        assert err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
        err, offset = send_one(cluster.broker(leader).bootstrap, topic, "1")
        assert err is None and offset == 70 + appended
    finally:
        for f in (follower, other):
            cluster.sigcont(f)
    assert wait_converged(cluster, topic, 0, ALL) == 71 + appended
    report = check_topic(cluster.bootstrap, topic, seed + during)
    assert report.ok and report.foreign == 1 + appended, str(report)


@pytest.mark.parametrize("trigger", ["topic-config", "elect-leaders"])
def test_unclean_leader_election_is_off_by_default_and_a_topic_config_or_elect_leaders_turns_it_on(
        cluster_factory, trigger: str) -> None:  # noqa: ANN001
    cluster = cluster_factory(2)
    topic = create_topic(cluster, replication_factor=2)
    leader = cluster.partition_state(topic, 0).leader
    follower = ({1, 2} - {leader}).pop()
    kept = write(cluster.bootstrap, topic, "kept", 50, "all")
    wait_identical_replicas(cluster, topic, 0, 50, {1, 2})
    assert cluster.stop(follower) == 0
    cluster.wait_isr(topic, 0, {leader}, timeout=60)
    write(cluster.broker(leader).bootstrap, topic, "gone", 30, "1")
    cluster.kill9(leader)
    cluster.start_broker(follower)

    def offline() -> PartitionState | None:
        state = cluster.partition_state(topic, 0)
        registered = cluster.registered_brokers()
        ok = state is not None and state.leader == NO_LEADER and registered == [follower]
        return state if ok and cluster.controller_id() == follower else None

    state = cluster.wait_for(offline, 60, f"{topic}-0 offline with only broker {follower} alive")
    assert state.isr == (leader,)
    only_follower = cluster.broker(follower).bootstrap
    cluster.wait_for(lambda: metadata_partition(cluster, topic, 0, only_follower).leader == NO_LEADER, 30,
                     "Metadata showing no leader")
    err, _ = send_one_with_timeout(only_follower, topic, 5_000)
    assert err is not None

    if trigger == "topic-config":
        admin = AdminClient({"bootstrap.servers": only_follower, "log_level": 0})
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    else:  # a one-off unclean election through the ElectLeaders API; the topic config stays off
        out = subprocess.run([sys.executable, "-m", "strom.cli.main", "leader-election", "--bootstrap-server",
                              only_follower, "--election-type", "unclean", "--topic", topic, "--partition", "0"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"Successfully completed leader election (unclean) for partitions {topic}-0" in out.stdout

    elected = cluster.wait_leader(topic, 0, timeout=60)
    assert elected.leader == follower and elected.isr == (follower,)
    assert elected.leader_epoch > state.leader_epoch
    assert "unclean leader election" in cluster.broker(follower).log_tail(400)
    assert high_watermark(cluster, topic, 0, only_follower) == 50
    err, offset = send_one(only_follower, topic, "1")
    assert err is None and offset == 50
    assert not log_contains(cluster.log_dir(follower), topic, 0, b"gone-")
    report = check_topic(only_follower, topic, kept)
    assert report.ok and report.consumed == 51, str(report)


def send_one_with_timeout(bootstrap: str, topic: str, timeout_ms: int) -> tuple[KafkaError | None, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "message.timeout.ms": timeout_ms,
                         "log_level": 0})
    result: list[tuple[KafkaError | None, int]] = []
    producer.produce(topic, b"offline", partition=0,
                     on_delivery=lambda err, msg: result.append((err, msg.offset())))
    assert producer.flush(timeout_ms / 1000 + 15) == 0
    return result[0]


def test_brokers_serve_through_a_zookeeper_outage_and_reconnect(cluster_factory) -> None:  # noqa: ANN001
    cluster = cluster_factory(3)
    topic = create_topic(cluster, partitions=2, config={"min.insync.replicas": "2"})
    writer = SequenceProducer(cluster.bootstrap, topic, "z", IDEMPOTENT, rate_sleep=0.002).start()
    try:
        assert writer.wait_acked(200, 60)
        # Shorter than the session timeout, then well past it.
        for outage in (cluster.session_timeout_ms / 1000 - 2, cluster.session_timeout_ms / 1000 * 2.5):
            cluster.zookeeper.stop()
            down_at = time.monotonic()
            acked = writer.acked_count()
            assert writer.wait_acked(acked + 200, outage), f"no produce progress {outage:g}s into the outage"
            snapshot = list(writer.acked)
            report = check_topic(cluster.bootstrap, topic, snapshot, timeout=30)
            assert report.ok, f"consuming during the outage: {report}"
            time.sleep(max(0.0, outage - (time.monotonic() - down_at)))
            cluster.zookeeper.start()
            cluster.wait_for(lambda: set(cluster.registered_brokers()) == ALL and cluster.controller_id(), 60,
                             "every broker registered again and a controller")
            assert writer.wait_acked(writer.acked_count() + 200, 60)

        fresh = create_topic(cluster, config={"min.insync.replicas": "2"})
        write(cluster.bootstrap, fresh, "fresh", 20, "all")
        before = cluster.partition_state(topic, 0)
        cluster.kill9(before.leader)
        after = cluster.wait_leader(topic, 0, not_in={before.leader}, timeout=60)
        assert after.leader_epoch > before.leader_epoch
        assert writer.wait_acked(writer.acked_count() + 200, 90)
    finally:
        writer.stop()
    assert writer.unflushed == 0 and not writer.errors, writer.errors[:5]
    cluster.start_broker(before.leader)
    for p in (0, 1):
        wait_converged(cluster, topic, p, ALL)
    report = check_topic(cluster.bootstrap, topic, writer.acked)
    assert report.ok, str(report)


FAULTS = ("kill9", "sigstop-short", "sigstop-long", "stop")


@pytest.mark.slow
def test_fault_campaign_keeps_every_acknowledged_record_exactly_once(cluster_factory) -> None:  # noqa: ANN001
    seed = int(os.environ.get("STROM_FAULT_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    schedule = [(rng.choice(FAULTS), rng.choice(sorted(ALL)), round(rng.uniform(1.0, 4.0), 1)) for _ in range(8)]
    print(f"fault campaign seed {seed} (STROM_FAULT_SEED={seed} repeats it): {schedule}")
    cluster = cluster_factory(3)
    partitions = 4
    topic = create_topic(cluster, partitions=partitions, config={"min.insync.replicas": "2"})
    writers = [SequenceProducer(cluster.bootstrap, topic, name, IDEMPOTENT, rate_sleep=0.002).start()
               for name in ("a", "b")]
    try:
        for w in writers:
            assert w.wait_acked(100, 60)
        for round_no, (fault, victim, hold) in enumerate(schedule):
            print(f"round {round_no}: {fault} broker {victim} for {hold}s")
            if fault == "kill9":
                cluster.kill9(victim)
                time.sleep(hold)
                # Its old session's znode must go first: a broker id still registered by another session
                # is refused at start-up (as in Kafka), and it would fool the wait for the registration.
                cluster.wait_for(lambda v=victim: v not in cluster.registered_brokers(), 60,
                                 f"broker {victim}'s old session expired")
                cluster.start_broker(victim)
            elif fault == "stop":
                cluster.stop(victim)
                time.sleep(hold)
                cluster.start_broker(victim)
            else:
                # Long: past the session timeout, so the broker is fenced and must register again.
                pause = hold + (cluster.session_timeout_ms / 1000 if fault == "sigstop-long" else 0)
                cluster.sigstop(victim)
                time.sleep(pause)
                cluster.sigcont(victim)
                cluster.wait_for(lambda v=victim: v in cluster.registered_brokers(), 60,
                                 f"broker {victim} registered after SIGCONT")
            # Every writer must make progress between faults (min.insync.replicas=2 holds with 2 brokers).
            for w in writers:
                assert w.wait_acked(w.acked_count() + 50, 90), cluster.describe_failure(f"writer {w.name}", 90)
    finally:
        for w in writers:
            w.stop(flush_timeout=120)
    for p in range(partitions):
        wait_converged(cluster, topic, p, ALL, timeout=120)
    for w in writers:
        assert w.unflushed == 0 and not w.errors, (w.name, w.errors[:5])
    acked = [a for w in writers for a in w.acked]
    report = check_topic(cluster.bootstrap, topic, acked, timeout=90)
    print(f"fault campaign seed {seed}: {report}")
    assert report.lost == report.duplicated == report.reordered == 0, str(report)
