"""The console's Kafka side: one KafkaGateway per identity (anonymous or a SASL login).

Everything here blocks (confluent-kafka futures, a Consumer's poll loop), so the web layer
calls it from worker threads. Kafka errors become ConsoleError with a readable message
and an HTTP status; nothing here knows about HTML.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from strom.cli.common import CliError, describe_kafka_error
from strom.console.errors import ConsoleError, bad_request, not_found
from strom.console.formatting import (
    RenderedBytes,
    partition_lag,
    render_bytes,
    searchable_text,
    timestamp_type_name,
    total_lag,
)


class FeatureUnavailable(ConsoleError):
    """The broker has this API switched off (SECURITY_DISABLED) or does not implement it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 501, "Not available")


_STATUS_BY_ERROR = {
    "UNKNOWN_TOPIC_OR_PART": 404, "_UNKNOWN_TOPIC": 404, "UNKNOWN_TOPIC_ID": 404, "_UNKNOWN_PARTITION": 404,
    "GROUP_ID_NOT_FOUND": 404, "RESOURCE_NOT_FOUND": 404,
    "TOPIC_ALREADY_EXISTS": 409, "NON_EMPTY_GROUP": 409, "UNKNOWN_MEMBER_ID": 409, "REBALANCE_IN_PROGRESS": 409,
    "_TIMED_OUT": 504, "REQUEST_TIMED_OUT": 504,
    "_TRANSPORT": 502, "_ALL_BROKERS_DOWN": 502, "_RESOLVE": 502, "BROKER_NOT_AVAILABLE": 502,
    "SASL_AUTHENTICATION_FAILED": 401, "_AUTHENTICATION": 401, "ILLEGAL_SASL_STATE": 401,
    "UNSUPPORTED_SASL_MECHANISM": 401,
    "TOPIC_AUTHORIZATION_FAILED": 403, "GROUP_AUTHORIZATION_FAILED": 403, "CLUSTER_AUTHORIZATION_FAILED": 403,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 403, "DELEGATION_TOKEN_AUTHORIZATION_FAILED": 403,
}
_UNAVAILABLE = {"SECURITY_DISABLED", "_UNSUPPORTED_FEATURE", "UNSUPPORTED_VERSION", "_NOT_IMPLEMENTED"}


def error_name(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    return err.name() if isinstance(err, KafkaError) else ""


def kafka_failure(exc: KafkaException, what: str, topic: str | None = None) -> ConsoleError:
    """A KafkaException as the page shows it: what was being done, then the broker's reason."""
    name = error_name(exc)
    message = f"{what}: {describe_kafka_error(exc, topic)}"
    if name in ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"):
        message += " If the broker requires SASL, log in (or give --command-config)."
    if name in _UNAVAILABLE:
        return FeatureUnavailable(message)
    if name.endswith("_AUTHORIZATION_FAILED"):
        return ConsoleError(message + " (not allowed for this user)", 403, "Not authorized")
    status = _STATUS_BY_ERROR.get(name)
    if status is None:
        status = 400 if name.startswith("INVALID") or name in ("POLICY_VIOLATION", "_INVALID_ARG") else 502
    return ConsoleError(message, status)


def legacy_client_config(config: dict[str, Any]) -> dict[str, Any]:
    """kafka-python settings equivalent to a librdkafka config (used for DescribeLogDirs only)."""
    out: dict[str, Any] = {"bootstrap_servers": config["bootstrap.servers"].split(","),
                           "client_id": config.get("client.id", "strom-console"),
                           "request_timeout_ms": 10000}
    mapping = {"security.protocol": "security_protocol", "sasl.username": "sasl_plain_username",
               "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
               "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
               "ssl.key.password": "ssl_password"}
    for key, target in mapping.items():
        if config.get(key):
            out[target] = config[key]
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if mechanism:
        out["sasl_mechanism"] = mechanism
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        out["ssl_check_hostname"] = False
    return out


# -- what pages show ------------------------------------------------------------------------------

@dataclass
class BrokerView:
    id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool


@dataclass
class ClusterView:
    cluster_id: str | None
    controller_id: int | None
    brokers: list[BrokerView]


@dataclass
class PartitionView:
    id: int
    leader: int
    replicas: list[int]
    isr: list[int]
    earliest: int | None = None
    latest: int | None = None
    size: int | None = None
    error: str | None = None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        """No leader: nothing can be read or written until a replica in the ISR comes back."""
        return self.leader < 0

    @property
    def messages(self) -> int | None:
        if self.earliest is None or self.latest is None:
            return None
        return max(self.latest - self.earliest, 0)


@dataclass
class TopicView:
    name: str
    internal: bool
    partitions: list[PartitionView]
    topic_id: str | None = None

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.partitions]
        return None if not sizes or any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.offline)

    @property
    def messages(self) -> int | None:
        counts = [p.messages for p in self.partitions]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


@dataclass
class LogDirView:
    path: str
    error: str | None
    size: int  # bytes of the partitions in it
    partitions: int
    total_bytes: int | None  # the volume's capacity and free space (DescribeLogDirs v4+), when reported
    usable_bytes: int | None


@dataclass
class ReplicaView:
    """One replica a broker holds: its partition, whether it leads it and whether it is in sync."""

    topic: str
    partition: int
    leader: bool
    in_sync: bool
    offline: bool
    size: int | None


