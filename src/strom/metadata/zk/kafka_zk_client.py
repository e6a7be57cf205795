"""`KafkaZkClient`: Kafka 3.x's ZooKeeper-mode tree, read and written through kazoo.

The cluster's truth lives in ZooKeeper exactly as a Kafka 3.x cluster in ZooKeeper mode
keeps it (see `zk_data` for paths and payloads), so a Kafka operator can inspect a Strom
cluster with zkCli. This class is the only code that talks to ZooKeeper; the controller
and the metadata store build on it.

Threading: every method blocks on network round trips; from asyncio, call them through
`asyncio.to_thread` (or a dedicated executor). Callbacks (session-state listeners,
watches) run on kazoo's own thread and must not block: hand the event to the loop with
`loop.call_soon_threadsafe`.

Fencing: every write the controller makes to partition state is a ZooKeeper multi-op
that also checks the version of `/controller_epoch` the controller saw when it was
elected, so a controller that lost its election (but does not know yet) can never
overwrite its successor's decisions (`ControllerMovedError`).

Connection loss: operations are retried until `connection_timeout_ms` runs out, then
raise `ZkConnectionError`. A write retried after a lost connection may find its own
earlier attempt applied; the conditional writes below detect that case and succeed.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError as KazooBadVersionError,
)
from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError

from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.errors import (
    BadVersionError,
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    KafkaZkError,
    TopicExistsError,
    ZkConnectionError,
    ZNodeNotFoundError,
)
from strom.metadata.zk.errors import (
    NodeExistsError as ZkNodeExistsError,
)
from strom.metadata.zk.zk_data import (
    BrokerRegistration,
    LeaderIsrAndControllerEpoch,
    ProducerIdsBlock,
    TopicAssignment,
)
from strom.security.acl import (
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SESSION_TIMEOUT_MS = 18_000  # Kafka's zookeeper.session.timeout.ms
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class SessionState(enum.Enum):
    """What a session-state listener is told (kazoo's states, in Kafka's words).

    CONNECTED: connected (first time, after a reconnect, or with a *new* session after LOST).
    SUSPENDED: the connection dropped; the session may still be alive, ephemerals still exist.
    LOST: the session expired (or the client closed): ephemerals and watches of that session
          are gone, so a broker must register again once CONNECTED comes back.
    """

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


StateListener = Callable[[SessionState], None]


def split_connect_string(connect: str) -> tuple[str, str]:
    """`host:port,host:port/chroot` -> (`host:port,host:port`, `/chroot`); chroot is "" when absent."""
    slash = connect.find("/")
    if slash < 0:
        return connect, ""
    hosts, chroot = connect[:slash], connect[slash:].rstrip("/")
    return hosts, chroot


class KafkaZkClient:
    """Kafka's ZooKeeper-mode operations over one ZooKeeper session.

    `connect` is Kafka's `zookeeper.connect`: `host:port[,host:port...][/chroot]`; the chroot
    is created on `start()` if missing, and so are the persistent paths a Kafka broker expects.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect_string = connect
        self.hosts, self.chroot = split_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        # Kafka: zookeeper.connection.timeout.ms defaults to the session timeout.
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._zk = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000.0,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            logger=logging.getLogger("kazoo.client"),
        )
        self._retry = KazooRetry(
            max_tries=-1,
            delay=0.05,
            backoff=2,
            max_delay=1.0,
            deadline=self.connection_timeout_ms / 1000.0,
            ignore_expire=True,
        )
        self._listeners: list[StateListener] = []
        self._listeners_lock = threading.Lock()
        self._zk.add_listener(self._on_state)

    # -- session ---------------------------------------------------------------
    def start(self) -> KafkaZkClient:
        """Connect (raising `ZkConnectionError` after `connection_timeout_ms`), then create the
        chroot and Kafka's persistent paths if they are missing."""
        if self.chroot:
            self._create_chroot()
        try:
            self._zk.start(timeout=self.connection_timeout_ms / 1000.0)
        except KazooTimeoutError as exc:
            self._zk.stop()
            raise ZkConnectionError(f"could not connect to ZooKeeper at {self.connect_string}: {exc}") from exc
        for path in zd.PERSISTENT_PATHS:
            self._call(self._zk.ensure_path, path)
        return self

    def _create_chroot(self) -> None:
        """The chroot must exist before a chrooted session can use it (Kafka creates it too)."""
        boot = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000.0)
        try:
            boot.start(timeout=self.connection_timeout_ms / 1000.0)
            boot.ensure_path(self.chroot)
        except KazooTimeoutError as exc:
            raise ZkConnectionError(f"could not connect to ZooKeeper at {self.hosts}: {exc}") from exc
        finally:
            boot.stop()
            boot.close()

    def close(self) -> None:
        """End the session: ephemerals (broker registration, /controller) disappear at once."""
        self._zk.stop()
        self._zk.close()

    def __enter__(self) -> KafkaZkClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        """True while the client has a live connection to a ZooKeeper server."""
        return self._zk.connected and self._zk.state == KazooState.CONNECTED

    @property
    def session_id(self) -> int | None:
        """The current session's id (changes after an expiry), None before the first connect."""
        cid = self._zk.client_id
        return cid[0] if cid else None

    def add_state_listener(self, listener: StateListener) -> None:
        """Call `listener(SessionState)` on every session-state change (on kazoo's thread)."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def _on_state(self, state: str) -> None:
        mapped = {
            KazooState.CONNECTED: SessionState.CONNECTED,
            KazooState.SUSPENDED: SessionState.SUSPENDED,
            KazooState.LOST: SessionState.LOST,
        }[state]
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(mapped)
            except Exception:  # a listener must never break kazoo's event thread
                log.exception("ZooKeeper session-state listener failed")

    # -- plumbing --------------------------------------------------------------
    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one ZooKeeper operation, retrying connection loss until the connection timeout."""
        try:
            return self._retry.copy()(fn, *args, **kwargs)
        except (RetryFailedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError) as exc:
            raise ZkConnectionError(f"ZooKeeper at {self.connect_string} unavailable: {exc!r}") from exc

    def _get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return self._call(self._zk.get, path)
        except NoNodeError:
            return None

    def _children(self, path: str) -> list[str]:
        try:
            return self._call(self._zk.get_children, path)
        except NoNodeError:
            return []

    def _exists(self, path: str) -> ZnodeStat | None:
        return self._call(self._zk.exists, path)

    def _commit(self, build: Callable[[Any], None]) -> list[Any]:
        """Build and commit a multi-op; returns kazoo's per-op results (exceptions on failure)."""

        def attempt() -> list[Any]:
            txn = self._zk.transaction()
            build(txn)
            return txn.commit()

        return self._call(attempt)

    @staticmethod
    def _first_error(results: list[Any]) -> tuple[int, Exception] | None:
        for i, r in enumerate(results):
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                return i, r
        return None

    def _create_or_set(self, path: str, data: bytes) -> None:
        while True:
            try:
                self._call(self._zk.set, path, data)
                return
            except NoNodeError:
                pass
            try:
                self._call(self._zk.create, path, data, makepath=True)
                return
            except NodeExistsError:
                continue

    def _subtree(self, path: str) -> list[str]:
        """`path` and every descendant, parents before children."""
        out = [path]
        for child in self._children(path):
            out.extend(self._subtree(f"{path.rstrip('/')}/{child}"))
        return out

    # -- /cluster/id -------------------------------------------------------------
    def get_cluster_id(self) -> str | None:
        got = self._get(zd.CLUSTER_ID_PATH)
        return zd.decode_cluster_id(got[0]) if got else None

    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """The cluster's id; the first caller's `proposed` id (or a fresh random one) wins."""
        existing = self.get_cluster_id()
        if existing is not None:
            return existing
        candidate = proposed or zd.encode_uuid(uuid.uuid4())
        try:
            self._call(self._zk.create, zd.CLUSTER_ID_PATH, zd.encode_cluster_id(candidate), makepath=True)
            return candidate
        except NodeExistsError:
            got = self.get_cluster_id()
            assert got is not None
            return got

    # -- /brokers/ids --------------------------------------------------------------
    def register_broker(
        self,
        broker_id: int,
        endpoints: list[str],
        *,
        listener_security_protocol_map: dict[str, str] | None = None,
        rack: str | None = None,
        jmx_port: int = -1,
        features: dict[str, dict[str, int]] | None = None,
    ) -> int:
        """Create the ephemeral `/brokers/ids/<id>`; returns its czxid, the broker epoch.

        `endpoints` are `LISTENER://host:port` strings. Raises `BrokerIdAlreadyRegisteredError`
        when another live session holds the id. Registering again on the same session (e.g. a
        retried create) returns the existing epoch.
        """
        path = zd.broker_id_path(broker_id)
        data = zd.encode_broker_registration(endpoints, listener_security_protocol_map, rack, jmx_port, features)
        while True:
            try:
                self._call(self._zk.create, path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                pass
            stat = self._exists(path)
            if stat is not None:
                break
            # It vanished between create and read: a previous session's node just expired.
        if stat.ephemeralOwner != self.session_id:
            raise BrokerIdAlreadyRegisteredError(
                f"broker id {broker_id} is already registered in ZooKeeper by another session "
                f"(0x{stat.ephemeralOwner:x}); is another broker running with broker.id={broker_id}?"
            )
        return stat.czxid

    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        got = self._get(zd.broker_id_path(broker_id))
        if got is None:
            return None
        data, stat = got
        return zd.decode_broker_registration(broker_id, data, stat.czxid)

    def get_all_broker_ids(self) -> list[int]:
        return sorted(int(c) for c in self._children(zd.BROKER_IDS_PATH) if c.isdigit())

    def get_all_brokers(self) -> dict[int, BrokerRegistration]:
        """Every registered (live) broker, by id; `epoch` is each znode's czxid."""
        out: dict[int, BrokerRegistration] = {}
        for broker_id in self.get_all_broker_ids():
            reg = self.get_broker(broker_id)
            if reg is not None:
                out[broker_id] = reg
        return out

    # -- /controller and /controller_epoch ------------------------------------------
    def get_controller_id(self) -> int | None:
        got = self._get(zd.CONTROLLER_PATH)
        return zd.decode_controller(got[0]) if got else None

    def try_become_controller(self, broker_id: int) -> bool:
        """Create the ephemeral `/controller` for `broker_id`; False if someone else holds it.

        Prefer `register_controller_and_increment_controller_epoch`, which also bumps the epoch
        atomically; this method is the bare election step.
        """
        try:
            self._call(self._zk.create, zd.CONTROLLER_PATH, zd.encode_controller(broker_id), ephemeral=True)
            return True
        except NodeExistsError:
            stat = self._exists(zd.CONTROLLER_PATH)
            return (
                stat is not None
                and stat.ephemeralOwner == self.session_id
                and self.get_controller_id() == broker_id
            )

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(controller epoch, zk version of /controller_epoch), None if no controller was ever elected."""
        got = self._get(zd.CONTROLLER_EPOCH_PATH)
        if got is None:
            return None
        return zd.decode_controller_epoch(got[0]), got[1].version

    def increment_controller_epoch(self) -> tuple[int, int]:
        """Bump `/controller_epoch` by compare-and-set (created at 1 if absent); returns (epoch, zk_version)."""
        while True:
            current = self.get_controller_epoch()
            if current is None:
                try:
                    self._call(self._zk.create, zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(1))
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch, version = current
            try:
                stat = self._call(
                    self._zk.set, zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(epoch + 1), version
                )
                return epoch + 1, stat.version
            except KazooBadVersionError:
                continue

    def register_controller_and_increment_controller_epoch(self, broker_id: int) -> tuple[int, int]:
        """Kafka's election: create `/controller` and bump `/controller_epoch` in one multi-op.

        Returns (new controller epoch, its zk version), the version every fenced write must
        check. Raises `ControllerMovedError` if another broker won (or won meanwhile).
        """
        current = self.get_controller_epoch()
        if current is None:
            with contextlib.suppress(NodeExistsError):
                self._call(self._zk.create, zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(0))
            current = self.get_controller_epoch()
            assert current is not None
        epoch, version = current
        new_epoch = epoch + 1

        def build(txn: Any) -> None:
            txn.create(zd.CONTROLLER_PATH, zd.encode_controller(broker_id), ephemeral=True)
            txn.set_data(zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(new_epoch), version)

        results = self._commit(build)
        if self._first_error(results) is None:
            return new_epoch, results[1].version
        # A retry after connection loss may meet our own success: check who holds what.
        stat = self._exists(zd.CONTROLLER_PATH)
        now = self.get_controller_epoch()
        if (
            stat is not None
            and stat.ephemeralOwner == self.session_id
            and self.get_controller_id() == broker_id
            and now is not None
            and now[0] == new_epoch
        ):
            return now
        raise ControllerMovedError(
            f"broker {broker_id} lost the controller election (controller={self.get_controller_id()}, "
            f"epoch={now[0] if now else None})"
        )

    def delete_controller(self, expected_controller_epoch_zk_version: int) -> None:
        """Resign: delete `/controller`, fenced by the controller epoch (no-op if already gone)."""

        def build(txn: Any) -> None:
            txn.check(zd.CONTROLLER_EPOCH_PATH, expected_controller_epoch_zk_version)
            txn.delete(zd.CONTROLLER_PATH)

        failed = self._first_error(self._commit(build))
        if failed is None:
            return
        index, error = failed
        if index == 0:
            raise ControllerMovedError(f"controller epoch moved past zk version {expected_controller_epoch_zk_version}")
        if not isinstance(error, NoNodeError):
            raise KafkaZkError(f"could not delete {zd.CONTROLLER_PATH}: {error!r}")

    def _raise_fenced(self, index: int, error: Exception, expected_epoch_version: int, what: str) -> None:
        """Translate a failed fenced multi-op whose op 0 checks `/controller_epoch`."""
        if index == 0:
            raise ControllerMovedError(
                f"controller epoch znode is no longer at zk version {expected_epoch_version}: "
                f"a newer controller was elected; refusing to write {what}"
            ) from error
        if isinstance(error, KazooBadVersionError):
            raise BadVersionError(f"{what} changed since it was read") from error
        if isinstance(error, NoNodeError):
            raise ZNodeNotFoundError(f"{what} does not exist") from error
        if isinstance(error, NodeExistsError):
            raise ZkNodeExistsError(f"{what} already exists") from error
        raise KafkaZkError(f"writing {what} failed: {error!r}") from error

    # -- topics ------------------------------------------------------------------------
    def topic_exists(self, name: str) -> bool:
        return self._exists(zd.topic_path(name)) is not None

    def get_all_topics(self) -> list[str]:
        return sorted(self._children(zd.TOPICS_PATH))

    def create_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        assignment: dict[int, list[int]],
        configs: dict[str, str] | None = None,
    ) -> None:
        """Write `/config/topics/<t>` and `/brokers/topics/<t>` together (one multi-op).

        Kafka writes the config first so that the controller, woken by the new topic znode,
        always finds it. Doing both atomically also means a losing racer never overwrites the
        winner's configs. Raises `TopicExistsError`. Partition state is the controller's job
        (`create_partition_states`).
        """
        config_path = zd.config_entity_path(zd.CONFIG_TYPE_TOPIC, name)
        config_data = zd.encode_entity_config(configs or {})
        topic_data = zd.encode_topic_assignment(topic_id, assignment)
        while True:
            if self.topic_exists(name):
                raise TopicExistsError(f"Topic '{name}' already exists.")
            config_stat = self._exists(config_path)  # a stale config may outlive a deleted topic

            def build(txn: Any, config_stat: ZnodeStat | None = config_stat) -> None:
                if config_stat is None:
                    txn.create(config_path, config_data)
                else:
                    txn.set_data(config_path, config_data, config_stat.version)
                txn.create(zd.topic_path(name), topic_data)

            failed = self._first_error(self._commit(build))
            if failed is None:
                return
            index, error = failed
            if index == 1 and isinstance(error, NodeExistsError):
                got = self.get_topic_assignment(name)
                if got is not None and got.topic_id == topic_id:
                    return  # our own create, retried after a connection loss
                raise TopicExistsError(f"Topic '{name}' already exists.") from error
            if isinstance(error, NodeExistsError | KazooBadVersionError | NoNodeError):
                continue  # the config znode changed under us: look again
            raise KafkaZkError(f"creating topic {name!r} failed: {error!r}") from error

    def get_topic_assignment(self, name: str) -> TopicAssignment | None:
        """Topic id, replica assignment and the znode's `zk_version` (for `set_topic_assignment`)."""
        got = self._get(zd.topic_path(name))
        if got is None:
            return None
        return zd.decode_topic_assignment(got[0], got[1].version)

    def set_topic_assignment(
        self,
        name: str,
        topic_id: uuid.UUID | None,
        assignment: dict[int, list[int]],
        expected_version: int,
        *,
        adding_replicas: dict[int, list[int]] | None = None,
        removing_replicas: dict[int, list[int]] | None = None,
    ) -> int:
        """Replace the assignment (adding partitions, reassignment) if the znode is still at
        `expected_version`; returns the new zk version. Raises `BadVersionError`/`ZNodeNotFoundError`."""
        data = zd.encode_topic_assignment(topic_id, assignment, adding_replicas, removing_replicas)
        return self._conditional_set(zd.topic_path(name), data, expected_version, f"assignment of {name!r}")

    def _conditional_set(self, path: str, data: bytes, expected_version: int, what: str) -> int:
        try:
            return self._call(self._zk.set, path, data, expected_version).version
        except NoNodeError as exc:
            raise ZNodeNotFoundError(f"{what} does not exist") from exc
        except KazooBadVersionError as exc:
            got = self._get(path)  # our own write, retried after a connection loss?
            if got is not None and got[0] == data and got[1].version == expected_version + 1:
                return got[1].version
            raise BadVersionError(f"{what} changed since version {expected_version}") from exc

    # -- configs ---------------------------------------------------------------------
    def get_entity_configs(self, entity_type: str, entity_name: str) -> dict[str, str]:
        """`/config/<type>/<name>`'s overrides ({} when none); type is one of `zk_data.CONFIG_TYPES`."""
        got = self._get(zd.config_entity_path(entity_type, entity_name))
        return zd.decode_entity_config(got[0]) if got else {}

    def set_entity_configs(self, entity_type: str, entity_name: str, configs: dict[str, str]) -> None:
        """Replace the overrides, then announce the change under `/config/changes` as Kafka does."""
        self._create_or_set(zd.config_entity_path(entity_type, entity_name), zd.encode_entity_config(configs))
        self._call(
            self._zk.create,
            f"{zd.CONFIG_CHANGES_PATH}/{zd.CONFIG_CHANGE_PREFIX}",
            zd.encode_config_change(entity_type, entity_name),
            sequence=True,
            makepath=True,
        )

    def get_all_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        """Every `/config/<type>/<name>` with overrides, and for users their `<user>/clients/<client>` children."""
        out: dict[str, dict[str, str]] = {}
        for name in self._children(f"{zd.CONFIG_PATH}/{entity_type}"):
            configs = self.get_entity_configs(entity_type, name)
            if configs:
                out[name] = configs
            if entity_type == zd.CONFIG_TYPE_USER:
                for client in self._children(f"{zd.CONFIG_PATH}/{entity_type}/{name}/clients"):
                    nested = self.get_entity_configs(entity_type, f"{name}/clients/{client}")
                    if nested:
                        out[f"{name}/clients/{client}"] = nested
        return out

    def get_config_change(self, child: str) -> tuple[str, str] | None:
        got = self._get(f"{zd.CONFIG_CHANGES_PATH}/{child}")
        return zd.decode_config_change(got[0]) if got else None

    def get_topic_configs(self, name: str) -> dict[str, str]:
        return self.get_entity_configs(zd.CONFIG_TYPE_TOPIC, name)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.set_entity_configs(zd.CONFIG_TYPE_TOPIC, name, configs)

    def get_broker_configs(self, broker_id: int | None) -> dict[str, str]:
        """Dynamic configs of one broker, or the cluster-wide defaults (`/config/brokers/<default>`) for None."""
        return self.get_entity_configs(zd.CONFIG_TYPE_BROKER, _broker_entity(broker_id))

    def set_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        self.set_entity_configs(zd.CONFIG_TYPE_BROKER, _broker_entity(broker_id), configs)

    def get_balancer_throttles(self) -> tuple[set[int], set[str]]:
        """The brokers and topics whose replication throttles the controller balancer set (not Kafka's)."""
        got = self._get(zd.BALANCER_THROTTLES_PATH)
        return zd.decode_balancer_throttles(got[0]) if got else (set(), set())

    def set_balancer_throttles(self, brokers: set[int], topics: set[str]) -> None:
        """Record them (written before the throttles themselves); nothing left deletes the znode."""
        if brokers or topics:
            self._create_or_set(zd.BALANCER_THROTTLES_PATH, zd.encode_balancer_throttles(brokers, topics))
            return
        with contextlib.suppress(NoNodeError):
            self._call(self._zk.delete, zd.BALANCER_THROTTLES_PATH)

    def get_config_changes(self) -> list[str]:
        """Names of the pending `config_change_<seq>` notifications, oldest first."""
        return sorted(c for c in self._children(zd.CONFIG_CHANGES_PATH) if c.startswith(zd.CONFIG_CHANGE_PREFIX))

    # -- ACLs -------------------------------------------------------------------------------
    def create_acl_paths(self) -> None:
        """The persistent ACL roots Kafka's authorizer makes sure exist (watches need their parents)."""
        for path in zd.ACL_PATHS:
            with contextlib.suppress(NodeExistsError):
                self._call(self._zk.create, path, b"", makepath=True)

    def get_all_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every pattern's ACLs under /kafka-acl and /kafka-acl-extended/<pattern type>."""
        out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        roots = [(zd.ACL_PATH, PatternType.LITERAL)]
        for kind in self._children(zd.EXTENDED_ACL_PATH):
            with contextlib.suppress(ValueError):
                pattern_type = PatternType.parse(kind)
                if pattern_type.is_specific and pattern_type != PatternType.LITERAL:
                    roots.append((f"{zd.EXTENDED_ACL_PATH}/{kind}", pattern_type))
        for root, pattern_type in roots:
            for type_name in self._children(root):
                try:
                    resource_type = ResourceType.parse(type_name)
                except ValueError:
                    continue
                for name in self._children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    entries = self.get_acls(pattern)
                    if entries:
                        out[pattern] = entries
        return out

    def get_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        got = self._get(zd.acl_path(pattern))
        return decode_acls(got[0]) if got else frozenset()

    def update_acls(self, pattern: ResourcePattern,
                    update: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
                    ) -> frozenset[AccessControlEntry]:
        """Read, update and write a pattern's znode on its version (retrying when another broker wrote in
        between), delete it when no ACL is left, then announce the change so every broker re-reads it."""
        path = zd.acl_path(pattern)
        while True:
            got = self._get(path)
            current = decode_acls(got[0]) if got else frozenset()
            new = frozenset(update(current))
            if new == current:
                return new
            try:
                if got is None:
                    self._call(self._zk.create, path, encode_acls(new), makepath=True)
                elif new:
                    self._call(self._zk.set, path, encode_acls(new), version=got[1].version)
                else:
                    self._call(self._zk.delete, path, version=got[1].version)
            except (KazooBadVersionError, NodeExistsError, NoNodeError):
                continue  # someone else changed it: start again from what is there now
            break
        self._call(self._zk.create, f"{zd.acl_change_path(pattern)}/{zd.ACL_CHANGE_PREFIX}",
                   zd.encode_acl_change(pattern), sequence=True, makepath=True)
        return new

    def get_acl_change(self, changes_path: str, child: str) -> tuple[ResourcePattern | None, int]:
        """(the pattern a notification names, its creation time in ms); (None, 0) once it is gone."""
        got = self._get(f"{changes_path}/{child}")
        if got is None:
            return None, 0
        return zd.decode_acl_change(changes_path, got[0]), got[1].ctime

    def delete_acl_change(self, changes_path: str, child: str) -> None:
        with contextlib.suppress(NoNodeError):
            self._call(self._zk.delete, f"{changes_path}/{child}")

    # -- log dir events (KIP-112) --------------------------------------------------------
    def propagate_log_dir_event(self, broker_id: int) -> str:
        """Tell the controller a log dir of `broker_id` failed: a sequential notification znode."""
        return self._call(self._zk.create, f"{zd.LOG_DIR_EVENT_NOTIFICATION_PATH}/{zd.LOG_DIR_EVENT_PREFIX}",
                          zd.encode_log_dir_event(broker_id), sequence=True, makepath=True)

    def get_log_dir_events(self) -> dict[str, int | None]:
        """Pending notifications: child name -> the broker it names (None: unreadable, or gone meanwhile)."""
        out: dict[str, int | None] = {}
        for child in sorted(self._children(zd.LOG_DIR_EVENT_NOTIFICATION_PATH)):
            if child.startswith(zd.LOG_DIR_EVENT_PREFIX):
                got = self._get(f"{zd.LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}")
                out[child] = zd.decode_log_dir_event(got[0]) if got else None
        return out

    def delete_log_dir_events(self, children: list[str], expected_controller_epoch_zk_version: int) -> None:
        """Drop handled notifications, fenced by the controller epoch (a deposed controller leaves them)."""
        self._delete_fenced(lambda: [f"{zd.LOG_DIR_EVENT_NOTIFICATION_PATH}/{c}" for c in children],
                            expected_controller_epoch_zk_version)

    # -- partition state ---------------------------------------------------------------
    def create_partition_states(
        self,
        topic: str,
        states: dict[int, LeaderIsrAndControllerEpoch],
        expected_controller_epoch_zk_version: int,
    ) -> dict[int, int]:
        """Create `.../partitions/<p>/state` for each partition, fenced by the controller epoch.

        One multi-op: all partitions are created or none. Returns partition -> zk version (0).
        Raises `ControllerMovedError`, `ZkNodeExistsError` (a state already exists) or
        `ZNodeNotFoundError` (the topic znode is gone).
        """
        partitions_path = zd.topic_partitions_path(topic)
        need_parent = self._exists(partitions_path) is None

        def build(txn: Any) -> None:
            txn.check(zd.CONTROLLER_EPOCH_PATH, expected_controller_epoch_zk_version)
            if need_parent:
                txn.create(partitions_path)
            for p, state in sorted(states.items()):
                txn.create(zd.partition_path(topic, p))
                txn.create(zd.partition_state_path(topic, p), zd.encode_partition_state(state))

        failed = self._first_error(self._commit(build))
        if failed is not None:
            index, error = failed
            if isinstance(error, NodeExistsError) and self._states_equal(topic, states):
                return {p: 0 for p in states}  # our own create, retried after a connection loss
            self._raise_fenced(index, error, expected_controller_epoch_zk_version, f"partition states of {topic!r}")
        return {p: 0 for p in states}

    def _states_equal(self, topic: str, states: dict[int, LeaderIsrAndControllerEpoch]) -> bool:
        current = self.get_partition_states(topic)
        return all(p in current and current[p][0] == s and current[p][1] == 0 for p, s in states.items())

    def get_partition_state(self, topic: str, partition: int) -> tuple[LeaderIsrAndControllerEpoch, int] | None:
        """(state, zk version) of one partition, None if it has no state znode."""
        got = self._get(zd.partition_state_path(topic, partition))
        if got is None:
            return None
        return zd.decode_partition_state(got[0]), got[1].version

    def get_partition_states(self, topic: str) -> dict[int, tuple[LeaderIsrAndControllerEpoch, int]]:
        """Every partition's (state, zk version) for the topic; partitions without state are left out."""
        out: dict[int, tuple[LeaderIsrAndControllerEpoch, int]] = {}
        for child in self._children(zd.topic_partitions_path(topic)):
            if not child.isdigit():
                continue
            got = self.get_partition_state(topic, int(child))
            if got is not None:
                out[int(child)] = got
        return dict(sorted(out.items()))

    def update_partition_state(
        self,
        topic: str,
        partition: int,
        state: LeaderIsrAndControllerEpoch,
        expected_zk_version: int,
        controller_epoch_zk_version: int,
    ) -> int:
        """Conditionally replace a partition's state; returns its new zk version.

        A multi-op checks `/controller_epoch` at `controller_epoch_zk_version` and sets the state
        at `expected_zk_version`: raises `ControllerMovedError` (stale controller: nothing was
        written), `BadVersionError` (the state changed, e.g. by an ISR update: re-read and retry)
        or `ZNodeNotFoundError`. A batch of one (see ``update_partition_states``).
        """
        versions = self.update_partition_states([(topic, partition, state, expected_zk_version)],
                                                controller_epoch_zk_version)
        return versions[(topic, partition)]

    def update_partition_states(
        self,
        updates: list[tuple[str, int, LeaderIsrAndControllerEpoch, int]],
        controller_epoch_zk_version: int,
    ) -> dict[tuple[str, int], int]:
        """Conditionally replace many partitions' states in one multi-op; returns their new zk versions.

        `updates` holds (topic, partition, state, expected zk version). ZooKeeper applies all or none:
        raises `ControllerMovedError`, or `BadVersionError` / `ZNodeNotFoundError` naming the first
        partition whose state changed or vanished since it was read (nothing was written). One round
        trip instead of one per partition is what makes failover of thousands of partitions fast.
        """
        encoded = [(topic, p, zd.encode_partition_state(state), version) for topic, p, state, version in updates]

        def build(txn: Any) -> None:
            txn.check(zd.CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
            for topic, p, data, version in encoded:
                txn.set_data(zd.partition_state_path(topic, p), data, version)

        results = self._commit(build)
        failed = self._first_error(results)
        if failed is None:
            return {(topic, p): r.version for (topic, p, _, _), r in zip(encoded, results[1:], strict=True)}
        index, error = failed
        if index > 0 and isinstance(error, KazooBadVersionError) and all(
                (got := self._get(zd.partition_state_path(topic, p))) is not None
                and got[0] == data and got[1].version == version + 1 for topic, p, data, version in encoded):
            return {(topic, p): version + 1 for topic, p, _, version in encoded}  # ours, retried after a lost reply
        topic, p = (encoded[index - 1][0], encoded[index - 1][1]) if index > 0 else ("", -1)
        self._raise_fenced(index, error, controller_epoch_zk_version, f"state of {topic}-{p}")
        raise AssertionError("unreachable")

    def update_assignments_and_states(
        self,
        assignments: list[TopicAssignment],
        names: list[str],
        updates: list[tuple[str, int, LeaderIsrAndControllerEpoch, int]],
        controller_epoch_zk_version: int,
    ) -> dict[tuple[str, int], int]:
        """A reassignment's step in one fenced multi-op: the topics' full assignments (``names[i]`` is
        ``assignments[i]``'s topic, set on its ``zk_version``; -1: any) and the partitions' new states
        (conditional on their versions). Returns the states' new versions; errors as ``update_partition_states``."""
        topics = [(zd.topic_path(name), zd.encode_topic_assignment(a.topic_id, a.partitions, a.adding_replicas,
                                                                   a.removing_replicas), a.zk_version)
                  for name, a in zip(names, assignments, strict=True)]
        encoded = [(topic, p, zd.encode_partition_state(state), version) for topic, p, state, version in updates]

        def build(txn: Any) -> None:
            txn.check(zd.CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
            for path, data, version in topics:
                txn.set_data(path, data, version)
            for topic, p, data, version in encoded:
                txn.set_data(zd.partition_state_path(topic, p), data, version)

        results = self._commit(build)
        failed = self._first_error(results)
        states = results[1 + len(topics):]
        if failed is None:
            return {(topic, p): r.version for (topic, p, _, _), r in zip(encoded, states, strict=True)}
        index, error = failed
        if index > len(topics) and isinstance(error, KazooBadVersionError) and all(
                (got := self._get(zd.partition_state_path(topic, p))) is not None
                and got[0] == data and got[1].version == version + 1 for topic, p, data, version in encoded) and all(
                (got := self._get(path)) is not None and got[0] == data for path, data, _ in topics):
            return {(topic, p): version + 1 for topic, p, _, version in encoded}  # ours, retried after a lost reply
        what = (f"assignment of {names[index - 1]}" if 0 < index <= len(topics) else
                f"state of {encoded[index - 1 - len(topics)][0]}-{encoded[index - 1 - len(topics)][1]}"
                if index else "assignments")
        self._raise_fenced(index, error, controller_epoch_zk_version, what)
        raise AssertionError("unreachable")

    # -- /admin/reassign_partitions (the pre-KIP-455 tools' path) --------------------------------------
    def get_partition_reassignment(self) -> dict[tuple[str, int], list[int]] | None:
        """What ``/admin/reassign_partitions`` asks for; None when it does not exist."""
        got = self._get(zd.REASSIGN_PARTITIONS_PATH)
        return zd.decode_partition_reassignment(got[0]) if got is not None else None

    def create_partition_reassignment(self, reassignment: dict[tuple[str, int], list[int]]) -> None:
        """What the old tool did: create ``/admin/reassign_partitions``; raises ``ZkNodeExistsError`` while
        one is in progress."""
        try:
            self._call(self._zk.create, zd.REASSIGN_PARTITIONS_PATH,
                       zd.encode_partition_reassignment(reassignment), makepath=True)
        except NodeExistsError as exc:
            raise ZkNodeExistsError(f"{zd.REASSIGN_PARTITIONS_PATH} exists: a reassignment is in progress") from exc

    def set_or_delete_partition_reassignment(self, remaining: dict[tuple[str, int], list[int]],
                                             controller_epoch_zk_version: int) -> None:
        """The controller's bookkeeping: ``/admin/reassign_partitions`` keeps what is still to do; it is
        deleted once nothing is (fenced by the controller epoch)."""
        if not remaining:
            self._delete_fenced(lambda: [zd.REASSIGN_PARTITIONS_PATH], controller_epoch_zk_version)
            return
        data = zd.encode_partition_reassignment(remaining)

        def build(txn: Any) -> None:
            txn.check(zd.CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
            txn.set_data(zd.REASSIGN_PARTITIONS_PATH, data)

        failed = self._first_error(self._commit(build))
        if failed is not None and not isinstance(failed[1], NoNodeError):
            self._raise_fenced(*failed, controller_epoch_zk_version, zd.REASSIGN_PARTITIONS_PATH)

    # -- topic deletion ------------------------------------------------------------------
    def mark_topic_for_deletion(self, name: str) -> None:
        """Create `/admin/delete_topics/<t>` (what kafka-topics --delete does); idempotent."""
        with contextlib.suppress(NodeExistsError):
            self._call(self._zk.create, zd.delete_topic_path(name), makepath=True)

    def get_topic_deletions(self) -> list[str]:
        """Topics queued for deletion, i.e. the children of `/admin/delete_topics`."""
        return sorted(self._children(zd.DELETE_TOPICS_PATH))

    def remove_topic_deletion(self, name: str, expected_controller_epoch_zk_version: int | None = None) -> None:
        """Drop the deletion marker once the topic is gone (fenced when a controller epoch version is given)."""
        self._delete_fenced(lambda: [zd.delete_topic_path(name)], expected_controller_epoch_zk_version)

    def delete_topic_znodes(self, name: str, expected_controller_epoch_zk_version: int | None = None) -> None:
        """Delete `/brokers/topics/<t>` (with its partition states) and `/config/topics/<t>` in one
        multi-op, fenced by the controller epoch when its zk version is given; missing znodes are skipped."""
        self._delete_fenced(
            lambda: self._subtree(zd.topic_path(name)) + [zd.config_entity_path(zd.CONFIG_TYPE_TOPIC, name)],
            expected_controller_epoch_zk_version,
        )

    def _delete_fenced(self, list_paths: Callable[[], list[str]], expected_epoch_version: int | None) -> None:
        """Delete the listed znodes (parents listed before children) in one multi-op."""
        for _ in range(10):
            present = [p for p in list_paths() if self._exists(p) is not None]
            if not present:
                return

            def build(txn: Any, present: list[str] = present) -> None:
                if expected_epoch_version is not None:
                    txn.check(zd.CONTROLLER_EPOCH_PATH, expected_epoch_version)
                for p in reversed(present):
                    txn.delete(p)

            failed = self._first_error(self._commit(build))
            if failed is None:
                return
            index, error = failed
            if expected_epoch_version is not None and index == 0:
                self._raise_fenced(index, error, expected_epoch_version, "deletion")
            if not isinstance(error, NoNodeError | NotEmptyError):
                raise KafkaZkError(f"deleting {present[0]} failed: {error!r}") from error
            # a znode vanished or a child appeared meanwhile: list again
        raise KafkaZkError("could not delete: the tree keeps changing")

    # -- producer ids ----------------------------------------------------------------------
    def allocate_producer_id_block(self, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE) -> int:
        """Claim the next `size` producer ids for `broker_id` by compare-and-set on
        `/latest_producer_id_block`; returns the first id. Never hands out an id twice."""
        while True:
            got = self._get(zd.PRODUCER_ID_BLOCK_PATH)
            if got is None:
                with contextlib.suppress(NodeExistsError):
                    self._call(self._zk.create, zd.PRODUCER_ID_BLOCK_PATH, b"", makepath=True)
                continue
            data, stat = got
            first = zd.decode_producer_id_block(data).last_producer_id + 1 if data else 0
            block = ProducerIdsBlock(broker_id, first, size)
            try:
                self._call(self._zk.set, zd.PRODUCER_ID_BLOCK_PATH, zd.encode_producer_id_block(block), stat.version)
                return first
            except KazooBadVersionError:
                current = self._get(zd.PRODUCER_ID_BLOCK_PATH)
                if current is not None and current[0] == zd.encode_producer_id_block(block):
                    if current[1].version == stat.version + 1:
                        return first  # our own write, retried after a connection loss
                continue

    # -- watches -----------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Callable[[list[str]], bool | None]) -> ChildrenWatch:
        """Call `callback(children)` now and on every change of `path`'s children.

        Runs on kazoo's thread: hand the event to asyncio with `loop.call_soon_threadsafe`.
        Return False from the callback to stop watching. The watch survives reconnects and
        (kazoo re-arms it) session expiry. `path` should exist (the persistent paths do).
        """
        return ChildrenWatch(self._zk, path, callback)

    def watch_data(
        self, path: str, callback: Callable[[bytes | None, ZnodeStat | None], bool | None]
    ) -> DataWatch:
        """Call `callback(data, stat)` now and whenever the znode is created, changed or deleted
        (data and stat are None while it does not exist). Same threading rules as `watch_children`."""
        return DataWatch(self._zk, path, callback)

    # -- consumer offsets of OffsetCommit/OffsetFetch v0 (Kafka 3.9's ZooKeeper mode) -------------
    def set_consumer_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """`/consumers/<group>/offsets/<topic>/<partition>` = the offset as text, where Kafka keeps v0 commits."""
        self._create_or_set(f"/consumers/{group}/offsets/{topic}/{partition}", str(offset).encode())

    def get_consumer_offset(self, group: str, topic: str, partition: int) -> int | None:
        got = self._get(f"/consumers/{group}/offsets/{topic}/{partition}")
        try:
            return int(got[0].decode()) if got else None
        except ValueError:
            return None  # not ours to fail on: an unreadable value reads as no commit

    # -- raw access (tools) ----------------------------------------------------------------------
    def get_data(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        return self._get(path)

    def get_children(self, path: str) -> list[str]:
        """Children of `path`; raises `ZNodeNotFoundError` if it does not exist."""
        try:
            return sorted(self._call(self._zk.get_children, path))
        except NoNodeError as exc:
            raise ZNodeNotFoundError(f"Node does not exist: {path}") from exc

    def walk(self, path: str = "/") -> Iterator[str]:
        """`path` and its descendants, depth first, parents first."""
        yield from self._subtree(path)


def _broker_entity(broker_id: int | None) -> str:
    return zd.DEFAULT_BROKER_ENTITY if broker_id is None else str(broker_id)
