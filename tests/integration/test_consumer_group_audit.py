"""KIP-848 acceptance gaps: what a user of confluent-kafka or of `strom consumer-groups` sees.

A consumer group holding classic members after an online upgrade is described by the tool;
`group.consumer.max.size` refuses a real client; the client's `group.remote.assignor` picks the
server-side assignor and `group.consumer.assignors` the broker's default and choice; the web
console shows such a group with its epochs; out-of-bounds heartbeat/session configs stop the
broker at start; a member killed with SIGKILL is expired; the one-way migration policies.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from starlette.testclient import TestClient

from strom.console.app import ConsoleSettings, create_app
from strom.protocol.group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
)
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode
from tests.support.raw_group_members import ClassicMember, ConsumerMember, create_topic

OVERRIDES = {"group.consumer.heartbeat.interval.ms": 300, "group.consumer.min.heartbeat.interval.ms": 100,
             "group.initial.rebalance.delay.ms": 0,
             "offsets.topic.num.partitions": 3, "group.consumer.max.size": 2}
CGH = ConsumerGroupHeartbeatRequest
NONE = 0
MEMBER_ID_REQUIRED = 79
GROUP_ID_NOT_FOUND = 69
REBALANCE_IN_PROGRESS = 27
RETRIABLE = (14, 15, 16)  # loading, not available, not coordinator


@pytest.fixture(scope="module")
def audit_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848-audit"), OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.close()


def _classic(broker: BrokerProcess, group: str, topic: str) -> ClassicMember:
    """A classic member with a long session: no keep-alive needed."""
    member = ClassicMember(broker, group, topic)
    member.session_timeout_ms = 60000
    return member


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_describes_a_consumer_group_with_classic_members(audit_broker: BrokerProcess) -> None:
    """After an online upgrade a consumer group holds a classic member: every --describe view of
    the tool prints both members (the classic one at its generation), none crashes."""
    topic = create_topic(audit_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = ConsumerMember(audit_broker, group)
    a = _classic(audit_broker, group, topic)
    try:
        resp = c.send(member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
        assert resp.error_code == NONE, resp
        c.heartbeat()
        assert a.join(owned=[]).error_code == NONE and a.sync().error_code == NONE
        for _ in range(3):
            c.heartbeat()
        assert len(c.partitions()) == 2 and a.heartbeat() == REBALANCE_IN_PROGRESS
        assert a.join(owned=[]).error_code == NONE and a.sync().error_code == NONE
        assert sorted(a.assigned) == sorted({0, 1, 2, 3} - c.partitions()) and a.heartbeat() == NONE

        boot = ["--bootstrap-server", audit_broker.bootstrap]
        out = _cli("consumer-groups", *boot, "--describe", "--group", group, "--members", "--verbose")
        assert out.returncode == 0, out.stderr
        rows = {line.split()[1]: line.split() for line in out.stdout.strip().splitlines()[1:]}
        assert set(rows) == {a.member_id, c.member_id}, out.stdout
        classic = rows[a.member_id]
        mine = ",".join(map(str, a.assigned))
        assert classic[-4:] == [str(a.generation), f"{topic}({mine})", str(a.generation), f"{topic}({mine})"], \
            out.stdout
        out = _cli("consumer-groups", *boot, "--describe", "--group", group, "--state")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[1].split()[-2:] == [str(c.epoch), "2"], out.stdout
        out = _cli("consumer-groups", *boot, "--describe", "--group", group)
        assert out.returncode == 0, out.stderr
        owners = {line.split()[2]: line.split() for line in out.stdout.strip().splitlines()[1:]}
        assert sorted(int(p) for p in owners) == [0, 1, 2, 3], out.stdout
        assert all(a.member_id in row for p, row in owners.items() if int(p) in a.assigned), out.stdout

        # The web console shows the same group: consumer protocol, epochs, the classic member marked.
        app = create_app(ConsoleSettings({"bootstrap.servers": audit_broker.bootstrap}, timeout=10, browse_timeout=10))
        with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as console:
            detail = console.get("/api/group", params={"id": group}).json()
            assert (detail["protocol"], detail["members"]) == ("consumer", 2), detail
            assert detail["member_epochs"] == {a.member_id: a.generation, c.member_id: c.epoch}, detail
            page = console.get(f"/groups/{group}").text
            assert f'id="epochs">{c.epoch} / ' in page and page.count('data-member-type="classic"') == 1, page
    finally:
        a.client.close()
        c.client.close()


def _consumer(broker: BrokerProcess, group: str, topic: str, **config: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "log_level": 0, **config})
    c.subscribe([topic])
    return c


def _settle(consumers: list[Consumer], want: int) -> list[set[int]]:
    """Poll until the consumers' assignments cover `want` partitions, every one of them some."""
    owned: list[set[int]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
        owned = [{tp.partition for tp in c.assignment()} for c in consumers]
        if sum(len(o) for o in owned) == want and all(owned):
            break
    return owned


def _describe(broker: BrokerProcess, group: str) -> Any:
    client = RawClient(broker)
    try:
        req = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
        return decode(ConsumerGroupDescribeResponse, client.request(req, version=1), 1, True).groups[0]
    finally:
        client.close()


def test_max_size_refuses_a_further_confluent_kafka_member(audit_broker: BrokerProcess) -> None:
    """group.consumer.max.size=2: a third confluent-kafka consumer gets a fatal 'maximum size'
    error and no partitions; the two members keep consuming undisturbed."""
    topic = create_topic(audit_broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = _consumer(audit_broker, group, topic), _consumer(audit_broker, group, topic)
    third = None
    try:
        owned = _settle([a, b], 4)
        assert sorted(len(o) for o in owned) == [2, 2], owned
        epoch = _describe(audit_broker, group).group_epoch
        third = _consumer(audit_broker, group, topic)
        error = None
        deadline = time.monotonic() + 60
        while error is None and time.monotonic() < deadline:
            msg = third.poll(0.2)
            if msg is not None and msg.error():
                error = msg.error()
            a.poll(0)
            b.poll(0)
        assert error is not None and error.code() == KafkaError._FATAL, error
        assert "maximum size" in error.str(), error.str()
        assert third.assignment() == []
        described = _describe(audit_broker, group)
        assert (len(described.members), described.group_epoch) == (2, epoch)
        assert _settle([a, b], 4) == owned
    finally:
        for c in (a, b, third):
            if c is not None:
                c.close()


@pytest.mark.parametrize(("assignor", "broker_assignors"), [("range", "uniform,range"), ("uniform", "range,uniform")])
def test_remote_assignor_chooses_the_server_side_assignor(broker_factory: Any, assignor: str,
                                                          broker_assignors: str) -> None:
    """confluent-kafka's group.remote.assignor picks the assignor the coordinator runs, not the broker's
    default (the first of group.consumer.assignors, here the other one): range hands out contiguous
    ranges of a topic's partitions."""
    broker = broker_factory({**FAST_SESSIONS, "group.consumer.assignors": broker_assignors})
    topic = create_topic(broker, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = _consumer(broker, group, topic, **{"group.remote.assignor": assignor})
    b = None
    try:
        assert _settle([a], 6) == [set(range(6))]
        b = _consumer(broker, group, topic, **{"group.remote.assignor": assignor})
        owned = _settle([a, b], 6)
        assert sorted(len(o) for o in owned) == [3, 3], owned
        assert _describe(broker, group).assignor_name == assignor
        if assignor == "range":
            assert sorted(map(sorted, owned)) == [[0, 1, 2], [3, 4, 5]]
    finally:
        for c in (a, b):
            if c is not None:
                c.close()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"group.consumer.session.timeout.ms": 4000},
     "group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms (45000)"),
    ({"group.consumer.heartbeat.interval.ms": 20000},
     "group.consumer.heartbeat.interval.ms must be between group.consumer.min.heartbeat.interval.ms (5000) and "
     "group.consumer.max.heartbeat.interval.ms (15000), not 20000"),
    ({"group.consumer.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 4000,
      "group.consumer.heartbeat.interval.ms": 5000},
     "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"),
], ids=["session-below-min", "heartbeat-above-max", "heartbeat-not-inside-session"])
def test_out_of_bounds_consumer_group_timeouts_stop_the_broker_at_start(tmp_path: Any, overrides: dict[str, int],
                                                                        message: str) -> None:
    """A heartbeat interval or session timeout outside its min/max (or a heartbeat not inside the
    session) is refused at start with the config named, not discovered by the first member."""
    broker = BrokerProcess(tmp_path, overrides)
    try:
        with pytest.raises(RuntimeError, match="broker exited with") as exited:
            broker.start(timeout=60)
        assert message in str(exited.value), str(exited.value)
    finally:
        broker.close()