@dataclass
class BrokerDetail:
    broker: BrokerView
    configs: list[ConfigView]
    log_dirs: list[LogDirView]
    replicas: list[ReplicaView]
    log_dirs_error: str | None = None

    @property
    def leaders(self) -> int:
        return sum(1 for r in self.replicas if r.leader)

    @property
    def out_of_sync(self) -> int:
        return sum(1 for r in self.replicas if not r.in_sync)

    @property
    def size(self) -> int:
        return sum(d.size for d in self.log_dirs)


@dataclass
class ConfigView:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


@dataclass
class RecordView:
    partition: int
    offset: int
    timestamp: int | None
    timestamp_type: str
    key: RenderedBytes
    value: RenderedBytes
    headers: list[tuple[str, RenderedBytes]]


@dataclass
class BrowseQuery:
    partition: int | None = None  # None: every partition
    mode: str = "newest"  # newest | offset | timestamp
    offset: int | None = None
    timestamp: int | None = None
    limit: int = 50
    search: str = ""
    scan: int = 5000  # records read per partition when searching
    key_format: str = "auto"  # how keys, values and header values are shown (formatting.DISPLAY_FORMATS)
    value_format: str = "auto"
    header_format: str = "auto"

    def render(self, message: Any) -> RecordView:
        return _record(message, self.key_format, self.value_format, self.header_format)


@dataclass
class BrowseResult:
    records: list[RecordView]
    scanned: int
    partial: bool
    notes: list[str] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)  # log end offset per partition read: where a live tail starts


@dataclass
class LagRow:
    topic: str
    partition: int
    committed: int | None
    end_offset: int | None
    lag: int | None
    member: str | None = None
    client_id: str | None = None
    host: str | None = None


@dataclass
class MemberView:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: list[tuple[str, int]]
    # Consumer-protocol groups only (ConsumerGroupDescribe): the member's epoch, and "classic" for a
    # classic member served by a consumer group after an online upgrade.
    epoch: int | None = None
    member_type: str | None = None


@dataclass
class GroupView:
    group_id: str
    state: str
    simple: bool
    members: list[MemberView]
    coordinator: int | None
    assignor: str
    lag: list[LagRow]
    # The exactly-once Spark sink's bookkeeping, not a consumer: its "offset" is a batch id (see spark_marker_batch).
    spark_marker_batch: int | None = None
    protocol: str = "classic"  # or "consumer": the KIP-848 protocol (group.protocol=consumer)
    group_epoch: int | None = None  # consumer-protocol groups: the group and target assignment epochs
    assignment_epoch: int | None = None

    @property
    def spark_marker(self) -> bool:
        return self.spark_marker_batch is not None

    @property
    def total_lag(self) -> int | None:
        """Sum of the known lags; None for a Spark sink marker group, whose committed "offset" is no position."""
        if self.spark_marker:
            return None
        return total_lag([row.lag for row in self.lag])

    @property
    def topics(self) -> list[str]:
        return sorted({row.topic for row in self.lag})

    @property
    def resettable(self) -> bool:
        """Kafka's tools reset offsets only of an inactive group (Empty, or Dead: offsets without members)."""
        return self.state in ("Empty", "Dead")


@dataclass
class AclView:
    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str


@dataclass
class ScramUserView:
    user: str
    credentials: list[tuple[str, int]]  # (mechanism, iterations)


def state_name(state: Any) -> str:
    """ConsumerGroupState.PREPARING_REBALANCING -> PreparingRebalance, as Kafka's tools print it."""
    name = getattr(state, "name", str(state)).rsplit(".", 1)[-1]
    return {"PREPARING_REBALANCING": "PreparingRebalance", "PREPARING_REBALANCE": "PreparingRebalance",
            "COMPLETING_REBALANCING": "CompletingRebalance", "COMPLETING_REBALANCE": "CompletingRebalance",
            "UNKNOWN": "Unknown"}.get(name, name.capitalize())


ACL_OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
                  "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
ACL_RESOURCE_TYPES = ("TOPIC", "GROUP", "BROKER", "TRANSACTIONAL_ID")
ACL_PATTERN_TYPES = ("LITERAL", "PREFIXED")
ACL_PERMISSIONS = ("ALLOW", "DENY")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
RESET_TARGETS = ("earliest", "latest", "offset", "timestamp")


