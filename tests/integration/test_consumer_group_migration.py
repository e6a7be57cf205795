"""Online migration between the classic and the consumer group protocols (KIP-848, as Kafka 4.0).

confluent-kafka members of both protocols share one group under load: classic members
(cooperative-sticky or range) are upgraded into a consumer group when consumer-protocol members
join, keep consuming through JoinGroup/SyncGroup/Heartbeat answered by the consumer group, and
the group turns classic again when the consumer-protocol members leave. The ownership checker
of the consumer-protocol tests watches it all. Raw requests pin the wire behaviour down, the
restart and ``group.consumer.migration.policy=disabled``.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from strom.coordinator.group.consumer_protocol import (
    encode_assignment,
)
from strom.protocol.group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
)
from tests.support.broker import BrokerProcess
from tests.support.checker import SequenceProducer
from tests.support.consumer_protocol import GroupMember, Tracker
from tests.support.raw_client import RawClient, decode
from tests.support.raw_group_members import ClassicMember, ConsumerMember, create_topic

OVERRIDES = {"group.consumer.heartbeat.interval.ms": 300, "group.consumer.session.timeout.ms": 6000,
             "group.consumer.min.session.timeout.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 100,
             "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}
CLASSIC = {"group.protocol": "classic", "session.timeout.ms": 10000, "heartbeat.interval.ms": 300}
CGH = ConsumerGroupHeartbeatRequest

NONE = 0
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
INCONSISTENT_GROUP_PROTOCOL = 23
MEMBER_ID_REQUIRED = 79
GROUP_ID_NOT_FOUND = 69
FENCED_INSTANCE_ID = 82
RETRIABLE = (14, 15, 16)  # loading, not available, not coordinator


@pytest.fixture(scope="module")
def migration_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("migration"), OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.close()


def _group_type(broker: BrokerProcess, group: str) -> tuple[str, str] | None:
    client = RawClient(broker)
    try:
        resp = decode(ListGroupsResponse, client.request(ListGroupsRequest(states_filter=[], types_filter=[]),
                                                         version=5), 5, True)
        return next(((g.group_type, g.group_state) for g in resp.groups if g.group_id == group), None)
    finally:
        client.close()


def _group_report(broker: BrokerProcess, group: str) -> str:
    """What a failing test saw of the group: its type and state, and its members (for a consumer
    group: protocol, epoch and partitions; for a classic one: the DescribeGroups view)."""
    client = RawClient(broker)
    try:
        found = _group_type(broker, group)
        lines = [f"group {group}: {found}"]
        if found is not None and found[0] == "consumer":
            req = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
            g = decode(ConsumerGroupDescribeResponse, client.request(req, version=1), 1, True).groups[0]
            lines.append(f"  epoch {g.group_epoch}, assignment epoch {g.assignment_epoch}")
            lines += [f"  {'classic' if m.member_type == 0 else 'consumer'} member {m.member_id} epoch {m.member_epoch} "
                      f"owns {sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)} "
                      f"target {sorted(p for tp in m.target_assignment.topic_partitions for p in tp.partitions)}"
                      for m in g.members]
        elif found is not None:
            resp = decode(DescribeGroupsResponse, client.request(DescribeGroupsRequest(groups=[group]), version=5), 5,
                          True)
            d = resp.groups[0]
            lines.append(f"  protocol {d.protocol_data!r}, members {[m.member_id for m in d.members]}")
        return "\n".join(lines)
    except Exception as exc:  # noqa: BLE001 - a report must not hide the failure it explains
        return f"group {group}: could not be described ({exc!r})"
    finally:
        client.close()


def _wait_classic_members(broker: BrokerProcess, group: str, count: int) -> None:
    """Wait (bounded) for the classic group to be Stable with ``count`` members, and for them to
    have taken their assignment in."""
    client = RawClient(broker)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            resp = decode(DescribeGroupsResponse, client.request(DescribeGroupsRequest(groups=[group]), version=5), 5,
                          True)
            if resp.groups[0].group_state == "Stable" and len(resp.groups[0].members) == count:
                time.sleep(1)  # the members' assignment callbacks run on their next poll
                return
            time.sleep(0.2)
    finally:
        client.close()
    raise AssertionError(f"the group did not settle with {count} members:\n{_group_report(broker, group)}")


def _close_within(consumer: Consumer, seconds: float) -> bool:
    """Close a consumer without waiting on it for ever (a close blocks in librdkafka, where the
    test's timeout cannot interrupt it); False if it had not finished in time."""
    closing = threading.Thread(target=consumer.close, name="close", daemon=True)
    closing.start()
    closing.join(seconds)
    return not closing.is_alive()


def _wait_type(broker: BrokerProcess, group: str, kind: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = _group_type(broker, group)
        if found is not None and found[0] == kind:
            return
        time.sleep(0.3)
    raise AssertionError(f"group {group} did not become a {kind} group:\n{_group_report(broker, group)}")


@pytest.fixture
def raw(migration_broker: BrokerProcess) -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def make(cls: type, *args: Any) -> Any:
        m = cls(migration_broker, *args)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def _assignment(topic: str, partitions: list[int]) -> bytes:
    return encode_assignment({topic: partitions})


def test_upgrade_serves_classic_members_then_downgrades(migration_broker: BrokerProcess,
                                                         raw: Callable[..., Any]) -> None:
    """Raw requests: a consumer-protocol member joining a classic group converts it; the classic
    member learns of its new assignment by REBALANCE_IN_PROGRESS, gives up what it must (its
    JoinGroup reports what it owns) before anyone else gets it, and its SyncGroup returns the
    server's assignment; when the consumer-protocol member leaves, the group is classic again."""
    topic = create_topic(migration_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = raw(ClassicMember, group, topic)
    assert a.join().error_code == NONE
    generation = a.generation
    assert a.sync([(a.member_id, _assignment(topic, [0, 1, 2, 3]))]).error_code == NONE
    assert a.assigned == [0, 1, 2, 3] and a.heartbeat() == NONE
    assert _group_type(migration_broker, group) == ("classic", "Stable")

    c = raw(ConsumerMember, group)
    resp = c.join(topic)
    assert resp.error_code == NONE, resp
    assert _group_type(migration_broker, group)[0] == "consumer"
    # Everything is still a's: c gets nothing until a has given partitions up.
    assert c.partitions() == set()
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    # a (cooperative) rejoins still owning everything: it is told to keep only its share.
    assert a.join(owned=[0, 1, 2, 3]).error_code == NONE
    assert a.generation == generation  # revoking: its epoch does not move yet
    assert a.sync().error_code == NONE
    kept = a.assigned
    assert len(kept) == 2
    c.heartbeat()
    assert c.partitions() == set()  # the revoked partitions are still a's
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    assert a.join(owned=kept).error_code == NONE  # revoked
    assert a.generation > generation
    assert a.sync().error_code == NONE and a.assigned == kept
    assert a.heartbeat() == NONE
    c.heartbeat()
    assert c.partitions() == {0, 1, 2, 3} - set(kept)
    # The classic member commits with its generation (its member epoch); an old one is refused.
    assert a.heartbeat() == NONE
    old = ClassicMember.__new__(ClassicMember)
    old.__dict__.update(a.__dict__)
    old.generation = generation
    assert old.heartbeat() == ILLEGAL_GENERATION

    # The consumer-protocol member leaves: the group is classic again and rebalances.
    assert c.send(member_epoch=-1).error_code == NONE
    assert _group_type(migration_broker, group)[0] == "classic"
    assert a.heartbeat() == REBALANCE_IN_PROGRESS  # at the generation it had: it keeps its partitions
    assert a.join(owned=kept).error_code == NONE
    assert a.sync([(a.member_id, _assignment(topic, [0, 1, 2, 3]))]).error_code == NONE
    assert a.assigned == [0, 1, 2, 3] and a.heartbeat() == NONE
    assert _group_type(migration_broker, group) == ("classic", "Stable")


def test_classic_member_joins_a_consumer_group(migration_broker: BrokerProcess, raw: Callable[..., Any]) -> None:
    """A classic member joining a consumer group is a member of it, served through the classic
    APIs; it leaves with LeaveGroup and its partitions go back."""
    topic = create_topic(migration_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = raw(ConsumerMember, group)
    assert c.join(topic).error_code == NONE
    c.heartbeat()
    assert c.partitions() == {0, 1, 2, 3}
    a = raw(ClassicMember, group, topic)
    resp = a.join()
    assert resp.error_code == NONE, resp
    assert (resp.protocol_name, resp.members) == ("range", [])  # nothing for a leader to assign
    assert a.sync().error_code == NONE and a.assigned == []  # c still owns them all
    for _ in range(3):
        c.heartbeat()
    assert len(c.partitions()) == 2
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    assert a.join(owned=[]).error_code == NONE and a.sync().error_code == NONE
    assert sorted(a.assigned) == sorted({0, 1, 2, 3} - c.partitions())
    assert a.heartbeat() == NONE
    assert _group_type(migration_broker, group)[0] == "consumer"
    # ConsumerGroupDescribe v1 tells the protocols apart (MemberType: 0 classic, 1 consumer).
    req = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
    described = decode(ConsumerGroupDescribeResponse, c.client.request(req, version=1), 1, True).groups[0]
    assert {m.member_id: (m.member_type, m.member_epoch) for m in described.members} == \
        {a.member_id: (0, a.generation), c.member_id: (1, c.epoch)}
    assert a.leave().members[0].error_code == NONE
    assert a.heartbeat() == UNKNOWN_MEMBER_ID
    c.heartbeat()
    c.heartbeat()
    assert c.partitions() == {0, 1, 2, 3}


def _described_members(client: RawClient, group: str) -> set[str]:
    req = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
    return {m.member_id for m in decode(ConsumerGroupDescribeResponse, client.request(req, version=1), 1,
                                        True).groups[0].members}


def test_static_classic_member_with_a_member_id_it_was_never_given(migration_broker: BrokerProcess,
                                                                   raw: Callable[..., Any]) -> None:
    """As Kafka 4.0: a static classic member naming a member id the consumer group never gave it
    gets UNKNOWN_MEMBER_ID, and FENCED_INSTANCE_ID if its instance id belongs to another member;
    neither joins. DescribeGroups (the classic API) does not describe the consumer group, classic
    members or not: Dead, no members (Kafka before DescribeGroups v6)."""
    topic = create_topic(migration_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = raw(ConsumerMember, group)
    assert c.join(topic).error_code == NONE
    a = raw(ClassicMember, group, topic)
    a.instance_id, a.member_id = "box-a", f"never-given-{uuid.uuid4().hex[:6]}"
    assert a.join().error_code == UNKNOWN_MEMBER_ID
    b = raw(ClassicMember, group, topic)
    b.instance_id = "box-b"
    assert b.join().error_code == NONE
    a.instance_id = "box-b"  # b's instance id with a member id that is not b's
    assert a.join().error_code == FENCED_INSTANCE_ID
    assert _described_members(c.client, group) == {c.member_id, b.member_id}
    assert b.join().error_code == NONE  # b itself rejoins with its id
    resp = decode(DescribeGroupsResponse, c.client.request(DescribeGroupsRequest(groups=[group]), version=5), 5, True)
    assert (resp.groups[0].error_code, resp.groups[0].group_state, resp.groups[0].members) == (NONE, "Dead", [])


def test_static_classic_member_replacing_the_last_consumer_member_downgrades(migration_broker: BrokerProcess,
                                                                             raw: Callable[..., Any]) -> None:
    """As Kafka 4.0: a classic static member replacing the group's last consumer-protocol member
    (same instance id) turns the group classic; the member rejoins its rebalance, leads it and
    owns everything; the replaced member is out."""
    topic = create_topic(migration_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = raw(ConsumerMember, group)
    resp = c.send(member_epoch=0, instance_id="box-1", rebalance_timeout_ms=30000, subscribed_topic_names=[topic],
                  topic_partitions=[])
    assert resp.error_code == NONE, resp
    a = raw(ClassicMember, group, topic)
    a.instance_id = "box-1"
    assert a.join().error_code == NONE
    assert _group_type(migration_broker, group)[0] == "classic", _group_type(migration_broker, group)
    # The replaced member's heartbeat finds no consumer group any more.
    assert c.send(instance_id="box-1").error_code == GROUP_ID_NOT_FOUND
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the downgrade's rebalance: a rejoins, leads, assigns
        sync = a.sync([(a.member_id, _assignment(topic, [0, 1, 2, 3]))])
        if sync.error_code == NONE:
            break
        assert sync.error_code == REBALANCE_IN_PROGRESS, sync
        joined = a.join()
        assert joined.error_code == NONE and joined.leader == a.member_id, joined
    assert a.assigned == [0, 1, 2, 3] and a.heartbeat() == NONE
    assert _group_type(migration_broker, group) == ("classic", "Stable")


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
def test_mixed_members_under_load_upgrade_then_downgrade(migration_broker: BrokerProcess, assignor: str) -> None:
    """confluent-kafka: two classic members consume; two consumer-protocol members join (the group
    converts) and leave (it converts back) while a producer writes. No partition is ever owned by
    two members at once, nothing acknowledged is lost, and what was committed stays committed."""
    topic = create_topic(migration_broker, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tracker = Tracker()
    producer = SequenceProducer(migration_broker.bootstrap, topic, rate_sleep=0.002).start()
    classic_config = {**CLASSIC, "partition.assignment.strategy": assignor}
    members = [GroupMember(migration_broker.bootstrap, group, topic, f"c{i}", tracker, classic_config)
               for i in range(2)]

    try:
        tracker.settle(3)
        assert _group_type(migration_broker, group)[0] == "classic", _group_report(migration_broker, group)
        new = [GroupMember(migration_broker.bootstrap, group, topic, f"k{i}", tracker) for i in range(2)]
        members += new
        _wait_type(migration_broker, group, "consumer")
        tracker.settle(4)
        new[0].close()
        tracker.settle(2)
        new[1].close()  # the last consumer-protocol member: the group turns classic
        _wait_type(migration_broker, group, "classic")
        tracker.settle(4)
    finally:
        producer.stop()
    acked = {(a.producer, a.seq) for a in producer.acked}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not acked <= set(tracker.consumed):
        time.sleep(0.2)
    # Commit errors up to here (the last classic members' own departure aside: an eager member
    # leaving during the rebalance its peer's departure starts commits once more after its
    # LeaveGroup, which any classic group refuses). A classic member's commit may meet a
    # rebalance (it commits again later, or the partition's next owner starts from the last
    # commit); anything else is a fault.
    report = _group_report(migration_broker, group)  # as the members leave it, for the messages below
    commit_errors = [(m.name, e) for m in members for e in m.commit_errors]
    # One at a time, the group settled in between: librdkafka can block for ever in a close that
    # meets the rebalance its peer's departure started (its rebalance callback asks for the
    # rebalance protocol of a group handle the close already ended; librdkafka issue 4041). It
    # blocks holding the GIL, so no bounded join or test timeout can end it: it must not happen.
    members[0].close()
    _wait_classic_members(migration_broker, group, 1)
    members[1].close()
    assert not [m.name for m in members if m.close_timed_out], f"a member's close hung\n{report}"
    assert not tracker.violations, f"{tracker.violations[:5]}\n{report}"
    assert producer.acked and acked <= set(tracker.consumed), \
        f"{len(acked - set(tracker.consumed))} acknowledged records were never consumed\n{report}"
    expected = ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")
    unexpected = [(name, e) for name, e in commit_errors if not any(x in e for x in expected)]
    assert not unexpected, f"{unexpected}\n{report}"
    # Everything consumed was committed: a new member of the group starts at the end.
    late = Consumer({"bootstrap.servers": migration_broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "log_level": 0})
    try:
        late.subscribe([topic])
        deadline = time.monotonic() + 30
        extra, assigned, quiet_since = 0, False, time.monotonic()
        while time.monotonic() < deadline and (not assigned or time.monotonic() - quiet_since < 3):
            msg = late.poll(0.2)
            assigned = assigned or bool(late.assignment())
            if msg is not None and not msg.error():
                extra += 1
                quiet_since = time.monotonic()
        assert assigned, f"the late member got no assignment\n{_group_report(migration_broker, group)}"
        assert extra == 0, f"{extra} records were consumed again: commits were lost\n{report}"
        committed = late.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
        assert all(tp.error is None or tp.error.code() == KafkaError.NO_ERROR for tp in committed)
    finally:
        late_closed = _close_within(late, 60)
    assert late_closed, f"the late member's close hung\n{_group_report(migration_broker, group)}"


def test_restart_resumes_a_mixed_group(broker_factory: Callable[..., BrokerProcess]) -> None:
    """kill -9 after the upgrade: the classic member is still a member of the consumer group,
    with its generation, partitions and protocol."""
    broker = broker_factory(OVERRIDES)
    topic = create_topic(broker, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, c = ClassicMember(broker, group, topic), ConsumerMember(broker, group)
    try:
        assert a.join().error_code == NONE
        assert a.sync([(a.member_id, _assignment(topic, [0, 1]))]).error_code == NONE
        assert c.join(topic).error_code == NONE
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        assert a.join(owned=[0, 1]).error_code == NONE and a.sync().error_code == NONE
        assert a.join(owned=a.assigned).error_code == NONE and a.sync().error_code == NONE
        c.heartbeat()
        assert a.heartbeat() == NONE and len(a.assigned) == 1 and c.partitions() == {0, 1} - set(a.assigned)
        broker.kill9()
        broker.start()
        for m in (a, c):
            m.client.close()
            m.client = RawClient(broker)
        deadline = time.monotonic() + 60
        code = a.heartbeat()
        while code in RETRIABLE and time.monotonic() < deadline:
            time.sleep(0.2)
            code = a.heartbeat()
        assert code == NONE
        kept = a.assigned
        assert a.sync().error_code == NONE and a.assigned == kept
        assert c.heartbeat().error_code == NONE and c.partitions() == {0, 1} - set(kept)
        assert _group_type(broker, group)[0] == "consumer"
    finally:
        a.close()
        c.close()


def test_upgrade_mid_rebalance_keeps_what_classic_members_own(migration_broker: BrokerProcess,
                                                             raw: Callable[..., Any]) -> None:
    """A classic group whose assignment was reset by a rebalance (CompletingRebalance -> Preparing)
    is upgraded: what its cooperative members said they own at their last JoinGroup is still theirs,
    so the joining consumer-protocol member gets nothing they have not given up."""
    topic = create_topic(migration_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b, c = (raw(ClassicMember, group, topic) for _ in range(3))
    assert a.join().error_code == NONE
    assert a.sync([(a.member_id, _assignment(topic, [0, 1, 2, 3]))]).error_code == NONE
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        b_joined = pool.submit(b.join)  # parks until a rejoins
        time.sleep(0.5)
        assert a.join(owned=[0, 1, 2, 3]).error_code == NONE  # generation 2, CompletingRebalance
        assert b_joined.result(30).error_code == NONE
        c_joined = pool.submit(c.join)  # a new member: back to PreparingRebalance, assignments reset
        time.sleep(0.5)
        k = raw(ConsumerMember, group)
        assert k.join(topic).error_code == NONE  # upgrades the group
        assert c_joined.result(30).error_code == REBALANCE_IN_PROGRESS
    for _ in range(3):
        k.heartbeat()
    assert k.partitions() == set()  # all still a's until it gives some up


def test_downgrade_rebalance_waits_its_own_rebalance_timeout(migration_broker: BrokerProcess,
                                                           raw: Callable[..., Any]) -> None:
    """A classic group upgraded mid-rebalance and downgraded soon after: the downgrade's rebalance
    waits its members for their whole rebalance timeout (10 s) from the downgrade. The join
    deadline of the rebalance the upgrade ended must not end it early and drop a member that is
    still within its time."""
    topic = create_topic(migration_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = raw(ClassicMember, group, topic), raw(ClassicMember, group, topic)
    assert a.join().error_code == NONE
    assert a.sync([(a.member_id, _assignment(topic, [0, 1, 2, 3]))]).error_code == NONE
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        b_joined = pool.submit(b.join)  # PreparingRebalance: its join deadline is 10 s from now
        started = time.monotonic()
        time.sleep(6)
        k = raw(ConsumerMember, group)
        assert k.join(topic).error_code == NONE  # upgrades the group, ending that rebalance
        assert b_joined.result(30).error_code == REBALANCE_IN_PROGRESS
        assert k.send(member_epoch=-1).error_code == NONE  # downgrades: a new rebalance, 10 s from here
        downgraded = time.monotonic()
        assert _group_type(migration_broker, group)[0] == "classic"
        a_joined = pool.submit(a.join)
        # b rejoins after the old deadline, well within the new one.
        time.sleep(max(0.0, started + 12.5 - time.monotonic()))
        assert time.monotonic() < downgraded + 8, "the machine is too slow for this test's margins"
        b_rejoined = b.join()
        assert b_rejoined.error_code == NONE, f"{b_rejoined}\n{_group_report(migration_broker, group)}"
        a_rejoined = a_joined.result(30)
    assert a_rejoined.error_code == NONE
    leader = next(r for r in (a_rejoined, b_rejoined) if r.member_id == r.leader)
    assert sorted(m.member_id for m in leader.members) == sorted([a.member_id, b.member_id])


def test_no_upgrade_of_a_group_with_a_malformed_subscription(migration_broker: BrokerProcess,
                                                             raw: Callable[..., Any]) -> None:
    topic = create_topic(migration_broker, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = raw(ClassicMember, group, topic)
    assert a.join(metadata=b"\x00\x00\x7f").error_code == NONE  # the classic protocol does not read it
    assert raw(ConsumerMember, group).join(topic).error_code == GROUP_ID_NOT_FOUND
    assert _group_type(migration_broker, group)[0] == "classic"


def test_disabled_policy_keeps_the_protocols_apart(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory({**OVERRIDES, "group.consumer.migration.policy": "disabled"})
    topic = create_topic(broker, 2)
    classic_group, consumer_group = f"g-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    a, c = ClassicMember(broker, classic_group, topic), ConsumerMember(broker, classic_group)
    b, d = ClassicMember(broker, consumer_group, topic), ConsumerMember(broker, consumer_group)
    try:
        assert a.join().error_code == NONE
        assert c.join(topic).error_code == GROUP_ID_NOT_FOUND
        assert d.join(topic).error_code == NONE
        assert b.join().error_code == INCONSISTENT_GROUP_PROTOCOL
    finally:
        for m in (a, b, c, d):
            m.close()
