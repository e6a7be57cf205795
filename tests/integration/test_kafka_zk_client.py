"""KafkaZkClient against a real ZooKeeper server: Kafka's znode layout, JSON and fencing."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from strom.metadata.zk import (
    BadVersionError,
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    KafkaZkClient,
    LeaderIsrAndControllerEpoch,
    SessionState,
    TopicExistsError,
    ZkConnectionError,
    ZNodeNotFoundError,
)
from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.zookeeper_server import ZooKeeperServer, ensemble_connect_string

pytestmark = pytest.mark.zookeeper

WAIT = 30.0  # upper bound for events to arrive; never a timing assertion


@pytest.fixture
def chroot() -> str:
    """A fresh chroot per test, so tests sharing the module's server never see each other."""
    return f"/strom-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_client(zookeeper: ZooKeeperServer, chroot: str) -> Iterator[Callable[[], KafkaZkClient]]:
    """Open clients (separate sessions) on the test's chroot; all closed afterwards."""
    clients: list[KafkaZkClient] = []

    def make(**kwargs: object) -> KafkaZkClient:
        c = KafkaZkClient(zookeeper.connect_string + chroot, session_timeout_ms=6000, **kwargs)  # type: ignore[arg-type]
        clients.append(c)
        return c.start()

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def client(new_client: Callable[[], KafkaZkClient]) -> KafkaZkClient:
    return new_client()


def raw_json(client: KafkaZkClient, path: str) -> dict:
    got = client.get_data(path)
    assert got is not None, path
    return json.loads(got[0])


