"""Consumer groups with real clients against a real broker: assignment, rebalances, offsets.

confluent-kafka (librdkafka) is the main client; kafka-python and aiokafka are second
opinions. Session timeouts are small (the broker's group.min.session.timeout.ms is
lowered) so that expiry scenarios finish in seconds.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

SESSION_MS = 3000
GROUP_OVERRIDES = {"group.min.session.timeout.ms": 500, "offsets.topic.num.partitions": 5}


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("groups"), GROUP_OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.close()


# -- helpers -----------------------------------------------------------------------
def create_topic(broker: BrokerProcess, partitions: int, name: str | None = None) -> str:
    name = name or f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)
    return name


def produce(broker: BrokerProcess, topic: str, n: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"{i}".encode(), partition=i % partitions)
    assert p.flush(15) == 0


_OPEN: list[Member] = []


@pytest.fixture(autouse=True)
def _close_members() -> Iterator[None]:
    """Members left open by a failing test would retry a dead broker forever."""
    yield
    while _OPEN:
        _OPEN.pop().close()


class Member:
    """A confluent-kafka group member that remembers its rebalance callbacks."""

    def __init__(self, broker: BrokerProcess, group: str, topics: list[str], commit_on_revoke: bool = True,
                 **conf: Any) -> None:
        _OPEN.append(self)
        self.closed = False
        self.commit_on_revoke = commit_on_revoke
        self.revoked = 0
        self.assigned_events = 0
        self.consumer = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 200, "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000, **conf})
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.records: list[tuple[str, int, int]] = []

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned_events += 1

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self.revoked += 1
            # the usual pattern: commit what was processed before giving partitions away
            if not self.commit_on_revoke:
                return
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                # _DESTROY: librdkafka aborts a commit made from the revoke callback while close() tears
                # the handle down (a client-side race, seen once under load); nothing to assert on then.
                if exc.args[0].code() not in (KafkaError._NO_OFFSET, KafkaError._DESTROY):
                    raise

    def poll(self, timeout: float = 0.05) -> None:
        msg = self.consumer.poll(timeout)
        if msg is not None and not msg.error():
            self.records.append((msg.topic(), msg.partition(), msg.offset()))

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def pump(members: list[Member], until: Callable[[], bool], timeout: float = 30.0) -> float:
    """Poll every member round-robin until the condition holds; returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        for m in members:
            m.poll()
        if until():
            return time.monotonic() - start
    raise AssertionError(f"condition not met within {timeout}s; assignments: "
                         f"{[sorted(m.assignment()) for m in members]}")


def partitions_of(topic: str, n: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(n)}


def disjoint_cover(members: list[Member], expected: set[tuple[str, int]]) -> bool:
    seen: list[tuple[str, int]] = [tp for m in members for tp in m.assignment()]
    return len(seen) == len(set(seen)) and set(seen) == expected


def committed(broker: BrokerProcess, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], 15)]
    finally:
        c.close()


# -- membership and assignment ---------------------------------------------------------
def test_three_members_share_six_partitions_and_rebalance(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 6)
    produce(gbroker, topic, 600, 6)
    group = f"g-{uuid.uuid4().hex[:6]}"
    members = [Member(gbroker, group, [topic]) for _ in range(3)]
    everything = partitions_of(topic, 6)
    pump(members, lambda: disjoint_cover(members, everything) and all(len(m.assignment()) == 2 for m in members))
    pump(members, lambda: sum(len(m.records) for m in members) >= 600)
    all_records = [r for m in members for r in m.records]
    assert len(all_records) == 600 and len(set(all_records)) == 600  # exactly once across the group
    for m in members:
        m.consumer.commit(asynchronous=False)
    assert sum(committed(gbroker, group, topic, 6)) == 600

    # a member closes (LeaveGroup): its partitions move to the others well within the session timeout
    first = members[0]
    first.close()
    survivors = members[1:]
    took = pump(survivors, lambda: disjoint_cover(survivors, everything), timeout=SESSION_MS / 1000)
    assert took < SESSION_MS / 1000

    # a new member joins: a rebalance spreads the partitions over three members again
    newcomer = Member(gbroker, group, [topic])
    members = [*survivors, newcomer]
    pump(members, lambda: disjoint_cover(members, everything) and all(len(m.assignment()) == 2 for m in members))
    # it resumes from the committed offsets: nothing is read twice
    produce(gbroker, topic, 60, 6)
    everyone = [first, *members]
    pump(members, lambda: sum(len(m.records) for m in everyone) >= 600 + 60)
    assert len([r for m in everyone for r in m.records]) == 660
    assert len({r for m in everyone for r in m.records}) == 660
    for m in members:
        m.close()