class KafkaGateway:
    """Kafka clients for one identity: an AdminClient, a Producer, short-lived Consumers."""

    def __init__(self, config: dict[str, Any], timeout: float = 10.0, browse_timeout: float = 10.0) -> None:
        self.config = {"client.id": "strom-console", "log_level": 0, **config}
        self.timeout = timeout
        self.browse_timeout = browse_timeout
        self._lock = threading.Lock()
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._produce_lock = threading.Lock()
        self._legacy: Any = None
        self._legacy_lock = threading.Lock()

    # -- clients ----------------------------------------------------------------------------------
    @property
    def admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                try:
                    self._admin = AdminClient(self.config)
                except KafkaException as exc:
                    raise ConsoleError(f"Invalid client configuration: {describe_kafka_error(exc)}", 500) from None
            return self._admin

    def _producer_client(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer({**self.config, "linger.ms": 0, "acks": "all",
                                           "message.timeout.ms": int(self.timeout * 1000)})
            return self._producer

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(1)
                self._producer = None
            self._admin = None
        with self._legacy_lock:
            if self._legacy is not None:
                try:
                    self._legacy.close()
                except Exception:  # noqa: BLE001 - closing a client must not fail a logout
                    pass
                self._legacy = None

    def cluster_operations(self) -> set[str] | None:
        """What this identity may do on the cluster: the authorized operations AdminClient.describe_cluster
        reports (Kafka fills them only for a principal with Describe on the cluster, so an empty set also
        means "no Describe"). None when the broker cannot say."""
        try:
            result = self.admin.describe_cluster(include_authorized_operations=True,
                                                 request_timeout=self.timeout).result()
        except KafkaException:
            return None
        return {op.name for op in result.authorized_operations or ()}  # confluent-kafka reports "none" as None

    def require_cluster_describe(self, what: str) -> None:
        """Refuse up front what needs Describe on the cluster when the broker says this user lacks it, so
        admin-only APIs are not even sent (some refusals used to abort librdkafka, see scram_users)."""
        operations = self.cluster_operations()
        if operations is not None and "DESCRIBE" not in operations:
            raise ConsoleError(f"{what}: this needs Describe on the cluster (not allowed for this user).", 403,
                               "Not authorized")

    def check_login(self) -> None:
        """Prove the credentials work: one metadata round trip."""
        try:
            self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_failure(exc, "Login failed") from None

    # -- cluster ----------------------------------------------------------------------------------
    def cluster(self) -> ClusterView:
        try:
            result = self.admin.describe_cluster(request_timeout=self.timeout).result()
        except KafkaException as exc:
            raise kafka_failure(exc, "Could not describe the cluster") from None
        controller = result.controller.id if result.controller is not None else None
        brokers = [BrokerView(n.id, n.host, n.port, n.rack, n.id == controller)
                   for n in sorted(result.nodes, key=lambda n: n.id)]
        return ClusterView(result.cluster_id, controller, brokers)

    # -- topics -----------------------------------------------------------------------------------
    def topics(self) -> list[TopicView]:
        try:
            metadata = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_failure(exc, "Could not list topics") from None
        views = []
        for name, info in sorted(metadata.topics.items()):
            parts = [PartitionView(p.id, p.leader, list(p.replicas), list(p.isrs),
                                   error=p.error.str() if p.error else None)
                     for p in sorted(info.partitions.values(), key=lambda p: p.id)]
            views.append(TopicView(name, name.startswith("__"), parts))
        self._fill_sizes(views)
        return views

    def topic(self, name: str) -> TopicView:
        """One topic with leaders, replicas, ISR, offsets and sizes; 404 when it does not exist."""
        try:
            description = self.admin.describe_topics(TopicCollection([name]), request_timeout=self.timeout)[
                name].result()
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not describe topic '{name}'", name) from None
        parts = [PartitionView(p.id, p.leader.id if p.leader is not None else -1,
                               [r.id for r in p.replicas], [r.id for r in p.isr])
                 for p in sorted(description.partitions, key=lambda p: p.id)]
        view = TopicView(name, bool(description.is_internal), parts, str(description.topic_id))
        ids = [p.id for p in parts if not p.offline]  # an offline partition has no leader to ask
        earliest = self._offsets(name, ids, OffsetSpec.earliest(), tolerant=True)
        latest = self._offsets(name, ids, OffsetSpec.latest(), tolerant=True)
        for p in parts:
            p.earliest, p.latest = earliest.get(p.id), latest.get(p.id)
        self._fill_sizes([view])
        return view

    def partition_ids(self, name: str) -> list[int]:
        return [p.id for p in self._describe_partitions(name)]

    def _describe_partitions(self, name: str) -> list[Any]:
        try:
            description = self.admin.describe_topics(TopicCollection([name]), request_timeout=self.timeout)[
                name].result()
        except KafkaException as exc:
            raise kafka_failure(exc, f"Topic '{name}'", name) from None
        return sorted(description.partitions, key=lambda p: p.id)

    def _offsets(self, topic: str, partitions: list[int], spec: OffsetSpec,
                 tolerant: bool = False) -> dict[int, int]:
        """Offsets per partition; `tolerant` leaves out partitions that cannot answer (no leader) instead of
        failing the page."""
        if not partitions:
            return {}
        try:
            futures = self.admin.list_offsets({TopicPartition(topic, p): spec for p in partitions},
                                              request_timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not list offsets of topic '{topic}'", topic) from None
        found = {}
        for tp, future in futures.items():
            try:
                found[tp.partition] = future.result().offset
            except KafkaException as exc:
                if not tolerant:
                    raise kafka_failure(exc, f"Could not list offsets of topic '{topic}'", topic) from None
        return found

    def _fill_sizes(self, views: list[TopicView]) -> None:
        """Partition sizes from DescribeLogDirs (the leader's replica); left unknown if that fails."""
        sizes = self.log_dir_sizes()
        for view in views:
            for p in view.partitions:
                by_broker = sizes.get((view.name, p.id))
                if by_broker:
                    p.size = by_broker.get(p.leader, max(by_broker.values()))

    def log_dir_sizes(self) -> dict[tuple[str, int], dict[int, int]]:
        """{(topic, partition): {broker id: bytes}}; empty when the broker cannot tell."""
        try:
            answers = self.describe_log_dirs()
        except ConsoleError:
            return {}  # sizes are optional decoration, never a reason to fail a page
        sizes: dict[tuple[str, int], dict[int, int]] = {}
        for broker in answers:
            for log_dir in broker.get("log_dirs", []):
                if log_dir.get("error_code"):
                    continue
                for topic in log_dir.get("topics", []):
                    for part in topic.get("partitions", []):
                        if part.get("is_future_key"):
                            continue
                        key = (topic["name"], part["partition_index"])
                        sizes.setdefault(key, {})[broker["broker"]] = part["partition_size"]
        return sizes

    def describe_log_dirs(self, brokers: list[int] | None = None) -> list[dict[str, Any]]:
        """DescribeLogDirs of every (or the named) broker, as kafka-python decodes it: confluent-kafka has no
        DescribeLogDirs, so this one request goes through kafka-python."""
        with self._legacy_lock:
            try:
                return self._legacy_client().describe_log_dirs(brokers=brokers)
            except Exception as exc:  # noqa: BLE001 - kafka-python raises many kinds; all become a sentence
                self._legacy = None
                raise _legacy_failure(exc, "DescribeLogDirs failed") from None

    def broker(self, broker_id: int) -> BrokerDetail:
        """One broker: its configs, log directories with sizes, and the replicas it holds (404 if unknown)."""
        cluster = self.cluster()
        found = next((b for b in cluster.brokers if b.id == broker_id), None)
        if found is None:
            known = ", ".join(str(b.id) for b in cluster.brokers)
            raise not_found(f"Broker {broker_id} is not in the cluster (brokers: {known}).")
        configs = self._configs(ConfigResource(ResourceType.BROKER, str(broker_id)), f"broker {broker_id}")
        try:
            metadata = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_failure(exc, "Could not list topics") from None
        dirs: list[LogDirView] = []
        sizes: dict[tuple[str, int], int] = {}
        dirs_error = None
        try:
            answers = self.describe_log_dirs([broker_id])
        except ConsoleError as exc:
            answers, dirs_error = [], exc.message
        for answer in answers:
            if answer.get("broker") != broker_id:
                continue
            for log_dir in answer.get("log_dirs", []):
                size = count = 0
                for topic in log_dir.get("topics", []):
                    for part in topic.get("partitions", []):
                        if not part.get("is_future_key"):
                            sizes[(topic["name"], part["partition_index"])] = part["partition_size"]
                            size += part["partition_size"]
                            count += 1
                code = log_dir.get("error_code") or 0
                total, usable = log_dir.get("total_bytes", -1), log_dir.get("usable_bytes", -1)
                dirs.append(LogDirView(log_dir.get("log_dir", ""), _error_code_name(code) if code else None, size,
                                       count, total if total is not None and total >= 0 else None,
                                       usable if usable is not None and usable >= 0 else None))
        replicas = []
        for name, info in sorted(metadata.topics.items()):
            for p in sorted(info.partitions.values(), key=lambda p: p.id):
                if broker_id in p.replicas:
                    replicas.append(ReplicaView(name, p.id, p.leader == broker_id, broker_id in p.isrs,
                                                p.leader < 0, sizes.get((name, p.id))))
        return BrokerDetail(found, configs, dirs, replicas, dirs_error)

    def _acls_disabled(self) -> bool:
        """Whether DescribeAcls answers SECURITY_DISABLED.

        librdkafka reports that answer as an empty list of ACLs, so an empty list is asked
        again through kafka-python, which surfaces the error code.
        """
        from kafka.admin import (
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePatternFilter,
        )
        from kafka.admin import ResourceType as LegacyResourceType
        from kafka.errors import SecurityDisabledError

        everything = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY,
                               resource_pattern=ResourcePatternFilter(LegacyResourceType.ANY, None,
                                                                      ACLResourcePatternType.ANY))
        with self._legacy_lock:
            try:
                self._legacy_client().describe_acls(everything)
            except SecurityDisabledError:
                return True
            except Exception:  # noqa: BLE001 - only a clear SECURITY_DISABLED changes what the page says
                return False
        return False

    def _legacy_client(self) -> Any:
        """kafka-python's admin client (call with _legacy_lock held)."""
        if self._legacy is None:
            from kafka.admin import KafkaAdminClient

            self._legacy = KafkaAdminClient(**legacy_client_config(self.config))
        return self._legacy

    def topic_configs(self, name: str) -> list[ConfigView]:
        return self._configs(ConfigResource(ResourceType.TOPIC, name), f"topic '{name}'", name)

    def _configs(self, resource: ConfigResource, what: str, topic: str | None = None) -> list[ConfigView]:
        try:
            entries = self.admin.describe_configs([resource], request_timeout=self.timeout)[resource].result()
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not describe the configs of {what}", topic) from None
        return [ConfigView(e.name, e.value, _config_source(e.source), bool(e.is_default),
                           bool(e.is_read_only), bool(e.is_sensitive))
                for e in sorted(entries.values(), key=lambda e: e.name)]

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=configs)
        try:
            self.admin.create_topics([topic], request_timeout=self.timeout,
                                     operation_timeout=self.timeout)[name].result()
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not create topic '{name}'", name) from None

    def delete_topic(self, name: str) -> None:
        try:
            self.admin.delete_topics([name], request_timeout=self.timeout,
                                     operation_timeout=self.timeout)[name].result()
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not delete topic '{name}'", name) from None

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        """IncrementalAlterConfigs: SET key=value, or DELETE the override (back to the default) when value is None."""
        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        entry = ConfigEntry(key, value if value is not None else "", incremental_operation=op)
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
        try:
            self.admin.incremental_alter_configs([resource], request_timeout=self.timeout)[resource].result()
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not change config '{key}' of topic '{name}'", name) from None

    # -- messages ---------------------------------------------------------------------------------
    def browse(self, topic: str, query: BrowseQuery) -> BrowseResult:
        chosen, notes = self._readable_partitions(topic, query.partition)
        low = self._offsets(topic, chosen, OffsetSpec.earliest())
        high = self._offsets(topic, chosen, OffsetSpec.latest())
        per_partition = query.scan if query.search else query.limit
        starts: dict[int, int] = {}
        if query.mode == "newest":
            starts = {p: max(low[p], high[p] - per_partition) for p in chosen}
        elif query.mode == "offset":
            assert query.offset is not None
            for p in chosen:
                start = query.offset
                if start < low[p]:
                    notes.append(f"Partition {p} starts at offset {low[p]} (older records were deleted); "
                                 f"reading from there.")
                    start = low[p]
                elif start > high[p]:
                    notes.append(f"Offset {query.offset} is past the end of partition {p} (log end offset "
                                 f"{high[p]}).")
                    start = high[p]
                starts[p] = start
        else:
            assert query.timestamp is not None
            found = self._offsets(topic, chosen, OffsetSpec.for_timestamp(query.timestamp))
            for p in chosen:
                offset = found.get(p, -1)
                starts[p] = offset if offset is not None and offset >= 0 else high[p]
        needle = query.search.lower()
        # Searching the newest records keeps each partition's last matches; otherwise the first ones found.
        newest_matches = bool(needle) and query.mode == "newest"
        records, scanned, partial = self._read(topic, starts, high, per_partition, needle,
                                               query.limit if needle else None, keep_last=newest_matches,
                                               query=query)
        if query.mode == "newest":
            records.sort(key=lambda r: (r.timestamp or 0, r.offset), reverse=True)
        else:
            records.sort(key=lambda r: (r.timestamp or 0, r.partition, r.offset))
        if len(records) > query.limit:
            records = records[:query.limit]
        if partial:
            notes.append(f"Stopped after {self.browse_timeout:g} s before reaching the end of the range.")
        return BrowseResult(records, scanned, partial, notes, dict(high))

    def _readable_partitions(self, topic: str, partition: int | None) -> tuple[list[int], list[str]]:
        """The partitions to read (the one asked for, or all) without the offline ones, which have no leader
        to read from, and a note naming those; 404 for a partition the topic does not have."""
        described = self._describe_partitions(topic)
        ids = [p.id for p in described]
        if partition is not None and partition not in ids:
            raise not_found(f"Topic '{topic}' has no partition {partition} (partitions: 0–{len(ids) - 1}).")
        offline = [p.id for p in described if (p.leader is None or p.leader.id < 0)
                   and (partition is None or p.id == partition)]
        chosen = [p for p in ([partition] if partition is not None else ids) if p not in offline]
        notes = [f"Partition(s) {', '.join(map(str, offline))} offline (no leader): not read."] if offline else []
        return chosen, notes

    def tail(self, topic: str, positions: dict[int, int], query: BrowseQuery) -> tuple[list[RecordView],
                                                                                    dict[int, int]]:
        """Records written since `positions` (partition -> next offset), oldest first, at most query.limit per
        partition; and the positions to ask from next time. Partitions not named start at their end."""
        chosen, _ = self._readable_partitions(topic, query.partition)
        high = self._offsets(topic, chosen, OffsetSpec.latest())
        starts = {p: min(max(positions.get(p, high[p]), 0), high[p]) for p in chosen}
        stops = {p: min(high[p], starts[p] + query.limit) for p in chosen}
        needle = query.search.lower()
        records, _, _ = self._read(topic, starts, stops, query.limit, needle, None, query=query)
        records.sort(key=lambda r: (r.timestamp or 0, r.partition, r.offset))
        return records, stops

    def _read(self, topic: str, starts: dict[int, int], stops: dict[int, int], per_partition: int,
              needle: str, limit: int | None, keep_last: bool = False, query: BrowseQuery | None = None
              ) -> tuple[list[RecordView], int, bool]:
        """Read [start, stop) of each partition with an assigned consumer that has no group at all.

        kafka-python's consumer, because confluent-kafka insists on a group.id and librdkafka then looks
        up that group's coordinator, which needs Describe on the group: a user with only Read on the
        topic could not browse it. Without a group nothing is joined, fetched from or committed.
        With `limit`, reading stops once that many records matched, unless `keep_last`: then the whole
        range is read and each partition keeps its last `limit` matches.
        """
        from kafka import KafkaConsumer
        from kafka import TopicPartition as LegacyTopicPartition
        from kafka.errors import KafkaError as LegacyKafkaError

        todo = {p for p, start in starts.items() if start < stops[p]}
        if not todo:
            return [], 0, False
        shown = query.render if query is not None else _record
        records: list[RecordView] = []
        last: dict[int, deque[RecordView]] = {p: deque(maxlen=limit) for p in todo}
        counts = dict.fromkeys(todo, 0)
        what = f"Could not read topic '{topic}'"
        try:
            consumer = KafkaConsumer(**{**legacy_client_config(self.config), "request_timeout_ms": 30000},
                                     group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
                                     fetch_max_wait_ms=100)
        except LegacyKafkaError as exc:
            raise _legacy_failure(exc, what) from None
        try:
            assigned = {p: LegacyTopicPartition(topic, p) for p in sorted(todo)}
            consumer.assign(list(assigned.values()))
            for p, tp in assigned.items():
                consumer.seek(tp, starts[p])
            deadline = time.monotonic() + self.browse_timeout
            while todo:
                left = deadline - time.monotonic()
                if left <= 0 or (limit is not None and not keep_last and len(records) >= limit):
                    break
                batches = consumer.poll(timeout_ms=int(min(0.5, left) * 1000), max_records=500)
                for tp, batch in batches.items():
                    partition = tp.partition
                    for message in batch:
                        if partition not in todo or message.offset >= stops[partition]:
                            todo.discard(partition)
                            break
                        counts[partition] += 1
                        if not needle or _matches(message, needle):
                            (last[partition] if keep_last else records).append(shown(message))
                        if counts[partition] >= per_partition or message.offset >= stops[partition] - 1:
                            todo.discard(partition)
                            break
                for p in list(todo):  # past the range without a record at its end (compacted, or a marker)
                    if consumer.position(assigned[p]) >= stops[p]:
                        todo.discard(p)
        except LegacyKafkaError as exc:
            raise _legacy_failure(exc, what) from None
        finally:
            consumer.close(autocommit=False)
        if keep_last:
            records = [record for kept in last.values() for record in kept]
            return records, sum(counts.values()), bool(todo)
        return records, sum(counts.values()), bool(todo) and (limit is None or len(records) < limit)

    def produce(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]]) -> tuple[int, int]:
        """Produce one record and wait for its acknowledgement; returns (partition, offset)."""
        ids = self.partition_ids(topic)  # refuses an unknown topic instead of auto-creating it
        if partition is not None and partition not in ids:
            raise bad_request(f"Topic '{topic}' has no partition {partition} (partitions: 0–{len(ids) - 1}).")
        outcome: dict[str, Any] = {}

        def delivered(err: KafkaError | None, message: Any) -> None:
            outcome["error"], outcome["message"] = err, message

        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        producer = self._producer_client()
        with self._produce_lock:
            try:
                producer.produce(topic, **kwargs)
            except KafkaException as exc:
                raise kafka_failure(exc, f"Could not produce to topic '{topic}'", topic) from None
            except BufferError:
                raise ConsoleError("The producer's queue is full; try again in a moment.", 503) from None
            producer.flush(self.timeout + 1)
        if "error" not in outcome:
            raise ConsoleError(f"Topic '{topic}': no acknowledgement within {self.timeout:g} s.", 504)
        if outcome["error"] is not None:
            raise kafka_failure(KafkaException(outcome["error"]), f"Could not produce to topic '{topic}'", topic)
        message = outcome["message"]
        return message.partition(), message.offset()

    # -- consumer groups --------------------------------------------------------------------------
    def groups(self) -> list[GroupView]:
        try:
            listing = self.admin.list_consumer_groups(request_timeout=self.timeout).result()
        except KafkaException as exc:
            raise kafka_failure(exc, "Could not list consumer groups") from None
        ids = sorted(g.group_id for g in listing.valid)
        if not ids:
            return []
        try:
            described = self.admin.describe_consumer_groups(ids, request_timeout=self.timeout)
            offset_futures = {g: self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=self.timeout)[g] for g in ids}
            descriptions = {g: described[g].result() for g in ids}
            results = {g: f.result() for g, f in offset_futures.items()}
        except KafkaException as exc:
            raise kafka_failure(exc, "Could not describe consumer groups") from None
        committed = {g: _committed(result) for g, result in results.items()}
        markers = {g: spark_marker_batch(result) for g, result in results.items()}
        ends = self._end_offsets({tp for g, offsets in committed.items() if markers[g] is None for tp in offsets})
        return [self._group_view(descriptions[g], committed[g], ends, markers[g]) for g in ids]

    def group(self, group_id: str) -> GroupView:
        try:
            description = self.admin.describe_consumer_groups([group_id], request_timeout=self.timeout)[
                group_id].result()
            offsets = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                             request_timeout=self.timeout)[group_id].result()
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not describe consumer group '{group_id}'") from None
        committed = _committed(offsets)
        marker = spark_marker_batch(offsets)
        state = state_name(description.state)
        if state == "Dead" and not committed and not description.members:
            raise not_found(f"Consumer group '{group_id}' does not exist.")
        assigned = {(tp.topic, tp.partition) for m in description.members
                    for tp in m.assignment.topic_partitions}
        ends = self._end_offsets(assigned if marker is not None else set(committed) | assigned)
        view = self._group_view(description, committed, ends, marker)
        if view.protocol == "consumer":
            self._add_epochs(view, description)
        return view

    def _add_epochs(self, view: GroupView, description: Any) -> None:
        """Group, target assignment and member epochs of a consumer-protocol group: the admin client
        does not expose them, so ask its coordinator with ConsumerGroupDescribe. A group that cannot
        be described (moved, gone) is still shown, without its epochs."""
        from strom.client.broker_client import request_once
        from strom.protocol.group_messages import ConsumerGroupDescribeRequest
        from strom.security.client_security import ClientSecurity

        coordinator = description.coordinator
        if coordinator is None:
            return
        security = ClientSecurity.from_client_properties(
            {k: str(v) for k, v in self.config.items() if k.startswith(("security.", "sasl.", "ssl."))})
        request = ConsumerGroupDescribeRequest(group_ids=[view.group_id], include_authorized_operations=False)
        try:
            described = request_once(coordinator.host, coordinator.port, request, 1, client_id="strom-console",
                                     security=security, connect_timeout_s=self.timeout,
                                     request_timeout_ms=int(self.timeout * 1000)).groups[0]
        except (OSError, ValueError, TimeoutError):  # ConnectionError is an OSError
            return
        if described.error_code:
            return
        view.group_epoch, view.assignment_epoch = described.group_epoch, described.assignment_epoch
        by_id = {m.member_id: m for m in described.members}
        for m in view.members:
            found = by_id.get(m.member_id)
            if found is not None:
                m.epoch = found.member_epoch
                m.member_type = "classic" if found.member_type == 0 else "consumer"

    def _group_view(self, description: Any, committed: dict[tuple[str, int], int],
                    ends: dict[tuple[str, int], int], marker: int | None = None) -> GroupView:
        members = []
        owner: dict[tuple[str, int], Any] = {}
        for m in description.members:
            assignment = sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
            members.append(MemberView(m.member_id, m.client_id, m.host, m.group_instance_id, assignment))
            for tp in assignment:
                owner[tp] = m
        rows = []
        for tp in sorted(set(committed) | set(owner)):
            member = owner.get(tp)
            lag = None if marker is not None else partition_lag(committed.get(tp), ends.get(tp))
            rows.append(LagRow(tp[0], tp[1], committed.get(tp), ends.get(tp), lag,
                               member.member_id if member else None, member.client_id if member else None,
                               member.host if member else None))
        coordinator = description.coordinator.id if description.coordinator is not None else None
        return GroupView(description.group_id, state_name(description.state),
                         bool(description.is_simple_consumer_group), members, coordinator,
                         description.partition_assignor or "", rows, marker,
                         "consumer" if getattr(getattr(description, "type", None), "name", "") == "CONSUMER"
                         else "classic")

    def _end_offsets(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions},
                                          request_timeout=self.timeout)
        ends = {}
        for tp, future in futures.items():
            try:
                ends[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException:
                continue  # a deleted topic: lag unknown for that partition
        return ends

    def reset_group_offsets(self, group_id: str, topic: str | None, target: str, value: int | None
                            ) -> dict[tuple[str, int], int]:
        """Move an inactive group's committed offsets, as kafka-consumer-groups.sh --reset-offsets --execute."""
        from strom.cli.consumer_groups import GroupTool

        group = self.group(group_id)
        if group.spark_marker:
            raise ConsoleError(f"Group '{group_id}' holds the exactly-once Spark sink's batch markers, not consumer "
                               "offsets; moving them would make the sink skip or repeat batches.", 409)
        if not group.resettable:
            raise ConsoleError(f"Offsets of group '{group_id}' can only be reset while it has no active members "
                               f"(state Empty); its state is {group.state}. Stop its consumers first.", 409)
        kind = {"timestamp": "datetime"}.get(target, target)
        tool = GroupTool(self.admin, self.timeout)
        try:
            topics = [(topic, None)] if topic else []
            if topic:
                self.partition_ids(topic)  # 404 for an unknown topic
            plan = tool.plan_reset(group_id, topics, not topic, (kind, value))
            tool.apply_reset(group_id, plan)
        except CliError as exc:
            raise ConsoleError(exc.message, 400) from None
        except KafkaException as exc:
            raise kafka_failure(exc, f"Could not reset the offsets of group '{group_id}'") from None
        return plan

    # -- security ---------------------------------------------------------------------------------
    def acls(self) -> list[AclView]:
        self.require_cluster_describe("ACLs")  # librdkafka reports a refused DescribeAcls as "no ACLs"
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        try:
            bindings = self.admin.describe_acls(everything, request_timeout=self.timeout).result()
        except KafkaException as exc:
            raise _security_failure(exc, "ACLs", "DescribeAcls") from None
        if not bindings and self._acls_disabled():
            raise FeatureUnavailable("ACLs: security is disabled on this broker (no authorizer is configured: "
                                     "authorizer.class.name), so there are no ACLs to show or change.")
        return sorted((AclView(b.principal, b.host, b.operation.name, b.permission_type.name,
                               b.restype.name, b.name, b.resource_pattern_type.name) for b in bindings),
                      key=lambda a: (a.resource_type, a.resource_name, a.principal, a.operation))

    def create_acl(self, acl: AclView) -> None:
        binding = AclBinding(ResourceType[acl.resource_type], acl.resource_name,
                             ResourcePatternType[acl.pattern_type], acl.principal, acl.host,
                             AclOperation[acl.operation], AclPermissionType[acl.permission])
        try:
            self.admin.create_acls([binding], request_timeout=self.timeout)[binding].result()
        except KafkaException as exc:
            raise _security_failure(exc, "ACLs", "CreateAcls") from None

    def delete_acl(self, acl: AclView) -> int:
        binding = AclBindingFilter(ResourceType[acl.resource_type], acl.resource_name,
                                   ResourcePatternType[acl.pattern_type], acl.principal, acl.host,
                                   AclOperation[acl.operation], AclPermissionType[acl.permission])
        try:
            return len(self.admin.delete_acls([binding], request_timeout=self.timeout)[binding].result())
        except KafkaException as exc:
            raise _security_failure(exc, "ACLs", "DeleteAcls") from None

    def scram_users(self) -> list[ScramUserView]:
        """Every SCRAM user, through kafka-python: librdkafka aborts the whole process when a broker answers
        DescribeUserScramCredentials with a top-level error (as Kafka does for a refusal); Python cannot."""
        from kafka.errors import IncompatibleBrokerVersion
        from kafka.errors import KafkaError as LegacyKafkaError

        self.require_cluster_describe("SCRAM users")
        with self._legacy_lock:
            try:
                described = self._legacy_client().describe_user_scram_credentials()
            except IncompatibleBrokerVersion:
                raise FeatureUnavailable("SCRAM users: this broker does not support the DescribeUserScramCredentials "
                                         "API.") from None
            except LegacyKafkaError as exc:
                self._legacy = None
                raise _legacy_failure(exc, "SCRAM users: DescribeUserScramCredentials failed") from None
        failed = [d["error"] for d in described.values() if d["error"]]
        if failed:  # a refusal of "every user" comes back as one failed entry (kafka-python keeps only its message)
            refused = failed[0].startswith("Not authorized")
            raise ConsoleError(f"SCRAM users: DescribeUserScramCredentials failed: {failed[0]}"
                               + (" (not allowed for this user)" if refused else ""), 403 if refused else 502,
                               "Not authorized" if refused else "Error")
        return [ScramUserView(user, sorted((ScramMechanism(int(info["mechanism"])).name.replace("_", "-"),
                                            info["iterations"]) for info in d["credential_infos"]))
                for user, d in sorted(described.items())]

    def upsert_scram_user(self, user: str, mechanism: str, password: str, iterations: int) -> None:
        info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], iterations)
        self._alter_scram(user, UserScramCredentialUpsertion(user, info, password.encode("utf-8")))

    def delete_scram_user(self, user: str, mechanism: str) -> None:
        self._alter_scram(user, UserScramCredentialDeletion(user, ScramMechanism[mechanism.replace("-", "_")]))

    def _alter_scram(self, user: str, alteration: Any) -> None:
        try:
            self.admin.alter_user_scram_credentials([alteration], request_timeout=self.timeout)[user].result()
        except KafkaException as exc:
            raise _security_failure(exc, "SCRAM users", "AlterUserScramCredentials") from None