def state(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(leader, leader_epoch, isr, controller_epoch)


# -- session, chroot, persistent paths ---------------------------------------
def test_start_creates_chroot_and_kafka_persistent_paths(
    zookeeper: ZooKeeperServer, client: KafkaZkClient, chroot: str
) -> None:
    assert client.connected
    assert client.session_id
    raw = KazooClient(hosts=zookeeper.connect_string)
    raw.start(timeout=WAIT)
    try:
        for path in zd.PERSISTENT_PATHS:
            assert raw.exists(chroot + path), path
        client.register_broker(3, ["PLAINTEXT://127.0.0.1:9093"])
        # Without the chroot, the same znode sits under it.
        assert raw.get_children(chroot + "/brokers/ids") == ["3"]
        assert not raw.exists("/brokers/ids/3")
    finally:
        raw.stop()
        raw.close()


def test_nested_chroot_is_created(zookeeper: ZooKeeperServer, chroot: str) -> None:
    with KafkaZkClient(f"{zookeeper.connect_string}{chroot}/a/b") as c:
        assert c.get_all_topics() == []
        assert c.chroot == f"{chroot}/a/b"


def test_unreachable_server_raises_connection_error() -> None:
    from strom.metadata.zk.zookeeper_server import free_port

    c = KafkaZkClient(f"127.0.0.1:{free_port()}", session_timeout_ms=2000, connection_timeout_ms=1500)
    with pytest.raises(ZkConnectionError):
        c.start()


def test_state_listener_sees_connected_and_lost(new_client: Callable[[], KafkaZkClient]) -> None:
    c = new_client()
    seen: list[SessionState] = []
    lost = threading.Event()

    def listener(s: SessionState) -> None:
        seen.append(s)
        if s is SessionState.LOST:
            lost.set()

    c.add_state_listener(listener)
    c.close()
    assert lost.wait(WAIT)
    assert not c.connected


# -- /cluster/id -----------------------------------------------------------------
def test_cluster_id_get_or_create(new_client: Callable[[], KafkaZkClient]) -> None:
    a, b = new_client(), new_client()
    assert a.get_cluster_id() is None
    first = a.get_or_create_cluster_id()
    assert b.get_or_create_cluster_id("something-else") == first
    assert len(first) == 22  # Kafka's base64 Uuid
    assert raw_json(a, "/cluster/id") == {"version": "1", "id": first}


# -- /brokers/ids ------------------------------------------------------------------
def test_register_broker_writes_kafka_v5_json_and_returns_czxid(client: KafkaZkClient) -> None:
    epoch = client.register_broker(
        1,
        ["PLAINTEXT://127.0.0.1:9092", "SSL://127.0.0.1:9093"],
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"},
        rack="r1",
    )
    data, stat = client.get_data("/brokers/ids/1")
    assert epoch == stat.czxid
    assert stat.ephemeralOwner == client.session_id
    js = json.loads(data)
    assert set(js) == {
        "version", "host", "port", "endpoints", "listener_security_protocol_map",
        "jmx_port", "timestamp", "features", "rack",
    }  # fmt: skip
    assert js["version"] == 5
    assert (js["host"], js["port"]) == ("127.0.0.1", 9092)
    assert js["endpoints"] == ["PLAINTEXT://127.0.0.1:9092", "SSL://127.0.0.1:9093"]
    assert js["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert js["jmx_port"] == -1 and js["features"] == {} and js["rack"] == "r1"
    assert isinstance(js["timestamp"], str) and js["timestamp"].isdigit()

    brokers = client.get_all_brokers()
    assert list(brokers) == [1]
    reg = brokers[1]
    assert (reg.id, reg.host, reg.port, reg.rack, reg.epoch) == (1, "127.0.0.1", 9092, "r1", epoch)
    assert reg.endpoint("SSL") == ("127.0.0.1", 9093)
    # Registering again on the same session is idempotent (a retried create).
    assert client.register_broker(1, ["PLAINTEXT://127.0.0.1:9092"]) == epoch


def test_broker_without_rack_omits_the_key(client: KafkaZkClient) -> None:
    client.register_broker(2, ["PLAINTEXT://127.0.0.1:9092"])
    assert "rack" not in raw_json(client, "/brokers/ids/2")
    assert client.get_all_brokers()[2].rack is None


def test_duplicate_broker_id_is_refused_and_ephemeral_vanishes_with_session(
    new_client: Callable[[], KafkaZkClient],
) -> None:
    a, b = new_client(), new_client()
    first_epoch = a.register_broker(1, ["PLAINTEXT://127.0.0.1:9092"])
    with pytest.raises(BrokerIdAlreadyRegisteredError, match="broker id 1"):
        b.register_broker(1, ["PLAINTEXT://127.0.0.1:9094"])
    assert b.get_all_brokers()[1].port == 9092

    a.close()  # closing the session deletes its ephemerals at once
    assert b.get_all_broker_ids() == []
    second_epoch = b.register_broker(1, ["PLAINTEXT://127.0.0.1:9094"])
    assert second_epoch > first_epoch  # a new broker epoch


def test_watch_children_sees_broker_come_and_go(new_client: Callable[[], KafkaZkClient]) -> None:
    watcher, broker = new_client(), new_client()
    snapshots: list[list[str]] = []
    changed = threading.Condition()

    def on_children(children: list[str]) -> None:
        with changed:
            snapshots.append(sorted(children))
            changed.notify_all()

    watcher.watch_children("/brokers/ids", on_children)
    broker.register_broker(7, ["PLAINTEXT://127.0.0.1:9092"])
    with changed:
        assert changed.wait_for(lambda: ["7"] in snapshots, WAIT)
    broker.close()
    with changed:
        assert changed.wait_for(lambda: snapshots[-1] == [], WAIT)
    assert snapshots[0] == []


def test_watch_data_sees_create_change_delete(client: KafkaZkClient) -> None:
    events: list[bytes | None] = []
    cond = threading.Condition()

    def on_data(data: bytes | None, stat: object) -> None:
        with cond:
            events.append(data)
            cond.notify_all()

    client.watch_data("/controller", on_data)
    assert client.try_become_controller(5)
    with cond:
        assert cond.wait_for(lambda: events and events[-1] is not None, WAIT)
    assert json.loads(events[-1])["brokerid"] == 5
    v = client.increment_controller_epoch()[1]
    client.delete_controller(v)
    with cond:
        assert cond.wait_for(lambda: events[-1] is None, WAIT)


# -- topics ------------------------------------------------------------------------
def test_create_topic_writes_kafka_json(client: KafkaZkClient) -> None:
    topic_id = uuid.uuid4()
    client.create_topic("orders", topic_id, {0: [1, 2, 3], 1: [2, 3, 1]}, {"cleanup.policy": "compact"})

    js = raw_json(client, "/brokers/topics/orders")
    assert set(js) == {"version", "topic_id", "partitions", "adding_replicas", "removing_replicas"}
    assert js["version"] == 3
    assert js["partitions"] == {"0": [1, 2, 3], "1": [2, 3, 1]}
    assert js["adding_replicas"] == {} and js["removing_replicas"] == {}
    assert len(js["topic_id"]) == 22 and "=" not in js["topic_id"]  # Kafka's Uuid.toString()
    assert zd.decode_uuid(js["topic_id"]) == topic_id
    assert raw_json(client, "/config/topics/orders") == {"version": 1, "config": {"cleanup.policy": "compact"}}

    got = client.get_topic_assignment("orders")
    assert got is not None
    assert (got.topic_id, got.partitions, got.zk_version) == (topic_id, {0: [1, 2, 3], 1: [2, 3, 1]}, 0)
    assert client.get_all_topics() == ["orders"]
    assert client.topic_exists("orders")
    assert client.get_topic_configs("orders") == {"cleanup.policy": "compact"}
    assert client.get_topic_assignment("missing") is None
    assert client.get_topic_configs("missing") == {}


def test_create_existing_topic_raises_and_keeps_the_original(client: KafkaZkClient) -> None:
    first = uuid.uuid4()
    client.create_topic("t", first, {0: [1]}, {"retention.ms": "1000"})
    with pytest.raises(TopicExistsError, match="'t' already exists"):
        client.create_topic("t", uuid.uuid4(), {0: [2]}, {"retention.ms": "5"})
    got = client.get_topic_assignment("t")
    assert got is not None and got.topic_id == first and got.partitions == {0: [1]}
    assert client.get_topic_configs("t") == {"retention.ms": "1000"}


def test_set_topic_assignment_is_conditional(client: KafkaZkClient) -> None:
    topic_id = uuid.uuid4()
    client.create_topic("grow", topic_id, {0: [1]}, {})
    current = client.get_topic_assignment("grow")
    assert current is not None
    new_version = client.set_topic_assignment("grow", topic_id, {0: [1], 1: [1]}, current.zk_version)
    assert new_version == current.zk_version + 1
    with pytest.raises(BadVersionError):
        client.set_topic_assignment("grow", topic_id, {0: [1], 1: [1], 2: [1]}, current.zk_version)
    got = client.get_topic_assignment("grow")
    assert got is not None and got.partitions == {0: [1], 1: [1]} and got.zk_version == new_version
    with pytest.raises(ZNodeNotFoundError):
        client.set_topic_assignment("nope", topic_id, {0: [1]}, 0)


def test_set_topic_configs_writes_change_notification(client: KafkaZkClient) -> None:
    client.create_topic("cfg", uuid.uuid4(), {0: [1]}, {})
    client.set_topic_configs("cfg", {"retention.ms": "60000", "segment.bytes": "1024"})
    assert client.get_topic_configs("cfg") == {"retention.ms": "60000", "segment.bytes": "1024"}
    changes = client.get_config_changes()
    assert len(changes) == 1 and changes[0].startswith("config_change_") and changes[0][-10:].isdigit()
    assert raw_json(client, f"/config/changes/{changes[0]}") == {"version": 2, "entity_path": "topics/cfg"}


def test_broker_configs_per_broker_and_default(client: KafkaZkClient) -> None:
    assert client.get_broker_configs(1) == {}
    client.set_broker_configs(1, {"log.cleaner.threads": "2"})
    client.set_broker_configs(None, {"message.max.bytes": "2000000"})
    assert client.get_broker_configs(1) == {"log.cleaner.threads": "2"}
    assert client.get_broker_configs(None) == {"message.max.bytes": "2000000"}
    assert raw_json(client, "/config/brokers/<default>") == {"version": 1, "config": {"message.max.bytes": "2000000"}}
    paths = [raw_json(client, f"/config/changes/{c}")["entity_path"] for c in client.get_config_changes()]
    assert paths == ["brokers/1", "brokers/<default>"]


# -- controller ---------------------------------------------------------------------
def test_controller_election_and_epoch(new_client: Callable[[], KafkaZkClient]) -> None:
    a, b = new_client(), new_client()
    assert a.get_controller_id() is None and a.get_controller_epoch() is None
    epoch, version = a.register_controller_and_increment_controller_epoch(1)
    assert epoch == 1 and a.get_controller_epoch() == (epoch, version)
    assert a.get_controller_id() == 1 and b.get_controller_id() == 1
    js = raw_json(a, "/controller")
    assert js["brokerid"] == 1 and js["version"] in (1, 2) and js["timestamp"].isdigit()
    assert a.get_data("/controller_epoch")[0] == b"1"  # a bare number, not JSON

    with pytest.raises(ControllerMovedError):
        b.register_controller_and_increment_controller_epoch(2)
    assert not b.try_become_controller(2)
    assert a.try_become_controller(1)  # already ours

    a.close()  # the controller's session ends: /controller goes, the epoch stays
    assert b.get_controller_id() is None
    epoch2, version2 = b.register_controller_and_increment_controller_epoch(2)
    assert (epoch2, b.get_controller_id()) == (2, 2) and version2 > version


def test_increment_controller_epoch_creates_then_bumps(client: KafkaZkClient) -> None:
    assert client.increment_controller_epoch() == (1, 0)
    assert client.increment_controller_epoch() == (2, 1)
    assert client.get_controller_epoch() == (2, 1)


# -- partition state and fencing ----------------------------------------------------------
def test_partition_state_json_and_updates(client: KafkaZkClient) -> None:
    client.create_topic("p", uuid.uuid4(), {0: [1, 2], 1: [2, 1]}, {})
    epoch, ev = client.register_controller_and_increment_controller_epoch(1)
    versions = client.create_partition_states("p", {0: state(1, 0, [1, 2], epoch), 1: state(2, 0, [2, 1], epoch)}, ev)
    assert versions == {0: 0, 1: 0}
    js = raw_json(client, "/brokers/topics/p/partitions/0/state")
    assert js == {"version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": epoch, "isr": [1, 2]}

    new_version = client.update_partition_state("p", 0, state(2, 1, [2], epoch), 0, ev)
    assert new_version == 1
    states = client.get_partition_states("p")
    assert states[0] == (state(2, 1, [2], epoch), 1)
    assert states[1] == (state(2, 0, [2, 1], epoch), 0)
    assert client.get_partition_state("p", 9) is None

    # A stale partition-state version loses (another writer, e.g. an ISR change, got there first).
    with pytest.raises(BadVersionError):
        client.update_partition_state("p", 0, state(1, 2, [1], epoch), 0, ev)
    assert client.get_partition_state("p", 0) == (state(2, 1, [2], epoch), 1)

    unclean = LeaderIsrAndControllerEpoch(2, 2, [2], epoch, zd.LEADER_RECOVERY_RECOVERING)
    client.update_partition_state("p", 0, unclean, 1, ev)
    assert raw_json(client, "/brokers/topics/p/partitions/0/state")["leader_recovery_state"] == 1
    assert client.get_partition_state("p", 0)[0] == unclean

    with pytest.raises(ZNodeNotFoundError):
        client.update_partition_state("p", 5, state(1, 0, [1], epoch), 0, ev)


def test_stale_controller_is_fenced(new_client: Callable[[], KafkaZkClient]) -> None:
    old, new = new_client(), new_client()
    old.create_topic("f", uuid.uuid4(), {0: [1, 2]}, {})
    old_epoch, old_ev = old.register_controller_and_increment_controller_epoch(1)
    old.create_partition_states("f", {0: state(1, 0, [1, 2], old_epoch)}, old_ev)

    # A newer controller is elected while the old one still believes it leads.
    new_epoch, new_ev = new.increment_controller_epoch()
    assert new_epoch == old_epoch + 1

    with pytest.raises(ControllerMovedError):
        old.update_partition_state("f", 0, state(2, 1, [2], old_epoch), 0, old_ev)
    assert new.get_partition_state("f", 0) == (state(1, 0, [1, 2], old_epoch), 0)  # untouched
    with pytest.raises(ControllerMovedError):
        old.create_partition_states("f", {1: state(1, 0, [1], old_epoch)}, old_ev)
    assert 1 not in new.get_partition_states("f")
    with pytest.raises(ControllerMovedError):
        old.delete_topic_znodes("f", old_ev)
    assert new.topic_exists("f")

    assert new.update_partition_state("f", 0, state(2, 1, [2], new_epoch), 0, new_ev) == 1


# -- deletion ---------------------------------------------------------------------------
def test_topic_deletion_markers_and_znodes(client: KafkaZkClient) -> None:
    client.create_topic("gone", uuid.uuid4(), {0: [1], 1: [1]}, {"retention.ms": "1"})
    epoch, ev = client.register_controller_and_increment_controller_epoch(1)
    client.create_partition_states("gone", {0: state(1, 0, [1], epoch), 1: state(1, 0, [1], epoch)}, ev)

    client.mark_topic_for_deletion("gone")
    client.mark_topic_for_deletion("gone")  # idempotent
    assert client.get_topic_deletions() == ["gone"]
    assert client.get_data("/admin/delete_topics/gone") is not None

    client.delete_topic_znodes("gone", ev)
    assert not client.topic_exists("gone")
    assert client.get_data("/config/topics/gone") is None
    assert client.get_all_topics() == []
    client.remove_topic_deletion("gone", ev)
    assert client.get_topic_deletions() == []
    client.delete_topic_znodes("gone")  # nothing left: a no-op
    client.remove_topic_deletion("gone")

    # The name can be used again, with a new id.
    client.create_topic("gone", uuid.uuid4(), {0: [1]}, {})
    assert client.get_topic_configs("gone") == {}


# -- producer ids --------------------------------------------------------------------------
def test_producer_id_blocks_are_unique_across_clients(new_client: Callable[[], KafkaZkClient]) -> None:
    a, b = new_client(), new_client()
    assert a.allocate_producer_id_block(1) == 0
    js = raw_json(a, "/latest_producer_id_block")
    assert js == {"version": 1, "broker": 1, "block_start": "0", "block_end": "999"}

    firsts: list[int] = []
    lock = threading.Lock()

    def grab(c: KafkaZkClient, broker_id: int) -> None:
        for _ in range(15):
            first = c.allocate_producer_id_block(broker_id)
            with lock:
                firsts.append(first)

    threads = [threading.Thread(target=grab, args=(c, i)) for i, c in ((1, a), (2, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
    assert len(firsts) == 30 and len(set(firsts)) == 30
    assert sorted(firsts) == [1000 * i for i in range(1, 31)]
    assert b.allocate_producer_id_block(2, size=10) == 31_000
    assert raw_json(b, "/latest_producer_id_block")["block_end"] == "31009"


# -- ensemble --------------------------------------------------------------------------------
@pytest.mark.slow
def test_ensemble_survives_losing_a_server(zookeeper_ensemble: list[ZooKeeperServer]) -> None:
    connect = ensemble_connect_string(zookeeper_ensemble) + "/ens"
    with KafkaZkClient(connect, session_timeout_ms=10_000, connection_timeout_ms=60_000) as c:
        c.register_broker(1, ["PLAINTEXT://127.0.0.1:9092"])
        c.create_topic("before", uuid.uuid4(), {0: [1]}, {})
        leader = next(s for s in zookeeper_ensemble if s.serving_mode() == "leader")
        leader.stop()  # the hardest member to lose: the survivors must elect a new leader

        c.create_topic("after", uuid.uuid4(), {0: [1]}, {})
        assert c.get_all_topics() == ["after", "before"]
        assert c.allocate_producer_id_block(1) == 0
        assert 1 in c.get_all_brokers()  # the session (and its ephemeral) survived
        with KafkaZkClient(connect, session_timeout_ms=10_000, connection_timeout_ms=60_000) as other:
            assert other.get_all_topics() == ["after", "before"]