@pytest.mark.slow
def test_killed_member_is_replaced_after_session_timeout(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 4)
    group = f"g-{uuid.uuid4().hex[:6]}"
    script = f"""
import sys, time
from confluent_kafka import Consumer
c = Consumer({{"bootstrap.servers": "{gbroker.bootstrap}", "group.id": "{group}",
              "session.timeout.ms": {SESSION_MS}, "heartbeat.interval.ms": 200}})
c.subscribe(["{topic}"])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
"""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        survivor = Member(gbroker, group, [topic])
        everything = partitions_of(topic, 4)
        pump([survivor], lambda: len(survivor.assignment()) == 2)
        child.kill()  # SIGKILL: no LeaveGroup, only the session timeout can tell
        child.wait(10)
        t0 = time.monotonic()
        pump([survivor], lambda: survivor.assignment() == everything, timeout=SESSION_MS / 1000 + 10)
        assert time.monotonic() - t0 >= SESSION_MS / 1000 * 0.5
        survivor.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def _members_for_assignor(broker: BrokerProcess, strategy: str, topics: list[str], group: str) -> list[Member]:
    # client ids fix the member-id order (client.id + "-" + uuid), which the assignors sort by
    return [Member(broker, group, topics, **{"partition.assignment.strategy": strategy, "client.id": f"C{i}"})
            for i in range(3)]


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_client_assignors(gbroker: BrokerProcess, strategy: str) -> None:
    t0 = create_topic(gbroker, 3, f"T0-{uuid.uuid4().hex[:6]}")
    t1 = create_topic(gbroker, 3, f"T1-{uuid.uuid4().hex[:6]}")
    group = f"g-{strategy}-{uuid.uuid4().hex[:6]}"
    members = _members_for_assignor(gbroker, strategy, [t0, t1], group)
    everything = partitions_of(t0, 3) | partitions_of(t1, 3)
    pump(members, lambda: disjoint_cover(members, everything) and all(len(m.assignment()) == 2 for m in members))
    before = [m.assignment() for m in members]
    revokes_before = [m.revoked for m in members]
    if strategy in ("range", "roundrobin"):
        # with 3 partitions per topic and 3 members, both give Ci = {T0p_i, T1p_i}
        assert before == [{(t0, i), (t1, i)} for i in range(3)]
    c2_lost = members[2].assignment()
    members[2].close()
    survivors = members[:2]
    sizes = [4, 2] if strategy == "range" else [3, 3]
    pump(survivors, lambda: disjoint_cover(survivors, everything)
         and [len(m.assignment()) for m in survivors] == sizes)
    after = [m.assignment() for m in survivors]
    if strategy == "roundrobin":
        # the seeds' example: everything is dealt again over C0 and C1
        assert after == [{(t0, 0), (t0, 2), (t1, 1)}, {(t0, 1), (t1, 0), (t1, 2)}]
    elif strategy == "range":
        # per topic, the first member gets the extra partition: C0 = p0,p1 and C1 = p2 of each topic
        assert after == [{(t0, 0), (t0, 1), (t1, 0), (t1, 1)}, {(t0, 2), (t1, 2)}]
    else:
        # sticky: C0 and C1 keep what they had and each takes one of C2's partitions
        for old, new in zip(before[:2], after, strict=True):
            assert old <= new and len(new - old) == 1
        assert (after[0] - before[0]) | (after[1] - before[1]) == c2_lost
        # incremental: nothing was taken away from them
        assert [m.revoked for m in survivors] == revokes_before[:2]
    for m in survivors:
        m.close()