_CHILD = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "log_level": 0})
c.subscribe([sys.argv[3]])
seen = None
while True:
    c.poll(0.1)
    now = sorted(tp.partition for tp in c.assignment())
    if now != seen:
        seen = now
        print(c.memberid(), ",".join(map(str, now)), flush=True)
"""

FAST_SESSIONS = {"group.consumer.heartbeat.interval.ms": 300, "group.consumer.min.heartbeat.interval.ms": 100,
                 "group.consumer.session.timeout.ms": 4000, "group.consumer.min.session.timeout.ms": 1000,
                 "offsets.topic.num.partitions": 1}


def test_member_killed_with_sigkill_is_expired_and_its_partitions_move(broker_factory: Any) -> None:
    """A confluent-kafka member process killed with kill -9 never leaves: when its session expires
    the coordinator fences it and the surviving member gets its partitions (and only then)."""
    broker = broker_factory(FAST_SESSIONS)
    topic = create_topic(broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, broker.bootstrap, group, topic], stdout=subprocess.PIPE,
                             text=True)
    survivor = None
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in child.stdout or []], daemon=True).start()
        deadline = time.monotonic() + 60
        child_id, owned = "", ""
        while time.monotonic() < deadline and not owned:
            try:
                child_id, _, owned = lines.get(timeout=1).strip().partition(" ")
            except queue.Empty:
                continue
        assert owned == "0,1,2,3", owned
        survivor = _consumer(broker, group, topic)
        mine = _settle([survivor], 2)[0]
        assert len(mine) == 2
        before = _describe(broker, group)
        assert sorted(m.member_id for m in before.members) == sorted([child_id, survivor.memberid()])
        child.kill()  # SIGKILL: no LeaveGroup, no last heartbeat
        child.wait(30)
        assert _settle([survivor], 4) == [{0, 1, 2, 3}]
        after = _describe(broker, group)
        assert [m.member_id for m in after.members] == [survivor.memberid()]
        assert after.group_epoch > before.group_epoch
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
        if survivor is not None:
            survivor.close()


def test_broker_assignors_config_sets_the_default_and_the_choice(broker_factory: Any) -> None:
    """group.consumer.assignors=range: a member that names no assignor gets range (the first listed),
    one asking for uniform is refused with a fatal UNSUPPORTED_ASSIGNOR."""
    broker = broker_factory({**FAST_SESSIONS, "group.consumer.assignors": "range"})
    topic = create_topic(broker, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = _consumer(broker, group, topic), _consumer(broker, group, topic)
    other = _consumer(broker, f"g-{uuid.uuid4().hex[:8]}", topic, **{"group.remote.assignor": "uniform"})
    try:
        owned = _settle([a, b], 6)
        assert sorted(map(sorted, owned)) == [[0, 1, 2], [3, 4, 5]], owned
        assert _describe(broker, group).assignor_name == "range"
        error = None
        deadline = time.monotonic() + 60
        while error is None and time.monotonic() < deadline:
            msg = other.poll(0.2)
            if msg is not None and msg.error():
                error = msg.error()
        assert error is not None and error.code() == KafkaError._FATAL, error
        assert "assignor" in error.str().lower(), error.str()
        assert other.assignment() == []
    finally:
        for c in (a, b, other):
            c.close()


@pytest.mark.parametrize("policy", ["upgrade", "downgrade"])
def test_one_way_migration_policies(broker_factory: Any, policy: str) -> None:
    """group.consumer.migration.policy=upgrade converts a classic group when a consumer-protocol
    member joins but never turns it back; =downgrade refuses that conversion."""
    broker = broker_factory({**FAST_SESSIONS, "group.consumer.session.timeout.ms": 30000,
                             "group.consumer.migration.policy": policy, "group.initial.rebalance.delay.ms": 0})
    topic = create_topic(broker, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = _classic(broker, group, topic)
    c = ConsumerMember(broker, group)
    try:
        assert a.join(owned=[]).error_code == NONE and a.sync().error_code == NONE
        resp = c.send(member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
        if policy == "downgrade":
            assert resp.error_code == GROUP_ID_NOT_FOUND, resp
            assert _describe(broker, group).error_code == GROUP_ID_NOT_FOUND  # still a classic group
            assert a.heartbeat() == NONE  # its member undisturbed
            return
        assert resp.error_code == NONE, resp
        assert _describe(broker, group).error_code == NONE  # a consumer group now
        assert c.send(member_epoch=-1).error_code == NONE
        described = _describe(broker, group)
        assert described.error_code == NONE and [m.member_id for m in described.members] == [a.member_id]
    finally:
        a.client.close()
        c.client.close()
