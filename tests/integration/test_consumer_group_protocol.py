"""KIP-848 consumer groups (group.protocol=consumer) against a real broker.

Raw ConsumerGroupHeartbeat requests pin the protocol down version by version (epochs,
revocation before assignment, every error a member can get); confluent-kafka members joining
and leaving under load show that no partition is ever consumed by two members at once and
that nothing committed is lost.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest

from strom.protocol.group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.support.broker import BrokerProcess, free_port
from tests.support.checker import SequenceProducer
from tests.support.consumer_protocol import GroupMember, Tracker
from tests.support.metrics import metrics_port, scrape
from tests.support.raw_client import RawClient, decode
from tests.support.raw_group_members import create_topic

HEARTBEAT_MS = 300
SESSION_MS = 4000
OVERRIDES = {"group.consumer.heartbeat.interval.ms": HEARTBEAT_MS, "group.consumer.session.timeout.ms": SESSION_MS,
             "group.consumer.min.session.timeout.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 100,
             "offsets.topic.num.partitions": 3, "group.consumer.max.size": 4}
CGH = ConsumerGroupHeartbeatRequest
TopicPartitions = CGH.TopicPartitions

NONE = 0
INVALID_REQUEST = 42
UNKNOWN_MEMBER_ID = 25
GROUP_MAX_SIZE_REACHED = 81
INCONSISTENT_GROUP_PROTOCOL = 23
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128
GROUP_ID_NOT_FOUND = 69
UNSUPPORTED_VERSION = 35
GROUP_SUBSCRIBED_TO_TOPIC = 86
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848"), OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.close()


class Member:
    """A consumer-protocol member spoken for by raw requests."""

    def __init__(self, broker: BrokerProcess, group: str, version: int = 1, member_id: str | None = None,
                 instance_id: str | None = None) -> None:
        self.client = RawClient(broker)
        self.group = group
        self.version = version
        self.member_id = member_id if member_id is not None else uuid.uuid4().hex
        self.instance_id = instance_id
        self.epoch = 0
        self.assigned: dict[uuid.UUID, list[int]] = {}
        # The coordinator and its offsets topic exist before the first heartbeat.
        self.client.request(FindCoordinatorRequest(key=group), version=1)

    def send(self, **fields: Any) -> Any:
        fields.setdefault("group_id", self.group)
        fields.setdefault("member_id", self.member_id)
        fields.setdefault("member_epoch", self.epoch)
        fields.setdefault("instance_id", self.instance_id)
        deadline = time.monotonic() + 60
        while True:  # the offsets topic may still be loading right after it was created
            frame = self.client.request(CGH(**fields), version=self.version)
            resp = decode(ConsumerGroupHeartbeatResponse, frame, self.version, flexible_header=True)
            if resp.error_code not in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if resp.error_code == NONE:
            self.epoch = resp.member_epoch
            if resp.member_id:
                self.member_id = resp.member_id
            if resp.assignment is not None:
                self.assigned = {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}
        return resp

    def join(self, topics: list[str], **fields: Any) -> Any:
        return self.send(member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=topics,
                         topic_partitions=[], **fields)

    def heartbeat(self, owned: dict[uuid.UUID, list[int]] | None = None, **fields: Any) -> Any:
        tps = None if owned is None else [TopicPartitions(topic_id=t, partitions=p) for t, p in owned.items()]
        return self.send(topic_partitions=tps, **fields)

    def partitions(self) -> set[int]:
        return {p for parts in self.assigned.values() for p in parts}

    def reconnect(self, broker: BrokerProcess) -> None:
        """After a broker restart: same member, new connection (the coordinator may still be loading)."""
        self.client.close()
        self.client = RawClient(broker)
        deadline = time.monotonic() + 60
        while True:
            probe = decode(ConsumerGroupHeartbeatResponse, self.client.request(CGH(
                group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
                instance_id=self.instance_id), version=self.version), self.version, True)
            if probe.error_code not in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) \
                    or time.monotonic() > deadline:
                return
            time.sleep(0.2)

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def members(kip848_broker: BrokerProcess) -> Iterator[Callable[..., Member]]:
    made: list[Member] = []

    def make(group: str, **kwargs: Any) -> Member:
        m = Member(kip848_broker, group, **kwargs)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def test_api_versions_advertise_consumer_group_heartbeat(kip848_broker: BrokerProcess,
                                                        broker_factory: Callable[..., BrokerProcess]) -> None:
    def advertised(broker: BrokerProcess) -> dict[int, tuple[int, int]]:
        client = RawClient(broker)
        try:
            resp = decode(ApiVersionsResponse, client.request(ApiVersionsRequest(), version=0), 0, False)
        finally:
            client.close()
        return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    assert advertised(kip848_broker)[68] == (0, 1)
    classic_only = broker_factory({"group.coordinator.rebalance.protocols": "classic"})
    assert 68 not in advertised(classic_only)


@pytest.mark.parametrize("version", [0, 1])
def test_join_heartbeat_leave_every_version(kip848_broker: BrokerProcess, members: Callable[..., Member],
                                            version: int) -> None:
    topic = create_topic(kip848_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    # v0: the coordinator names the member; v1 (KIP-1082): the member names itself.
    m = members(group, version=version, member_id="" if version == 0 else None)
    resp = m.join([topic])
    assert resp.error_code == NONE, resp
    assert resp.member_id and resp.member_epoch == 1 and resp.heartbeat_interval_ms == HEARTBEAT_MS
    assert m.partitions() == {0, 1, 2, 3}
    resp = m.heartbeat(owned=m.assigned)
    assert resp.error_code == NONE and resp.member_epoch == 1
    assert resp.assignment is None  # nothing changed: no assignment in the answer
    resp = m.send(member_epoch=-1)
    assert resp.error_code == NONE and resp.member_epoch == -1
    assert m.heartbeat().error_code == UNKNOWN_MEMBER_ID  # gone


def test_v1_needs_a_member_id_and_checks_regex(kip848_broker: BrokerProcess, members: Callable[..., Member]) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    assert members(group, member_id="").join(["x"]).error_code == INVALID_REQUEST
    m = members(group)
    resp = m.send(member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_regex="t-[", topic_partitions=[])
    assert resp.error_code == INVALID_REGULAR_EXPRESSION and resp.error_message


def test_heartbeat_errors(kip848_broker: BrokerProcess, members: Callable[..., Member]) -> None:
    topic = create_topic(kip848_broker, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = members(group)
    assert a.join([topic]).error_code == NONE
    # No rebalance timeout, or owned partitions on a join: not a valid first heartbeat.
    assert members(group).send(member_epoch=0, subscribed_topic_names=[topic], topic_partitions=[]).error_code \
        == INVALID_REQUEST
    assert members(group).send(member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=[topic]).error_code \
        == INVALID_REQUEST
    assert a.heartbeat(member_epoch=a.epoch + 5).error_code == FENCED_MEMBER_EPOCH
    assert members(group).heartbeat(member_epoch=1).error_code == UNKNOWN_MEMBER_ID
    assert members(group).join([topic], server_assignor="sticky").error_code == UNSUPPORTED_ASSIGNOR
    assert members(group).send(member_epoch=-3).error_code == INVALID_REQUEST
    # group.consumer.max.size=4: a fourth member fits, a fifth does not.
    for _ in range(3):
        assert members(group).join([topic]).error_code == NONE
    assert members(group).join([topic]).error_code == GROUP_MAX_SIZE_REACHED
    # A classic member cannot join a consumer group (no online migration).
    client = RawClient(kip848_broker)
    try:
        frame = client.request(JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                                member_id="", protocol_type="consumer",
                                                protocols=[("range", b"")]), version=5)
        assert decode(JoinGroupResponse, frame, 5, False).error_code == INCONSISTENT_GROUP_PROTOCOL
    finally:
        client.close()


def test_static_member_rejoins_without_rebalance(kip848_broker: BrokerProcess,
                                                 members: Callable[..., Member]) -> None:
    topic = create_topic(kip848_broker, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = members(group, instance_id="box-1")
    assert a.join([topic]).error_code == NONE
    assert members(group, instance_id="box-1").join([topic]).error_code == UNRELEASED_INSTANCE_ID
    epoch, partitions = a.epoch, a.partitions()
    assert a.send(member_epoch=-2).member_epoch == -2
    back = members(group, instance_id="box-1")
    resp = back.join([topic])
    assert resp.error_code == NONE
    assert (resp.member_epoch, back.partitions()) == (epoch, partitions)  # same epoch: no rebalance
    # Away again, and back under the same member id this time: the same.
    assert back.send(member_epoch=-2).member_epoch == -2
    same = members(group, instance_id="box-1", member_id=back.member_id)
    resp = same.join([topic])
    assert (resp.error_code, resp.member_epoch, same.partitions()) == (NONE, epoch, partitions)


def test_partitions_are_revoked_before_they_are_assigned(kip848_broker: BrokerProcess,
                                                         members: Callable[..., Member]) -> None:
    topic = create_topic(kip848_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = members(group), members(group)
    assert a.join([topic]).error_code == NONE and a.partitions() == {0, 1, 2, 3}
    a.heartbeat(owned=a.assigned)
    assert b.join([topic]).error_code == NONE
    assert b.epoch == 2 and b.partitions() == set()  # its share is still owned by a
    resp = a.heartbeat()
    assert resp.member_epoch == 1  # a keeps its epoch until it has revoked
    kept = a.partitions()
    assert len(kept) == 2
    assert b.heartbeat().assignment is None and b.partitions() == set()
    resp = a.heartbeat(owned=a.assigned)  # revoked: a now owns only what it kept
    assert resp.member_epoch == 2
    b.heartbeat()
    assert b.partitions() == {0, 1, 2, 3} - kept


def test_session_timeout_hands_partitions_over(kip848_broker: BrokerProcess, members: Callable[..., Member]) -> None:
    topic = create_topic(kip848_broker, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = members(group), members(group)
    a.join([topic])
    a.heartbeat(owned=a.assigned)
    b.join([topic])  # a never heartbeats again
    deadline = time.monotonic() + SESSION_MS / 1000 + 30
    while b.partitions() != {0, 1} and time.monotonic() < deadline:
        time.sleep(HEARTBEAT_MS / 1000)
        assert b.heartbeat(owned=b.assigned).error_code == NONE
    assert b.partitions() == {0, 1}
    assert a.heartbeat().error_code == UNKNOWN_MEMBER_ID


def test_offset_commit_and_fetch_check_member_epochs(kip848_broker: BrokerProcess,
                                                     members: Callable[..., Member]) -> None:
    topic = create_topic(kip848_broker, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = members(group)
    a.join([topic])
    Topic, Part = OffsetCommitRequest.OffsetCommitRequestTopic, OffsetCommitRequest.OffsetCommitRequestTopic.\
        OffsetCommitRequestPartition

    def commit(member_id: str, epoch: int, offset: int, version: int = 9) -> int:
        req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
                                  group_instance_id=None, topics=[Topic(name=topic, partitions=[
                                      Part(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                           committed_metadata="")])])
        resp = decode(OffsetCommitResponse, a.client.request(req, version=version), version, version >= 8)
        return resp.topics[0].partitions[0].error_code

    def fetch(member_id: str | None, epoch: int) -> tuple[int, int]:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        req = OffsetFetchRequest(groups=[G(group_id=group, member_id=member_id, member_epoch=epoch, topics=[
            G.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])], require_stable=False)
        g = decode(OffsetFetchResponse, a.client.request(req, version=9), 9, True).groups[0]
        return g.error_code, (g.topics[0].partitions[0].committed_offset if g.topics else -2)

    assert commit(a.member_id, a.epoch, 7) == NONE
    assert commit(a.member_id, a.epoch - 1, 8) == STALE_MEMBER_EPOCH
    assert commit(a.member_id, a.epoch + 1, 8) == FENCED_MEMBER_EPOCH
    assert commit("nobody", a.epoch, 8) == UNKNOWN_MEMBER_ID
    assert commit("", -1, 8) == UNKNOWN_MEMBER_ID  # the group has members: no commits from outside
    assert commit(a.member_id, a.epoch, 8, version=8) == UNSUPPORTED_VERSION  # no member epoch before v9
    assert fetch(a.member_id, a.epoch) == (NONE, 7)
    assert fetch(a.member_id, a.epoch - 1)[0] == STALE_MEMBER_EPOCH
    assert fetch("nobody", a.epoch)[0] == UNKNOWN_MEMBER_ID
    assert fetch(None, -1) == (NONE, 7)  # an admin client
    # The group consumes the topic: its offsets cannot be deleted under it.
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    dreq = OffsetDeleteRequest(group_id=group, topics=[T(name=topic, partitions=[
        T.OffsetDeleteRequestPartition(partition_index=0)])])
    dresp = decode(OffsetDeleteResponse, a.client.request(dreq, 0), 0, False)
    assert dresp.topics[0].partitions[0].error_code == GROUP_SUBSCRIBED_TO_TOPIC


def test_members_join_and_leave_under_load(broker_factory: Callable[..., BrokerProcess]) -> None:
    """1 -> 5 members and back while a producer writes: never two owners of a partition, no record
    consumed twice (each member commits before it gives a partition up), none lost."""
    kip848_broker = broker_factory({**OVERRIDES, "group.consumer.max.size": 5})
    topic = create_topic(kip848_broker, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tracker = Tracker()
    producer = SequenceProducer(kip848_broker.bootstrap, topic, rate_sleep=0.002).start()
    group_members = [GroupMember(kip848_broker.bootstrap, group, topic, "m0", tracker)]

    try:
        tracker.settle(1)
        for name in ("m1", "m2", "m3", "m4"):
            group_members.append(GroupMember(kip848_broker.bootstrap, group, topic, name, tracker))
            tracker.settle(3)
        client = RawClient(kip848_broker)
        try:
            peak = _describe_group(client, group)
        finally:
            client.close()
        assert len(peak.members) == 5 and all(m.assignment.topic_partitions for m in peak.members), peak
        for m in group_members[1:]:
            m.close()
            tracker.settle(2)
    finally:
        producer.stop()
    # The last member drains everything that was produced, then leaves.
    deadline = time.monotonic() + 60
    acked = {(a.producer, a.seq) for a in producer.acked}
    while time.monotonic() < deadline and not acked <= set(tracker.consumed):
        time.sleep(0.2)
    group_members[0].close()
    assert not tracker.violations, tracker.violations[:5]
    assert producer.acked and acked <= set(tracker.consumed), "records were lost"
    twice = {k: v for k, v in tracker.consumed.items() if len(v) > 1}
    assert not twice, list(twice.items())[:5]
    assert not [e for m in group_members for e in m.commit_errors]
    # Everything consumed was committed: a new member of the group starts at the end.
    late = Consumer({"bootstrap.servers": kip848_broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "log_level": 0})
    try:
        late.subscribe([topic])
        deadline = time.monotonic() + 30
        extra = 0
        assigned = False
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and (not assigned or time.monotonic() - quiet_since < 3):
            msg = late.poll(0.2)
            assigned = assigned or bool(late.assignment())
            if msg is not None and not msg.error():
                extra += 1
                quiet_since = time.monotonic()
        assert assigned
        assert extra == 0, f"{extra} records were consumed again: commits were lost"
        committed = late.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
        assert all(tp.error is None or tp.error.code() == KafkaError.NO_ERROR for tp in committed)
    finally:
        late.close()


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_every_version(kip848_broker: BrokerProcess, members: Callable[..., Member],
                                               version: int) -> None:
    topic = create_topic(kip848_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = members(group, instance_id="box-a"), members(group)
    a.join([topic], rack_id="r1")
    a.heartbeat(owned=a.assigned)
    b.join([topic], server_assignor="range")
    a.heartbeat()  # a must now revoke two partitions: the group is reconciling
    req = ConsumerGroupDescribeRequest(group_ids=[group, "no-such-group"], include_authorized_operations=False)
    resp = decode(ConsumerGroupDescribeResponse, a.client.request(req, version=version), version, True)
    found, missing = resp.groups
    assert (missing.error_code, found.error_code) == (GROUP_ID_NOT_FOUND, NONE)
    assert (found.group_state, found.group_epoch, found.assignment_epoch) == ("Reconciling", 2, 2)
    assert found.assignor_name == "range"  # the one member that asked for one wins
    by_id = {m.member_id: m for m in found.members}
    ma, mb = by_id[a.member_id], by_id[b.member_id]
    assert (ma.member_epoch, ma.instance_id, ma.rack_id, ma.subscribed_topic_names) == (1, "box-a", "r1", [topic])
    assert mb.member_epoch == 2 and mb.assignment.topic_partitions == []  # waiting for a to revoke
    target = {m.member_id: sorted(p for tp in m.target_assignment.topic_partitions for p in tp.partitions)
              for m in found.members}
    assert sorted(target[a.member_id] + target[b.member_id]) == [0, 1, 2, 3]
    assert sorted(p for tp in ma.assignment.topic_partitions for p in tp.partitions) == target[a.member_id]
    assert ma.assignment.topic_partitions[0].topic_name == topic
    if version >= 1:
        assert ma.member_type == 1


def test_list_groups_filters_by_type(kip848_broker: BrokerProcess, members: Callable[..., Member]) -> None:
    topic = create_topic(kip848_broker, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = members(group)
    a.join([topic])
    client = a.client

    def listed(types: list[str]) -> dict[str, tuple[str, str]]:
        resp = decode(ListGroupsResponse, client.request(ListGroupsRequest(states_filter=[], types_filter=types),
                                                         version=5), 5, True)
        return {g.group_id: (g.group_type, g.group_state) for g in resp.groups}

    assert listed(["consumer"])[group] == ("consumer", "Stable")
    assert group not in listed(["classic"])
    assert listed([])[group] == ("consumer", "Stable")
    # DescribeGroups (the classic API) answers for a consumer group as Kafka does before v6: Dead.
    resp = decode(DescribeGroupsResponse, client.request(DescribeGroupsRequest(groups=[group]), version=5), 5, True)
    assert resp.groups[0].group_state == "Dead" and resp.groups[0].members == []
    # confluent-kafka's admin client describes it with ConsumerGroupDescribe.
    admin = AdminClient({"bootstrap.servers": kip848_broker.bootstrap})
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
    assert desc.type == ConsumerGroupType.CONSUMER
    assert [m.member_id for m in desc.members] == [a.member_id]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_shows_type_and_member_epochs(kip848_broker: BrokerProcess, members: Callable[..., Member]) -> None:
    topic = create_topic(kip848_broker, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = members(group)
    a.join([topic])
    a.heartbeat(owned=a.assigned)
    stop = threading.Event()

    def keep_alive() -> None:  # the tool takes longer than a session to start on a busy machine
        while not stop.wait(HEARTBEAT_MS / 1000):
            a.heartbeat()

    alive = threading.Thread(target=keep_alive, daemon=True)
    alive.start()
    try:
        _check_cli(kip848_broker, group, topic, a)
    finally:
        stop.set()
        alive.join(10)


def _check_cli(kip848_broker: BrokerProcess, group: str, topic: str, a: Member) -> None:
    boot = ["--bootstrap-server", kip848_broker.bootstrap]
    out = _cli("consumer-groups", *boot, "--list", "--type")
    assert out.returncode == 0, out.stderr
    assert [group, "Consumer"] in [line.split() for line in out.stdout.splitlines()]
    out = _cli("consumer-groups", *boot, "--describe", "--group", group, "--state")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.strip().splitlines()
    assert header.split()[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert row.split()[-5:] == ["uniform", "Stable", "1", "1", "1"]
    out = _cli("consumer-groups", *boot, "--describe", "--group", group, "--members", "--verbose")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.strip().splitlines()
    assert "CURRENT-EPOCH" in header and "TARGET-ASSIGNMENT" in header
    cells = row.split()
    assert cells[1] == a.member_id and cells[-4:] == ["1", f"{topic}(0,1)", "1", f"{topic}(0,1)"]


def _describe(member: Member) -> Any:
    return _describe_group(member.client, member.group)


def _describe_group(client: RawClient, group: str) -> Any:
    req = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
    return decode(ConsumerGroupDescribeResponse, client.request(req, version=1), 1, True).groups[0]


def test_restart_resumes_the_group(broker_factory: Callable[..., BrokerProcess]) -> None:
    """kill -9 and restart: the group comes back from its records with the same epochs and
    partitions (no rebalance), a member that left stays gone, committed offsets are there, and a
    static member that had left for a moment gets its partitions back."""
    broker = broker_factory(OVERRIDES)
    topic = create_topic(broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b, c = Member(broker, group), Member(broker, group), Member(broker, group)
    s = Member(broker, group, instance_id="box-s")
    try:
        for m in (a, b, c, s):
            assert m.join([topic]).error_code == NONE
        for _ in range(4):  # let everyone revoke and catch up with the target
            for m in (a, b, c, s):
                m.heartbeat(owned=m.assigned)
        before = _describe(a)
        assert before.group_state == "Stable", before
        assert c.send(member_epoch=-1).error_code == NONE
        for _ in range(3):
            for m in (a, b, s):
                m.heartbeat(owned=m.assigned)
        before = _describe(a)
        assert before.group_state == "Stable"
        owned = {m.member_id: m.partitions() for m in (a, b, s)}
        assert owned[a.member_id] | owned[b.member_id] | owned[s.member_id] == {0, 1, 2, 3}
        epochs = {m.member_id: m.epoch for m in (a, b, s)}
        assert s.send(member_epoch=-2).member_epoch == -2  # the static member steps away
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        commit = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=a.epoch, member_id=a.member_id,
                                     group_instance_id=None, topics=[Topic(name=topic, partitions=[
                                         Topic.OffsetCommitRequestPartition(partition_index=min(owned[a.member_id]),
                                                                            committed_offset=42,
                                                                            committed_leader_epoch=-1,
                                                                            committed_metadata="")])])
        resp = decode(OffsetCommitResponse, a.client.request(commit, version=9), 9, True)
        assert resp.topics[0].partitions[0].error_code == NONE

        broker.kill9()
        broker.start()
        for m in (a, b, c):  # s stays away: only its records say it left
            m.reconnect(broker)
        for m in (a, b):
            resp = m.heartbeat(owned=m.assigned)
            assert resp.error_code == NONE, resp
            assert (resp.member_epoch, m.partitions()) == (epochs[m.member_id], owned[m.member_id])
        after = _describe(a)
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == \
            ("Stable", before.group_epoch, before.assignment_epoch)
        assert sorted(m.member_id for m in after.members) == sorted([a.member_id, b.member_id, s.member_id])
        assert c.heartbeat().error_code == UNKNOWN_MEMBER_ID  # it had left: its tombstones replayed
        back = Member(broker, group, instance_id="box-s")
        try:
            resp = back.join([topic])
            assert (resp.error_code, resp.member_epoch, back.partitions()) == \
                (NONE, epochs[s.member_id], owned[s.member_id])
        finally:
            back.close()
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        fetch = OffsetFetchRequest(groups=[G(group_id=group, member_id=a.member_id, member_epoch=a.epoch, topics=[
            G.OffsetFetchRequestTopics(name=topic, partition_indexes=[min(owned[a.member_id])])])],
            require_stable=False)
        g = decode(OffsetFetchResponse, a.client.request(fetch, version=9), 9, True).groups[0]
        assert (g.error_code, g.topics[0].partitions[0].committed_offset) == (NONE, 42)
    finally:
        for m in (a, b, c, s):
            m.close()


def test_broker_restart_under_a_consuming_group(broker_factory: Callable[..., BrokerProcess]) -> None:
    """confluent-kafka members consume while the broker is killed and restarted: they resume as
    the same members, no partition has two owners, nothing is consumed twice or lost."""
    broker = broker_factory(OVERRIDES)
    topic = create_topic(broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tracker = Tracker()
    group_members = [GroupMember(broker.bootstrap, group, topic, name, tracker) for name in ("m0", "m1")]
    try:
        producer = SequenceProducer(broker.bootstrap, topic, name="before").produce_some(500)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(tracker.consumed) < 500:
            time.sleep(0.2)
        assert len(tracker.consumed) == 500
        time.sleep(2)  # periodic commits of what was consumed
        client = RawClient(broker)
        before = _describe_group(client, group)
        client.close()
        assert before.group_state == "Stable"
        broker.kill9()
        broker.start()
        after = SequenceProducer(broker.bootstrap, topic, name="after").produce_some(500)
        acked = {(a.producer, a.seq) for a in producer.acked + after.acked}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not acked <= set(tracker.consumed):
            time.sleep(0.2)
        client = RawClient(broker)
        resumed = _describe_group(client, group)
        client.close()
        # The same members at the same epochs: the restart caused no rebalance.
        assert (resumed.group_epoch, sorted((m.member_id, m.member_epoch) for m in resumed.members)) == \
            (before.group_epoch, sorted((m.member_id, m.member_epoch) for m in before.members))
    finally:
        for m in group_members:
            m.close()
    assert not tracker.violations, tracker.violations[:5]
    assert acked <= set(tracker.consumed), "records were lost"
    twice = {k: v for k, v in tracker.consumed.items() if len(v) > 1}
    assert not twice, list(twice.items())[:5]


def test_regex_subscription_picks_up_a_new_topic(kip848_broker: BrokerProcess) -> None:
    """A server-side regex subscription (confluent-kafka, group.protocol=consumer): a topic created
    later that matches is assigned without the member changing its subscription."""
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kip848_broker.bootstrap})
    admin.create_topics([NewTopic(f"{prefix}-a", 2, 1)])[f"{prefix}-a"].result(30)
    consumer = Consumer({"bootstrap.servers": kip848_broker.bootstrap, "group.id": f"g-{prefix}",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest", "log_level": 0,
                         "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.subscribe([f"^{prefix}-.*"])

        def assigned_topics(want: set[str]) -> set[str]:
            deadline = time.monotonic() + 60
            topics: set[str] = set()
            while time.monotonic() < deadline and topics != want:
                consumer.poll(0.2)
                topics = {tp.topic for tp in consumer.assignment()}
            return topics

        assert assigned_topics({f"{prefix}-a"}) == {f"{prefix}-a"}
        admin.create_topics([NewTopic(f"{prefix}-b", 1, 1)])[f"{prefix}-b"].result(30)
        assert assigned_topics({f"{prefix}-a", f"{prefix}-b"}) == {f"{prefix}-a", f"{prefix}-b"}
    finally:
        consumer.close()


def test_static_member_restarts_without_rebalance(kip848_broker: BrokerProcess) -> None:
    """confluent-kafka with group.instance.id: a static member that closes and comes back within its
    session gets its partitions back at the same group epoch; the other member is never disturbed."""
    topic = create_topic(kip848_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"

    def consumer(instance: str) -> Consumer:
        c = Consumer({"bootstrap.servers": kip848_broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                      "group.instance.id": instance, "log_level": 0})
        c.subscribe([topic])
        return c

    def settle(consumers: list[Consumer], want: int) -> list[set[int]]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.1)
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            if sum(len(o) for o in owned) == want and all(owned):
                return owned
        return owned

    a, b = consumer("static-a"), consumer("static-b")
    client = RawClient(kip848_broker)
    try:
        owned_a, owned_b = settle([a, b], 4)
        before = _describe_group(client, group)
        a.close()
        a = consumer("static-a")
        assert settle([a, b], 4) == [owned_a, owned_b]
        after = _describe_group(client, group)
        assert after.group_epoch == before.group_epoch
        assert sorted(m.instance_id for m in after.members) == ["static-a", "static-b"]
    finally:
        a.close()
        b.close()
        client.close()


def test_metrics_count_groups_per_protocol(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory({**OVERRIDES, "metrics.listener": f"http://127.0.0.1:{free_port()}"})
    topic = create_topic(broker, 2)
    a = Member(broker, f"g-{uuid.uuid4().hex[:8]}")
    # Beside it, a classic group with one confluent-kafka member: each is counted under its own protocol.
    classic_group = f"g-{uuid.uuid4().hex[:8]}"
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic_group, "group.protocol": "classic",
                        "log_level": 0})
    try:
        a.join([topic])
        a.heartbeat(owned=a.assigned)
        classic.subscribe([topic])
        deadline = time.monotonic() + 60
        while not classic.assignment() and time.monotonic() < deadline:
            classic.poll(0.2)
        assert classic.assignment()
        samples = scrape(metrics_port(broker))
        assert samples.get("kafka_server_group_coordinator_metrics_group_count", protocol="consumer") == 1
        assert samples.get("kafka_server_group_coordinator_metrics_group_count", protocol="classic") == 1
        assert samples.get("kafka_server_group_coordinator_metrics_consumer_group_count", state="stable") == 1
        assert samples.get("kafka_coordinator_group_groupmetadatamanager_numgroups") == 2
        assert samples.get("kafka_coordinator_group_groupmetadatamanager_numgroupsstable") == 1  # the classic one
        assert samples.get("kafka_consumergroup_members", consumergroup=a.group) == 1
        assert samples.get("kafka_consumergroup_members", consumergroup=classic_group) == 1
    finally:
        classic.close()
        a.close()