def test_two_groups_each_get_everything_and_idle_members(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 2)
    produce(gbroker, topic, 50, 2)
    a = [Member(gbroker, "ga-" + topic, [topic]) for _ in range(3)]  # 3 members, 2 partitions
    b = [Member(gbroker, "gb-" + topic, [topic])]
    everyone = a + b
    pump(everyone, lambda: sum(len(m.records) for m in a) >= 50 and len(b[0].records) >= 50)
    assert len({r for m in a for r in m.records}) == 50 and len(set(b[0].records)) == 50
    sizes = sorted(len(m.assignment()) for m in a)
    assert sizes == [0, 1, 1]  # one member idles: a partition has exactly one owner in a group
    for m in everyone:
        m.close()


def test_static_member_restart_does_not_rebalance(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 4)
    group = f"g-static-{uuid.uuid4().hex[:6]}"
    a = Member(gbroker, group, [topic], **{"group.instance.id": "a", "session.timeout.ms": 6000})
    b = Member(gbroker, group, [topic], **{"group.instance.id": "b", "session.timeout.ms": 6000})
    everything = partitions_of(topic, 4)
    pump([a, b], lambda: disjoint_cover([a, b], everything) and len(a.assignment()) == 2)
    time.sleep(1)
    pump([a, b], lambda: True)
    a_parts, b_events, b_revokes = a.assignment(), b.assigned_events, b.revoked
    a.close()  # a static member does not send LeaveGroup
    a2 = Member(gbroker, group, [topic], **{"group.instance.id": "a", "session.timeout.ms": 6000})
    pump([a2, b], lambda: a2.assignment() == a_parts)
    end = time.monotonic() + 2
    while time.monotonic() < end:
        pump([a2, b], lambda: True)
    assert b.revoked == b_revokes and b.assigned_events == b_events  # b never noticed
    assert b.assignment() == everything - a_parts
    a2.close()
    b.close()


# -- committed offsets -------------------------------------------------------------------
def test_commit_sync_async_and_auto_commit(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 2)
    produce(gbroker, topic, 40, 2)
    callbacks: list[Any] = []
    m = Member(gbroker, "g-async-" + topic, [topic],
               on_commit=lambda err, parts: callbacks.append((err, parts)))
    pump([m], lambda: len(m.records) >= 40)
    m.consumer.commit(asynchronous=True)
    pump([m], lambda: bool(callbacks))
    assert callbacks[0][0] is None and {tp.offset for tp in callbacks[0][1]} == {20}
    m.close()
    assert committed(gbroker, "g-async-" + topic, topic, 2) == [20, 20]

    auto = Member(gbroker, "g-auto-" + topic, [topic], **{"enable.auto.commit": True,
                                                          "auto.commit.interval.ms": 100})
    pump([auto], lambda: len(auto.records) >= 40)
    time.sleep(0.5)
    pump([auto], lambda: True)
    auto.close()
    assert committed(gbroker, "g-auto-" + topic, topic, 2) == [20, 20]


