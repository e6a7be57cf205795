"""An in-memory ZooKeeper for unit tests of the controller, and a session on it with `KafkaZkClient`'s API.

`InMemoryZooKeeper` is the ensemble: one znode tree with what the controller's correctness rests on
- versions and conditional operations, multi-ops that apply all or nothing, ephemerals owned by a
session, watches that fire on change (with kazoo's recipe semantics: at once, then whenever the
children / the znode's mzxid change, again after a new session if something changed meanwhile) - and
a log of every committed write so a test can say what was written, by which session, in what order.

`FakeZkClient` is one session on it. It implements `ControllerZk` (what the controller uses) with
the contracts of `KafkaZkClient` (fenced writes raise `ControllerMovedError`, stale versions
`BadVersionError`, ...) plus the admin/broker calls a test needs to drive the controller: register a
broker (its ephemeral goes when the session is closed: a dead broker), create or delete a topic,
change a topic config; `expire_session()` makes ZooKeeper expire the session as a long pause or a
partition from the ensemble would.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.errors import (
    BadVersionError,
    ControllerMovedError,
    KafkaZkError,
    NodeExistsError,
    TopicExistsError,
    ZNodeNotFoundError,
)
from strom.metadata.zk.kafka_zk_client import SessionState, StateListener
from strom.metadata.zk.zk_data import BrokerRegistration, LeaderIsrAndControllerEpoch, TopicAssignment

ANY_VERSION = -1

# Why a multi-op failed (ZooKeeper's error codes, by name).
NO_NODE = "NoNode"
NODE_EXISTS = "NodeExists"
BAD_VERSION = "BadVersion"
NOT_EMPTY = "NotEmpty"


@dataclass(frozen=True)
class ZnodeStat:
    """The fields of ZooKeeper's Stat the code under test reads (kazoo's names)."""

    czxid: int
    mzxid: int
    version: int
    ephemeralOwner: int  # noqa: N815 - ZooKeeper's name
    ctime: int = 0


@dataclass(frozen=True)
class Znode:
    data: bytes
    stat: ZnodeStat


@dataclass(frozen=True)
class Write:
    """One committed change: which session did what to which path (data after the change)."""

    zxid: int
    session: int
    op: str  # create / set / delete
    path: str
    data: bytes | None


class ZkOpError(Exception):
    """A multi-op failed at op `index` for `reason` (one of NO_NODE, NODE_EXISTS, BAD_VERSION, NOT_EMPTY)."""

    def __init__(self, index: int, reason: str, path: str) -> None:
        super().__init__(f"op {index} on {path}: {reason}")
        self.index, self.reason, self.path = index, reason, path


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class _Watch:
    """kazoo's DataWatch / ChildrenWatch: called at once, then on each change; False stops it."""

    def __init__(self, owner: FakeZkClient, path: str, kind: str, callback: Callable[..., bool | None]) -> None:
        self.owner, self.path, self.kind, self.callback = owner, path, kind, callback
        self.stopped = False
        self._last: Any = object()  # never equal: the first refresh always calls
        self._lock = threading.RLock()

    def refresh(self, server: InMemoryZooKeeper) -> None:
        with self._lock:
            if self.stopped:
                return
            if self.kind == "data":
                node = server.get(self.path)
                seen: Any = node.stat.mzxid if node is not None else None
                args: tuple[Any, ...] = (node.data, node.stat) if node is not None else (None, None)
            else:
                children = server.children(self.path)
                seen = children
                args = (children or [],)
            if seen == self._last:
                return
            self._last = seen
            if self.callback(*args) is False:
                self.stopped = True


