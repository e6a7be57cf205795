"""Client quotas in a ZooKeeper cluster: written once under /config/users and /config/clients (with a
/config/changes notification, as Kafka does), applied by every broker without a restart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kafka.protocol.producer import ProduceRequest

from strom.protocol import codec
from strom.protocol.record_batch import build_batch
from tests.support.quotas import describe_quotas, described, set_quotas
from tests.support.raw_client import RawClient, decode

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper]

ENTITY = [("user", "ANONYMOUS"), ("client-id", "metered")]


def produce_throttle_ms(broker: Any, topic: str, partition: int, client_id: str) -> int | None:
    """The answer's throttle time; None while the broker does not lead the partition yet (LeaderAndIsr on its way)."""
    batch = build_batch([(None, b"z" * 10_000, [], 1_700_000_000_000)])
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    c = RawClient(broker, client_id=client_id)
    try:
        resp = decode(codec.response_class(0), c.request(req, 9), 9, True)
    finally:
        c.close()
    error = resp.responses[0].partition_responses[0].error_code
    if error in (3, 6):  # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER
        return None
    assert error == 0
    return resp.throttle_time_ms


def led_by(cluster: Any, broker_id: int, topic: str) -> int:
    """A partition of the topic that this broker leads and serves."""
    def find() -> int | None:
        for p in (0, 1):
            s = cluster.partition_state(topic, p)
            if s and s.leader == broker_id and produce_throttle_ms(cluster.broker(broker_id), topic, p,
                                                                   "probe") is not None:
                return p
        return None

    return cluster.wait_for(find, 30, f"a partition of {topic} served by broker {broker_id}")


def test_quota_set_on_one_broker_throttles_on_another(cluster_factory: Any) -> None:
    cluster = cluster_factory(2, overrides={"quota.window.num": 3, "quota.window.size.seconds": 1})
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("metered", 2, 1)])["metered"].result(30)
    led_by_2 = led_by(cluster, 2, "metered")
    assert produce_throttle_ms(cluster.broker(2), "metered", led_by_2, "metered") == 0

    # Written through broker 1 only.
    set_quotas(cluster.broker(1), ENTITY, {"producer_byte_rate": 2000})
    assert json.loads(cluster.zk.get("/config/users/ANONYMOUS/clients/metered")[0]) == {
        "version": 1, "config": {"producer_byte_rate": "2000"}}
    changes = [json.loads(cluster.zk.get(f"/config/changes/{c}")[0]) for c in cluster.zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "users/ANONYMOUS/clients/metered"} in changes
    cluster.wait_for(lambda: produce_throttle_ms(cluster.broker(2), "metered", led_by_2, "metered") > 0, 30,
                     "broker 2 throttling the client")
    assert described(describe_quotas(cluster.broker(2), [("client-id", 0, "metered")])) == {
        (("user", "ANONYMOUS"), ("client-id", "metered")): {"producer_byte_rate": 2000.0}}

    # A restarted broker reads the quotas back from ZooKeeper.
    cluster.stop(2)
    cluster.start_broker(2)
    assert described(describe_quotas(cluster.broker(2), [("user", 0, "ANONYMOUS")])) == {
        (("user", "ANONYMOUS"), ("client-id", "metered")): {"producer_byte_rate": 2000.0}}

    # Removed through broker 2: broker 1 stops throttling.
    led_by_1 = led_by(cluster, 1, "metered")
    set_quotas(cluster.broker(2), ENTITY, {"producer_byte_rate": None})
    cluster.wait_for(lambda: not described(describe_quotas(cluster.broker(1), [])), 30, "broker 1 forgetting the quota")
    assert produce_throttle_ms(cluster.broker(1), "metered", led_by_1, "fresh-connection") == 0
    assert produce_throttle_ms(cluster.broker(1), "metered", led_by_1, "metered") == 0


def test_follower_fetches_are_never_throttled(cluster_factory: Any) -> None:
    """A tiny default consumer quota throttles consumers, while acks=all keeps working: the followers'
    fetches that acks=all waits for are exempt."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.protocol.consumer import FetchRequest

    cluster = cluster_factory(2, overrides={"quota.window.num": 3, "quota.window.size.seconds": 1})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"].result(30)
    cluster.wait_isr("replicated", 0, [1, 2])
    for broker_id in (1, 2):
        set_quotas(cluster.broker(broker_id), [("client-id", None)], {"consumer_byte_rate": 100})
    leader = cluster.broker(cluster.partition_state("replicated", 0).leader)
    cluster.wait_for(lambda: described(describe_quotas(leader, [])), 30, "the quota on the leader")

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[Any] = []
    # In rounds: a follower fetch already waiting when the quota arrived is not checked, later ones would be.
    for _ in range(5):
        for _ in range(40):
            p.produce("replicated", b"r" * 1024, on_delivery=lambda err, _m: err and failed.append(err))
        assert p.flush(15) == 0 and not failed, failed
    assert set(cluster.partition_state("replicated", 0).isr) == {1, 2}

    # A consumer reading the same data is throttled (and gets nothing in the throttled answer).
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="replicated", partitions=[
                           FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                                  log_start_offset=-1, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    c = RawClient(leader, client_id="a-consumer")
    try:
        resp = decode(codec.response_class(1), c.request(req, 12), 12, True)
    finally:
        c.close()
    assert resp.throttle_time_ms > 0 and resp.responses == []