def test_auto_offset_reset_for_new_group_and_out_of_range(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 1)
    produce(gbroker, topic, 10, 1)

    def first_offset(group: str, reset: str) -> int | str:
        c = Member(gbroker, group, [topic], commit_on_revoke=False, **{"auto.offset.reset": reset})
        produced: list[int] = []
        deadline = time.monotonic() + 15
        try:
            while time.monotonic() < deadline:
                msg = c.consumer.poll(0.2)
                if msg is None:
                    if reset == "latest" and c.assignment() and not produced:
                        time.sleep(1)  # let the consumer reset to the end first
                        produce(gbroker, topic, 1, 1)  # "latest" sees only records produced from now on
                        produced.append(1)
                    continue
                if msg.error():
                    return "error" if msg.error().code() == KafkaError._AUTO_OFFSET_RESET else str(msg.error())
                return msg.offset()
            raise AssertionError("nothing consumed")
        finally:
            c.close()

    assert first_offset(f"new-{uuid.uuid4().hex[:6]}", "earliest") == 0
    assert first_offset(f"new-{uuid.uuid4().hex[:6]}", "latest") == 10
    assert first_offset(f"new-{uuid.uuid4().hex[:6]}", "error") == "error"
    # committed offset 3, then records below 8 are deleted: the committed offset is out of range
    group = f"oor-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    c.close()
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 8)]).values():
        f.result(15)
    assert first_offset(group, "error") == "error"
    assert first_offset(group, "earliest") == 8


def test_simple_consumer_commits_without_group_management(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 1)
    produce(gbroker, topic, 5, 1)
    group = f"simple-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 5 and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg.offset())
    c.commit(asynchronous=False)
    c.close()
    assert committed(gbroker, group, topic, 1) == [5]


def test_kafka_python_and_aiokafka_groups(gbroker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    topic = create_topic(gbroker, 3)
    produce(gbroker, topic, 30, 3)
    kc = KafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap, group_id="kp-" + topic,
                       auto_offset_reset="earliest", consumer_timeout_ms=4000, enable_auto_commit=False)
    got = [(r.partition, r.offset) for r in kc]
    kc.commit()
    kc.close()
    assert len(set(got)) == 30
    assert committed(gbroker, "kp-" + topic, topic, 3) == [10, 10, 10]

    async def aio() -> int:
        c = AIOKafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap, group_id="aio-" + topic,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        n = 0
        try:
            while n < 30:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=500), 15)
                n += sum(len(v) for v in batch.values())
            await c.commit()
        finally:
            await c.stop()
        return n

    assert asyncio.run(aio()) == 30
    assert committed(gbroker, "aio-" + topic, topic, 3) == [10, 10, 10]


def test_admin_list_describe_delete(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 2)
    group = f"adm-{uuid.uuid4().hex[:6]}"
    m = Member(gbroker, group, [topic], **{"client.id": "describer"})
    pump([m], lambda: len(m.assignment()) == 2)
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(15).valid}
    assert group in listed and str(listed[group].state).endswith("STABLE")
    desc = admin.describe_consumer_groups([group])[group].result(15)
    assert len(desc.members) == 1 and desc.members[0].client_id == "describer"
    assert desc.members[0].host.endswith("127.0.0.1")
    assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1}
    with pytest.raises(Exception, match="NON_EMPTY_GROUP|not empty"):
        admin.delete_consumer_groups([group])[group].result(15)
    m.consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    m.close()
    admin.delete_consumer_groups([group])[group].result(15)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}
    assert committed(gbroker, group, topic, 2) == [-1001, -1001]


# -- durability ------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["restart", pytest.param("kill9", marks=pytest.mark.slow)])
def test_committed_offsets_survive_broker_restart(tmp_path_factory: pytest.TempPathFactory, how: str) -> None:
    b = BrokerProcess(tmp_path_factory.mktemp("restart"), GROUP_OVERRIDES).start()
    try:
        topic = create_topic(b, 3)
        produce(b, topic, 30, 3)
        m = Member(b, "durable", [topic], commit_on_revoke=False)
        pump([m], lambda: len(m.records) >= 30)
        m.consumer.commit(offsets=[TopicPartition(topic, p, 4 + p) for p in range(3)], asynchronous=False)
        m.close()
        if how == "kill9":
            b.kill9()
            b.start()
        else:
            b.restart()
        assert committed(b, "durable", topic, 3) == [4, 5, 6]
        again = Member(b, "durable", [topic])
        pump([again], lambda: len(again.records) >= 30 - 15)
        firsts = {p: min(o for t, pp, o in again.records if pp == p) for p in range(3)}
        assert firsts == {0: 4, 1: 5, 2: 6}
        again.close()
    finally:
        b.close()