def _security_failure(exc: KafkaException, what: str, api: str) -> ConsoleError:
    name = error_name(exc)
    if name == "SECURITY_DISABLED":
        return FeatureUnavailable(f"{what}: security is disabled on this broker (no authorizer or SASL/SCRAM "
                                  "configured), so there is nothing to show or change.")
    if name in _UNAVAILABLE:
        return FeatureUnavailable(f"{what}: this broker does not support the {api} API.")
    return kafka_failure(exc, f"{what}: {api} failed")


_LEGACY_STATUS = {"UNKNOWN_TOPIC_OR_PARTITION": 404, "NoBrokersAvailableError": 502, "KafkaConnectionError": 502,
                  "NodeNotReadyError": 502, "KafkaTimeoutError": 504}


def _legacy_failure(exc: Exception, what: str) -> ConsoleError:
    """A kafka-python error as the page shows it: broker errors carry Kafka's error name, client ones their class."""
    name = str(getattr(exc, "message", None) or type(exc).__name__)
    if name == "SECURITY_DISABLED":
        return FeatureUnavailable(f"{what}: security is disabled on this broker, so there is nothing to show.")
    if name == "UNSUPPORTED_VERSION":
        return FeatureUnavailable(f"{what}: this broker does not support the API.")
    reason = exc.args[0] if exc.args and isinstance(exc.args[0], str) else getattr(exc, "description", None) or name
    if name.endswith("_AUTHORIZATION_FAILED"):
        return ConsoleError(f"{what}: {reason} (not allowed for this user)", 403, "Not authorized")
    if name in ("NoBrokersAvailableError", "KafkaConnectionError", "KafkaTimeoutError"):
        reason += " If the broker requires SASL, log in (or give --command-config)."
    return ConsoleError(f"{what}: {reason}", _STATUS_BY_ERROR.get(name) or _LEGACY_STATUS.get(name, 502))