class InMemoryZooKeeper:
    """The ensemble: a znode tree shared by every `FakeZkClient` session; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, Znode] = {"/": Znode(b"", ZnodeStat(0, 0, 0, 0))}
        self._zxid = 0
        self._sessions = itertools.count(0x1000)
        self._sequence: dict[str, int] = {}
        self._watches: list[_Watch] = []
        self.writes: list[Write] = []
        for path in zd.PERSISTENT_PATHS:
            self.ensure_path(path)

    # -- reads -------------------------------------------------------------------------------------
    def get(self, path: str) -> Znode | None:
        with self._lock:
            return self._nodes.get(path)

    def children(self, path: str) -> list[str] | None:
        """Sorted child names, None if `path` does not exist."""
        with self._lock:
            if path not in self._nodes:
                return None
            prefix = path.rstrip("/") + "/"
            return sorted(p[len(prefix):] for p in self._nodes if p.startswith(prefix) and "/" not in p[len(prefix):])

    def writes_to(self, path: str) -> list[Write]:
        with self._lock:
            return [w for w in self.writes if w.path == path]

    # -- writes --------------------------------------------------------------------------------------
    def new_session(self) -> int:
        return next(self._sessions)

    def multi(self, session: int, ops: list[tuple[Any, ...]]) -> list[Any]:
        """Apply ops all or nothing; returns each op's result (stat, or the created path).

        ops: ("check", path, version) | ("create", path, data, ephemeral, sequential)
             | ("set", path, data, version) | ("delete", path, version); version -1 matches any.
        Raises `ZkOpError` naming the first op that failed (nothing is applied then)."""
        with self._lock:
            staged = dict(self._nodes)
            sequence = dict(self._sequence)
            zxid = self._zxid + 1
            results: list[Any] = []
            log: list[Write] = []
            for i, op in enumerate(ops):
                kind, path = op[0], op[1]
                node = staged.get(path)
                if kind == "check":
                    if node is None:
                        raise ZkOpError(i, NO_NODE, path)
                    if op[2] != ANY_VERSION and node.stat.version != op[2]:
                        raise ZkOpError(i, BAD_VERSION, path)
                    results.append(node.stat)
                elif kind == "create":
                    _, _, data, ephemeral, sequential = op
                    parent = _parent(path)
                    if parent not in staged:
                        raise ZkOpError(i, NO_NODE, parent)
                    if staged[parent].stat.ephemeralOwner:
                        raise ZkOpError(i, NO_NODE, parent)  # ZooKeeper: ephemerals have no children
                    if sequential:
                        n = sequence.get(parent, 0)
                        sequence[parent] = n + 1
                        path = f"{path}{n:010d}"
                    if path in staged:
                        raise ZkOpError(i, NODE_EXISTS, path)
                    staged[path] = Znode(data, ZnodeStat(zxid, zxid, 0, session if ephemeral else 0))
                    results.append(path)
                    log.append(Write(zxid, session, "create", path, data))
                elif kind == "set":
                    _, _, data, version = op
                    if node is None:
                        raise ZkOpError(i, NO_NODE, path)
                    if version != ANY_VERSION and node.stat.version != version:
                        raise ZkOpError(i, BAD_VERSION, path)
                    staged[path] = Znode(data, replace(node.stat, mzxid=zxid, version=node.stat.version + 1))
                    results.append(staged[path].stat)
                    log.append(Write(zxid, session, "set", path, data))
                elif kind == "delete":
                    if node is None:
                        raise ZkOpError(i, NO_NODE, path)
                    if op[2] != ANY_VERSION and node.stat.version != op[2]:
                        raise ZkOpError(i, BAD_VERSION, path)
                    prefix = path.rstrip("/") + "/"
                    if any(p.startswith(prefix) for p in staged):
                        raise ZkOpError(i, NOT_EMPTY, path)
                    del staged[path]
                    results.append(None)
                    log.append(Write(zxid, session, "delete", path, None))
                else:
                    raise ValueError(f"unknown op {kind!r}")
            self._nodes, self._sequence, self._zxid = staged, sequence, zxid
            self.writes.extend(log)
        self._fire()
        return results

    def ensure_path(self, path: str, session: int = 0) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            with contextlib.suppress(ZkOpError):
                self.multi(session, [("create", "/" + "/".join(parts[:i]), b"", False, False)])

    def end_session(self, session: int) -> None:
        """The session is gone (closed or expired): its ephemerals disappear, as one change."""
        with self._lock:
            owned = sorted((p for p, n in self._nodes.items() if n.stat.ephemeralOwner == session), reverse=True)
        if owned:
            self.multi(session, [("delete", p, ANY_VERSION) for p in owned])

    # -- watches ---------------------------------------------------------------------------------------
    def add_watch(self, watch: _Watch) -> None:
        with self._lock:
            self._watches.append(watch)
        watch.refresh(self)

    def drop_watches(self, owner: FakeZkClient) -> None:
        with self._lock:
            self._watches = [w for w in self._watches if w.owner is not owner]

    def _fire(self, owner: FakeZkClient | None = None) -> None:
        """Outside the lock (a callback may read): every watch whose znode or children changed is called."""
        with self._lock:
            self._watches = [w for w in self._watches if not w.stopped]
            watches = [w for w in self._watches if owner is None or w.owner is owner]
        for w in watches:
            w.refresh(self)


class FakeZkClient:
    """One ZooKeeper session on an `InMemoryZooKeeper`, with `KafkaZkClient`'s methods and errors."""

    def __init__(self, server: InMemoryZooKeeper) -> None:
        self.server = server
        self._session: int | None = server.new_session()
        self._listeners: list[StateListener] = []

    # -- session -------------------------------------------------------------------------------------
    @property
    def session_id(self) -> int | None:
        return self._session

    def add_state_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def _notify(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            listener(state)

    def expire_session(self) -> None:
        """ZooKeeper expires this session: its ephemerals go, listeners hear LOST, then the client
        reconnects with a new session (CONNECTED) and its watches look again, as kazoo's do."""
        old = self._require_session()
        self._session = self.server.new_session()
        self.server.end_session(old)
        self._notify(SessionState.LOST)
        self._notify(SessionState.CONNECTED)
        self.server._fire(owner=self)

    def close(self) -> None:
        """End the session (a broker that stops or dies): its ephemerals and watches go."""
        if self._session is None:
            return
        session, self._session = self._session, None
        self.server.drop_watches(self)
        self.server.end_session(session)

    def _require_session(self) -> int:
        if self._session is None:
            raise KafkaZkError("the client is closed")
        return self._session

    def _multi(self, ops: list[tuple[Any, ...]]) -> list[Any]:
        return self.server.multi(self._require_session(), ops)

    def _data(self, path: str) -> Znode | None:
        self._require_session()
        return self.server.get(path)

    def _children(self, path: str) -> list[str]:
        self._require_session()
        return self.server.children(path) or []

    # -- watches ---------------------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Callable[[list[str]], bool | None]) -> None:
        self._require_session()
        self.server.add_watch(_Watch(self, path, "children", callback))

    def watch_data(self, path: str, callback: Callable[[bytes | None, Any], bool | None]) -> None:
        self._require_session()
        self.server.add_watch(_Watch(self, path, "data", callback))

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        """zkCli's delete: what an operator does by hand (e.g. to force a controller election)."""
        self._multi([("delete", path, version)])

    # -- brokers -------------------------------------------------------------------------------------
    def register_broker(self, broker_id: int, endpoints: list[str] | None = None) -> int:
        """The broker's ephemeral `/brokers/ids/<id>`; returns its czxid (the broker epoch)."""
        endpoints = endpoints or [f"PLAINTEXT://127.0.0.1:{9000 + broker_id}"]
        data = zd.encode_broker_registration(endpoints, None, None, -1, None)
        self._multi([("create", zd.broker_id_path(broker_id), data, True, False)])
        node = self.server.get(zd.broker_id_path(broker_id))
        assert node is not None
        return node.stat.czxid

    def get_all_brokers(self) -> dict[int, BrokerRegistration]:
        out = {}
        for child in self._children(zd.BROKER_IDS_PATH):
            node = self._data(zd.broker_id_path(int(child)))
            if node is not None:
                out[int(child)] = zd.decode_broker_registration(int(child), node.data, node.stat.czxid)
        return dict(sorted(out.items()))

    # -- controller election -----------------------------------------------------------------------------
    def get_controller_id(self) -> int | None:
        node = self._data(zd.CONTROLLER_PATH)
        return zd.decode_controller(node.data) if node else None

    def get_controller_epoch(self) -> tuple[int, int] | None:
        node = self._data(zd.CONTROLLER_EPOCH_PATH)
        return (zd.decode_controller_epoch(node.data), node.stat.version) if node else None

    def set_controller_epoch(self, epoch: int) -> int:
        """As if earlier controllers had been elected: `/controller_epoch` holds epoch (returns its version)."""
        if self.get_controller_epoch() is None:
            self._multi([("create", zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(epoch), False, False)])
        else:
            self._multi([("set", zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(epoch), ANY_VERSION)])
        got = self.get_controller_epoch()
        assert got is not None
        return got[1]

    def register_controller_and_increment_controller_epoch(self, broker_id: int) -> tuple[int, int]:
        current = self.get_controller_epoch()
        if current is None:
            with contextlib.suppress(ZkOpError):
                self._multi([("create", zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(0), False, False)])
            current = self.get_controller_epoch()
            assert current is not None
        epoch, version = current
        try:
            results = self._multi([
                ("create", zd.CONTROLLER_PATH, zd.encode_controller(broker_id), True, False),
                ("set", zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(epoch + 1), version),
            ])
        except ZkOpError as exc:
            raise ControllerMovedError(f"broker {broker_id} lost the controller election "
                                       f"(controller={self.get_controller_id()})") from exc
        return epoch + 1, results[1].version

    # -- topics ----------------------------------------------------------------------------------------
    def create_topic(self, name: str, topic_id: uuid.UUID, assignment: dict[int, list[int]],
                     configs: dict[str, str] | None = None) -> None:
        config_path = zd.config_entity_path(zd.CONFIG_TYPE_TOPIC, name)
        config_op: tuple[Any, ...] = (("set", config_path, zd.encode_entity_config(configs or {}), ANY_VERSION)
                                      if self._data(config_path) else
                                      ("create", config_path, zd.encode_entity_config(configs or {}), False, False))
        try:
            self._multi([config_op, ("create", zd.topic_path(name),
                                     zd.encode_topic_assignment(topic_id, assignment), False, False)])
        except ZkOpError as exc:
            raise TopicExistsError(f"Topic '{name}' already exists.") from exc

    def topic_exists(self, name: str) -> bool:
        return self._data(zd.topic_path(name)) is not None

    def get_all_topics(self) -> list[str]:
        return self._children(zd.TOPICS_PATH)

    def get_topic_assignment(self, name: str) -> TopicAssignment | None:
        node = self._data(zd.topic_path(name))
        return zd.decode_topic_assignment(node.data, node.stat.version) if node else None

    def set_topic_assignment(self, name: str, topic_id: uuid.UUID | None, assignment: dict[int, list[int]],
                             expected_version: int) -> int:
        """Replace the assignment (kafka-topics --alter --partitions) if still at `expected_version`."""
        try:
            results = self._multi([("set", zd.topic_path(name), zd.encode_topic_assignment(topic_id, assignment),
                                    expected_version)])
        except ZkOpError as exc:
            if exc.reason == BAD_VERSION:
                raise BadVersionError(f"assignment of {name!r} changed since version {expected_version}") from exc
            raise ZNodeNotFoundError(f"assignment of {name!r} does not exist") from exc
        return int(results[0].version)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a topic's overrides and announce it under `/config/changes`, as `kafka-configs` does."""
        path = zd.config_entity_path(zd.CONFIG_TYPE_TOPIC, name)
        data = zd.encode_entity_config(configs)
        self._multi([("set", path, data, ANY_VERSION) if self._data(path) else ("create", path, data, False, False)])
        self._multi([("create", f"{zd.CONFIG_CHANGES_PATH}/{zd.CONFIG_CHANGE_PREFIX}",
                      zd.encode_config_change(zd.CONFIG_TYPE_TOPIC, name), False, True)])

    def get_topic_configs(self, name: str) -> dict[str, str]:
        node = self._data(zd.config_entity_path(zd.CONFIG_TYPE_TOPIC, name))
        return zd.decode_entity_config(node.data) if node else {}

    def get_balancer_throttles(self) -> tuple[set[int], set[str]]:
        node = self._data(zd.BALANCER_THROTTLES_PATH)
        return zd.decode_balancer_throttles(node.data) if node else (set(), set())

    def set_balancer_throttles(self, brokers: set[int], topics: set[str]) -> None:
        path = zd.BALANCER_THROTTLES_PATH
        if not brokers and not topics:
            if self._data(path):
                self._multi([("delete", path, ANY_VERSION)])
            return
        data = zd.encode_balancer_throttles(brokers, topics)
        if self._data(path):
            self._multi([("set", path, data, ANY_VERSION)])
            return
        if not self._data("/strom"):
            self._multi([("create", "/strom", b"", False, False)])
        self._multi([("create", path, data, False, False)])

    def mark_topic_for_deletion(self, name: str) -> None:
        with contextlib.suppress(ZkOpError):
            self._multi([("create", zd.delete_topic_path(name), b"", False, False)])

    def get_topic_deletions(self) -> list[str]:
        return self._children(zd.DELETE_TOPICS_PATH)

    def delete_topic_znodes(self, name: str, expected_controller_epoch_zk_version: int | None = None) -> None:
        paths = self._subtree(zd.topic_path(name)) + [zd.config_entity_path(zd.CONFIG_TYPE_TOPIC, name)]
        self._delete_fenced(paths, expected_controller_epoch_zk_version)

    def remove_topic_deletion(self, name: str, expected_controller_epoch_zk_version: int | None = None) -> None:
        self._delete_fenced([zd.delete_topic_path(name)], expected_controller_epoch_zk_version)

    def _subtree(self, path: str) -> list[str]:
        out = [path]
        for child in self._children(path):
            out += self._subtree(f"{path}/{child}")
        return out

    def _delete_fenced(self, paths: list[str], expected_epoch_version: int | None) -> None:
        present = [p for p in paths if self._data(p) is not None]
        if not present:
            return
        ops: list[tuple[Any, ...]] = []
        if expected_epoch_version is not None:
            ops.append(("check", zd.CONTROLLER_EPOCH_PATH, expected_epoch_version))
        ops += [("delete", p, ANY_VERSION) for p in reversed(present)]
        try:
            self._multi(ops)
        except ZkOpError as exc:
            if expected_epoch_version is not None and exc.index == 0:
                raise ControllerMovedError("controller epoch moved: refusing to delete") from exc
            raise KafkaZkError(f"deleting {exc.path} failed: {exc.reason}") from exc

    # -- log dir events (KIP-112) ----------------------------------------------------------------------
    # Kafka's /log_dir_event_notification/log_dir_event_<seq> znodes, {"version":1,"broker":b,"event":1}:
    # what a broker writes when one of its log dirs fails, and what the controller reads and deletes.
    def propagate_log_dir_event(self, broker_id: int) -> str:
        return str(self._multi([("create", f"{zd.LOG_DIR_EVENT_NOTIFICATION_PATH}/log_dir_event_",
                                 zd.to_json_bytes({"version": 1, "broker": broker_id, "event": 1}), False, True)])[0])

    def get_log_dir_events(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for child in self._children(zd.LOG_DIR_EVENT_NOTIFICATION_PATH):
            node = self._data(f"{zd.LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}")
            body = zd.parse_json(node.data) if node else None
            broker = body.get("broker") if isinstance(body, dict) and body.get("event", 1) == 1 else None
            out[child] = broker if isinstance(broker, int) and not isinstance(broker, bool) else None
        return out

    def delete_log_dir_events(self, children: list[str], expected_controller_epoch_zk_version: int) -> None:
        self._delete_fenced([f"{zd.LOG_DIR_EVENT_NOTIFICATION_PATH}/{c}" for c in children],
                            expected_controller_epoch_zk_version)

    # -- partition state ---------------------------------------------------------------------------------
    def get_partition_state(self, topic: str, partition: int) -> tuple[LeaderIsrAndControllerEpoch, int] | None:
        node = self._data(zd.partition_state_path(topic, partition))
        return (zd.decode_partition_state(node.data), node.stat.version) if node else None

    def get_partition_states(self, topic: str) -> dict[int, tuple[LeaderIsrAndControllerEpoch, int]]:
        out = {}
        for child in self._children(zd.topic_partitions_path(topic)):
            got = self.get_partition_state(topic, int(child))
            if got is not None:
                out[int(child)] = got
        return dict(sorted(out.items()))

    def create_partition_states(self, topic: str, states: dict[int, LeaderIsrAndControllerEpoch],
                                expected_controller_epoch_zk_version: int) -> dict[int, int]:
        partitions_path = zd.topic_partitions_path(topic)
        ops: list[tuple[Any, ...]] = [("check", zd.CONTROLLER_EPOCH_PATH, expected_controller_epoch_zk_version)]
        if self._data(partitions_path) is None:
            ops.append(("create", partitions_path, b"", False, False))
        for p, state in sorted(states.items()):
            ops.append(("create", zd.partition_path(topic, p), b"", False, False))
            ops.append(("create", zd.partition_state_path(topic, p), zd.encode_partition_state(state), False, False))
        try:
            self._multi(ops)
        except ZkOpError as exc:
            self._raise_fenced(exc, f"partition states of {topic!r}")
        return {p: 0 for p in states}

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_zk_version: int, controller_epoch_zk_version: int) -> int:
        return self.update_partition_states([(topic, partition, state, expected_zk_version)],
                                            controller_epoch_zk_version)[(topic, partition)]

    def update_partition_states(self, updates: list[tuple[str, int, LeaderIsrAndControllerEpoch, int]],
                                controller_epoch_zk_version: int) -> dict[tuple[str, int], int]:
        ops: list[tuple[Any, ...]] = [("check", zd.CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)]
        ops += [("set", zd.partition_state_path(topic, p), zd.encode_partition_state(state), version)
                for topic, p, state, version in updates]
        try:
            results = self._multi(ops)
        except ZkOpError as exc:
            what = f"state of {updates[exc.index - 1][0]}-{updates[exc.index - 1][1]}" if exc.index else "states"
            self._raise_fenced(exc, what)
        return {(topic, p): int(r.version) for (topic, p, _, _), r in zip(updates, results[1:], strict=True)}

    def update_assignments_and_states(self, assignments: list[TopicAssignment], names: list[str],
                                      updates: list[tuple[str, int, LeaderIsrAndControllerEpoch, int]],
                                      controller_epoch_zk_version: int) -> dict[tuple[str, int], int]:
        ops: list[tuple[Any, ...]] = [("check", zd.CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)]
        ops += [("set", zd.topic_path(name), zd.encode_topic_assignment(a.topic_id, a.partitions, a.adding_replicas,
                                                                         a.removing_replicas), a.zk_version)
                for name, a in zip(names, assignments, strict=True)]
        ops += [("set", zd.partition_state_path(topic, p), zd.encode_partition_state(state), version)
                for topic, p, state, version in updates]
        try:
            results = self._multi(ops)
        except ZkOpError as exc:
            self._raise_fenced(exc, exc.path)
        return {(topic, p): int(r.version)
                for (topic, p, _, _), r in zip(updates, results[1 + len(names):], strict=True)}

    # -- /admin/reassign_partitions --
    def get_partition_reassignment(self) -> dict[tuple[str, int], list[int]] | None:
        node = self._data(zd.REASSIGN_PARTITIONS_PATH)
        return zd.decode_partition_reassignment(node.data) if node else None

    def create_partition_reassignment(self, reassignment: dict[tuple[str, int], list[int]]) -> None:
        try:
            self._multi([("create", zd.REASSIGN_PARTITIONS_PATH, zd.encode_partition_reassignment(reassignment),
                          False, False)])
        except ZkOpError as exc:
            raise NodeExistsError(f"{zd.REASSIGN_PARTITIONS_PATH}: {exc.reason}") from exc

    def set_or_delete_partition_reassignment(self, remaining: dict[tuple[str, int], list[int]],
                                             controller_epoch_zk_version: int) -> None:
        if not remaining:
            self._delete_fenced([zd.REASSIGN_PARTITIONS_PATH], controller_epoch_zk_version)
            return
        try:
            self._multi([("check", zd.CONTROLLER_EPOCH_PATH, controller_epoch_zk_version),
                         ("set", zd.REASSIGN_PARTITIONS_PATH, zd.encode_partition_reassignment(remaining),
                          ANY_VERSION)])
        except ZkOpError as exc:
            if exc.reason != NO_NODE or exc.index == 0:
                self._raise_fenced(exc, zd.REASSIGN_PARTITIONS_PATH)

    @staticmethod
    def _raise_fenced(exc: ZkOpError, what: str) -> Any:
        """`KafkaZkClient._raise_fenced`: op 0 checks `/controller_epoch`."""
        if exc.index == 0:
            raise ControllerMovedError(f"a newer controller was elected; refusing to write {what}") from exc
        if exc.reason == BAD_VERSION:
            raise BadVersionError(f"{what} changed since it was read") from exc
        if exc.reason == NO_NODE:
            raise ZNodeNotFoundError(f"{what} does not exist") from exc
        if exc.reason == NODE_EXISTS:
            raise NodeExistsError(f"{what} already exists") from exc
        raise KafkaZkError(f"writing {what} failed: {exc.reason}") from exc


class RecordingChannel:
    """A `ControllerChannelManager` that keeps what the controller sends instead of sending it.

    Constructed by the controller on each election (same arguments); `sent` holds every request in
    the order the controller queued it, per broker only while that broker was added."""

    def __init__(self, controller_id: int, timeout_ms: int, security: Any = None) -> None:
        self.controller_id = controller_id
        self.brokers: set[int] = set()
        self.sent: list[tuple[int, Any, int]] = []
        self.closed = False

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        self.brokers.add(broker_id)

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.discard(broker_id)

    def send(self, broker_id: int, request: Any, version: int, callback: Any = None) -> None:
        if broker_id in self.brokers:
            self.sent.append((broker_id, request, version))

    async def close(self) -> None:
        self.closed = True