@pytest.mark.parametrize("how", ["restart", pytest.param("kill9", marks=pytest.mark.slow)])
def test_deleted_groups_stay_deleted_after_a_coordinator_restart(tmp_path_factory: pytest.TempPathFactory,
                                                                 how: str) -> None:
    """DeleteGroups answers once its tombstones are committed: the coordinator that loads the offsets
    topic again after a restart finds the deleted groups gone and the others intact."""
    b = BrokerProcess(tmp_path_factory.mktemp("deleted"), GROUP_OVERRIDES).start()
    try:
        topic = create_topic(b, 2)
        groups = [f"del-{i}" for i in range(4)]
        for i, group in enumerate(groups):
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
            c.commit(offsets=[TopicPartition(topic, p, 10 * i + p + 1) for p in range(2)], asynchronous=False)
            c.close()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        deleted = groups[:2]
        for future in admin.delete_consumer_groups(deleted).values():
            future.result(15)
        if how == "kill9":
            b.kill9()
            b.start()
        else:
            b.restart()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        listed = {g.group_id for g in admin.list_consumer_groups().result(15).valid}
        assert not set(deleted) & listed and set(groups[2:]) <= listed
        for i, group in enumerate(groups):
            expected = [-1001, -1001] if group in deleted else [10 * i + 1, 10 * i + 2]
            assert committed(b, group, topic, 2) == expected, group
        with pytest.raises(Exception, match="GROUP_ID_NOT_FOUND|does not exist"):
            admin.delete_consumer_groups([deleted[0]])[deleted[0]].result(15)
    finally:
        b.close()


# -- bad input -----------------------------------------------------------------------------
def _coordinator_client(broker: BrokerProcess, group: str) -> RawClient:
    c = RawClient(broker)
    resp = decode(FindCoordinatorResponse, c.request(FindCoordinatorRequest(key=group, key_type=0), 1), 1, False)
    assert resp.error_code == 0 and resp.port == broker.port
    return c


def test_bad_group_requests_get_kafka_errors(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 1)
    group = f"bad-{uuid.uuid4().hex[:6]}"
    c = _coordinator_client(gbroker, group)
    proto = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00")]

    def join(member_id: str, protocol_type: str = "consumer", protocols: list[Any] | None = None) -> Any:
        req = JoinGroupRequest(group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=5000,
                               member_id=member_id, group_instance_id=None, protocol_type=protocol_type,
                               protocols=proto if protocols is None else protocols)
        return decode(JoinGroupResponse, c.request(req, 5), 5, False)

    assert join("").error_code == 79  # MEMBER_ID_REQUIRED
    first = join("")
    joined = join(first.member_id)
    assert joined.error_code == 0 and joined.generation_id == 1
    sync = SyncGroupRequest(group_id=group, generation_id=1, member_id=joined.member_id, group_instance_id=None,
                            assignments=[])
    assert decode(SyncGroupResponse, c.request(sync, 3), 3, False).error_code == 0
    # another protocol type, or an empty protocol list, cannot join this consumer group
    assert join("", protocol_type="connect").error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
    assert join("", protocols=[]).error_code == 23
    # a member id the coordinator never handed out
    assert join("forged-member").error_code == 25  # UNKNOWN_MEMBER_ID

    def commit(topic_name: str, generation: int, member_id: str) -> int:
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        P = T.OffsetCommitRequestPartition
        req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                                  group_instance_id=None, retention_time_ms=-1, topics=[
                                      T(name=topic_name, partitions=[P(partition_index=0, committed_offset=1,
                                                                       committed_leader_epoch=-1,
                                                                       committed_metadata="")])])
        resp = decode(OffsetCommitResponse, c.request(req, 7), 7, False)
        return resp.topics[0].partitions[0].error_code

    assert commit("no-such-topic", 1, joined.member_id) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert commit(topic, 0, joined.member_id) == 22  # ILLEGAL_GENERATION
    assert commit(topic, 1, "stranger") == 25  # UNKNOWN_MEMBER_ID
    assert commit(topic, 1, joined.member_id) == 0
    c.close()
    assert committed(gbroker, group, topic, 1) == [1]  # the coordinator state is intact