def _config_source(source: Any) -> str:
    """confluent-kafka reports a config's source as an int; pages show Kafka's name (DYNAMIC_TOPIC_CONFIG...)."""
    try:
        return ConfigSource(getattr(source, "value", source)).name
    except ValueError:
        return str(source)


# The metadata the exactly-once Spark sink commits with its markers (strom.spark.sink.MARKER; not imported
# from there because that module needs pyspark, which the console does not).
SPARK_SINK_MARKER = "strom-spark-sink"


def spark_marker_batch(result: Any) -> int | None:
    """The last batch id a Spark sink marker group recorded, or None if this is an ordinary group.

    The sink commits "offsets" whose value is a batch id and whose metadata starts with its marker,
    under a group named after the task's transactional.id; every commit of the group carries it.
    """
    commits = [tp for tp in result.topic_partitions or [] if tp.offset >= 0]
    if not commits or not all((tp.metadata or "").startswith(SPARK_SINK_MARKER) for tp in commits):
        return None
    return max(tp.offset for tp in commits)


def _error_code_name(code: int) -> str:
    """A Kafka error code as its name (KAFKA_STORAGE_ERROR), as kafka-python knows it."""
    from kafka.errors import for_code

    error = for_code(code)
    return str(getattr(error, "message", None) or code)


def _committed(result: Any) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def _matches(message: Any, needle: str) -> bool:
    """Whether a kafka-python ConsumerRecord's key, value or a header contains the (lower-case) needle."""
    if needle in searchable_text(message.value) or needle in searchable_text(message.key):
        return True
    return any(needle in name.lower() or needle in searchable_text(value) for name, value in message.headers or [])


def _record(message: Any, key_format: str = "auto", value_format: str = "auto",
            header_format: str = "auto") -> RecordView:
    """A kafka-python ConsumerRecord as shown; its timestamp_type is Kafka's (0 CreateTime, 1 LogAppendTime)."""
    known = message.timestamp is not None and message.timestamp >= 0
    kind = message.timestamp_type + 1 if known else 0
    return RecordView(message.partition, message.offset, message.timestamp if known else None,
                      timestamp_type_name(kind), render_bytes(message.key, fmt=key_format),
                      render_bytes(message.value, fmt=value_format),
                      [(name, render_bytes(value, fmt=header_format)) for name, value in message.headers or []])