def test_oversized_member_metadata(gbroker: BrokerProcess) -> None:
    group = f"big-{uuid.uuid4().hex[:6]}"
    c = _coordinator_client(gbroker, group)
    proto = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x01" * (2 * 1024 * 1024))]
    req = JoinGroupRequest(group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=5000,
                           member_id="", group_instance_id="big-1", protocol_type="consumer", protocols=proto)
    joined = decode(JoinGroupResponse, c.request(req, 5), 5, False)
    assert joined.error_code == 0
    sync = SyncGroupRequest(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                            group_instance_id="big-1", assignments=[])
    # the group record exceeds max.message.bytes of __consumer_offsets: Kafka answers UNKNOWN_SERVER_ERROR
    assert decode(SyncGroupResponse, c.request(sync, 3), 3, False).error_code == -1
    c.close()
    # the broker and other groups carry on
    topic = create_topic(gbroker, 1)
    m = Member(gbroker, "after-big-" + topic, [topic])
    pump([m], lambda: len(m.assignment()) == 1)
    m.close()


# -- the consumer-groups tool -----------------------------------------------------------------
def strom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=60)


def test_consumer_groups_tool_describe_lag_and_reset_to_datetime(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 2)
    base_ts = 1_700_000_000_000
    p = Producer({"bootstrap.servers": gbroker.bootstrap})
    for i in range(20):
        p.produce(topic, value=b"v", partition=i % 2, timestamp=base_ts + (i // 2) * 1000)
    assert p.flush(15) == 0
    group = f"tool-{uuid.uuid4().hex[:6]}"
    m = Member(gbroker, group, [topic], commit_on_revoke=False, **{"client.id": "lagger"})
    pump([m], lambda: len(m.assignment()) == 2)
    m.consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 7)], asynchronous=False)
    bs = gbroker.bootstrap
    assert group in strom("consumer-groups", "--bootstrap-server", bs, "--list").stdout.split()
    out = strom("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", group)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(group)]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    assert [(r[2], r[3], r[4], r[5], r[8]) for r in rows] == [("0", "3", "10", "7", "lagger"),
                                                                ("1", "7", "10", "3", "lagger")]
    assert rows[0][7].endswith("127.0.0.1")
    state = strom("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", group, "--state").stdout
    assert "Stable" in state and "range" in state
    # resetting an active group is refused, like Kafka's tool
    refused = strom("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", group,
                    "--topic", topic, "--to-earliest", "--execute")
    assert refused.returncode == 1 and "inactive" in refused.stderr
    m.close()
    # records at or after base+4s start at offset 4 in both partitions
    when = datetime.fromtimestamp((base_ts + 4000) / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    dry = strom("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic,
                "--to-datetime", when, "--dry-run")
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert committed(gbroker, group, topic, 2) == [3, 7]
    done = strom("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic,
                 "--to-datetime", when, "--execute")
    assert done.returncode == 0, done.stderr
    assert committed(gbroker, group, topic, 2) == [4, 4]
    nxt = Member(gbroker, group, [topic], commit_on_revoke=False)
    pump([nxt], lambda: len(nxt.records) >= 12)
    assert {p: min(o for _, pp, o in nxt.records if pp == p) for p in (0, 1)} == {0: 4, 1: 4}
    nxt.close()
    shifted = strom("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic",
                    f"{topic}:1", "--shift-by", "-3", "--execute")
    assert shifted.returncode == 0 and committed(gbroker, group, topic, 2) == [4, 1]
    assert strom("consumer-groups", "--bootstrap-server", bs, "--delete", "--group", group).returncode == 0
    assert group not in strom("consumer-groups", "--bootstrap-server", bs, "--list").stdout.split()


def test_console_consumer_with_group(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 1)
    produce(gbroker, topic, 5, 1)
    group = f"console-{uuid.uuid4().hex[:6]}"
    out = strom("console-consumer", "--bootstrap-server", gbroker.bootstrap, "--topic", topic, "--group", group,
                "--from-beginning", "--max-messages", "5", "--timeout-ms", "15000")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "2", "3", "4"]
    assert committed(gbroker, group, topic, 1) == [5]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer(gbroker: BrokerProcess) -> None:
    topic = create_topic(gbroker, 2)
    produce(gbroker, topic, 10, 2)
    group = f"kcat-{uuid.uuid4().hex[:6]}"
    out = subprocess.run(["kcat", "-b", gbroker.bootstrap, "-G", group, "-o", "beginning", "-c", "10",
                          "-f", "%p:%o\n", "-X", "auto.commit.interval.ms=100", topic],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(f"{i % 2}:{i // 2}" for i in range(10))
    assert committed(gbroker, group, topic, 2) == [5, 5]


def test_batched_find_coordinator_offset_fetch_and_offset_delete(gbroker: BrokerProcess) -> None:
    from kafka.protocol.consumer.group import (
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
    )

    topic = create_topic(gbroker, 2)
    groups = [f"multi-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
    for i, g in enumerate(groups):
        c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": g})
        c.commit(offsets=[TopicPartition(topic, 0, 10 + i), TopicPartition(topic, 1, 20 + i)], asynchronous=False)
        c.close()
    raw = RawClient(gbroker)
    try:
        # v4+: several keys at once, and transactional ids (key type 1) the same way
        fc = decode(FindCoordinatorResponse, raw.request(
            FindCoordinatorRequest(key_type=0, coordinator_keys=groups), 4), 4, True)
        assert [(x.key, x.error_code, x.port) for x in fc.coordinators] == [(g, 0, gbroker.port) for g in groups]
        txn = decode(FindCoordinatorResponse, raw.request(
            FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 4), 4, True)
        assert [(x.key, x.error_code, x.port) for x in txn.coordinators] == [("tx", 0, gbroker.port)]
        # OffsetFetch v8: two groups in one request, one asking for all its offsets (topics=None)
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        req = OffsetFetchRequest(groups=[
            G(group_id=groups[0], topics=[G.OffsetFetchRequestTopics(name=topic, partition_indexes=[0, 1])]),
            G(group_id=groups[1], topics=None)], require_stable=False)
        resp = decode(OffsetFetchResponse, raw.request(req, 8), 8, True)
        found = {g.group_id: {(p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions}
                 for g in resp.groups}
        assert found == {groups[0]: {(0, 10), (1, 20)}, groups[1]: {(0, 11), (1, 21)}}
        # OffsetDelete: an empty group may drop offsets; unknown groups get GROUP_ID_NOT_FOUND
        T = OffsetDeleteRequest.OffsetDeleteRequestTopic
        dreq = OffsetDeleteRequest(group_id=groups[0], topics=[
            T(name=topic, partitions=[T.OffsetDeleteRequestPartition(partition_index=0)])])
        dresp = decode(OffsetDeleteResponse, raw.request(dreq, 0), 0, False)
        assert dresp.error_code == 0 and dresp.topics[0].partitions[0].error_code == 0
        dreq.group_id = "no-such-group"
        assert decode(OffsetDeleteResponse, raw.request(dreq, 0), 0, False).error_code == 69
    finally:
        raw.close()
    assert committed(gbroker, groups[0], topic, 2) == [-1001, 20]
