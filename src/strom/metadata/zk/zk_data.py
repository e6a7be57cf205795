"""Znode paths and JSON payloads exactly as Kafka 3.x writes them in ZooKeeper mode.

This is Strom's counterpart of Kafka's `ZkData`: one place that knows the tree layout
and every payload, so `zkCli.sh` (or `strom zookeeper-shell`) shows a Kafka operator
what they expect, and a reader can check each shape against Kafka's documentation.
Encoders return bytes; decoders accept what Kafka itself would accept (older versions,
optional keys) so a tree written by a real Kafka cluster can be read too.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from strom.security.acl import PatternType, ResourcePattern, ResourceType

# -- paths -----------------------------------------------------------------
CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_SEQID_PATH = "/brokers/seqid"
TOPICS_PATH = "/brokers/topics"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"  # the pre-KIP-455 tools' way to ask for a reassignment
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1  # Kafka's LogDirEventNotificationHandler.LogDirFailureEvent
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CONSUMERS_PATH = "/consumers"
# Not Kafka's: the replication throttles the controller balancer set, so a later controller can remove them.
BALANCER_THROTTLES_PATH = "/strom/balancer_throttles"

# Kafka's ConfigType names: the folders under /config.
CONFIG_TYPE_TOPIC = "topics"
CONFIG_TYPE_CLIENT = "clients"
CONFIG_TYPE_USER = "users"
CONFIG_TYPE_BROKER = "brokers"
CONFIG_TYPE_IP = "ips"
CONFIG_TYPE_GROUP = "groups"  # consumer group configs (KIP-848's GROUP resource)
CONFIG_TYPES = (CONFIG_TYPE_TOPIC, CONFIG_TYPE_CLIENT, CONFIG_TYPE_USER, CONFIG_TYPE_BROKER, CONFIG_TYPE_IP,
                CONFIG_TYPE_GROUP)
DEFAULT_BROKER_ENTITY = "<default>"  # /config/brokers/<default>: cluster-wide dynamic broker configs

# Persistent paths a Kafka broker makes sure exist when it starts.
PERSISTENT_PATHS = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{t}" for t in CONFIG_TYPES),
)

NO_LEADER = -1
# LeaderRecoveryState (KIP-704): 0 RECOVERED, 1 RECOVERING (after an unclean election).
LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def config_entity_path(entity_type: str, entity_name: str) -> str:
    return f"{CONFIG_PATH}/{entity_type}/{entity_name}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


# -- JSON helpers ----------------------------------------------------------
def to_json_bytes(value: Any) -> bytes:
    """Compact JSON like Kafka's Jackson encoder (no spaces)."""
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def parse_json(data: bytes | None) -> Any:
    """Parse a znode payload; empty or absent data (a bare persistent path) is None."""
    if not data:
        return None
    return json.loads(data.decode("utf-8"))


def now_ms() -> int:
    return int(time.time() * 1000)


def encode_uuid(value: uuid.UUID) -> str:
    """Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes, without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def decode_uuid(text: str) -> uuid.UUID:
    """Inverse of `encode_uuid`; also accepts the canonical hex form for robustness."""
    if len(text) == 22:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return uuid.UUID(text)


# -- /cluster/id -----------------------------------------------------------
def encode_cluster_id(cluster_id: str) -> bytes:
    # Kafka writes the version as a string here, unlike every other znode.
    return to_json_bytes({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(parse_json(data)["id"])


# -- /brokers/ids/<id> -----------------------------------------------------
@dataclass(frozen=True)
class BrokerRegistration:
    """A live broker as its ephemeral `/brokers/ids/<id>` znode describes it.

    `epoch` is the znode's czxid (Kafka's broker epoch): it changes with every registration,
    so a controller can tell a restarted broker from one that merely kept its session.
    `host`/`port` are the first PLAINTEXT endpoint (Kafka keeps them for old clients).
    """

    id: int
    host: str | None
    port: int
    endpoints: list[str]
    listener_security_protocol_map: dict[str, str] = field(default_factory=dict)
    rack: str | None = None
    epoch: int = -1
    jmx_port: int = -1
    timestamp: int = 0
    features: dict[str, dict[str, int]] = field(default_factory=dict)

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """(host, port) of the named listener, e.g. `endpoint("PLAINTEXT")`."""
        for ep in self.endpoints:
            name, _, address = ep.partition("://")
            if name == listener:
                host, _, port = address.rpartition(":")
                return host.strip("[]"), int(port)
        return None


def encode_broker_registration(
    endpoints: list[str],
    listener_security_protocol_map: dict[str, str] | None = None,
    rack: str | None = None,
    jmx_port: int = -1,
    features: dict[str, dict[str, int]] | None = None,
) -> bytes:
    """Version 5 broker JSON. `endpoints` are Kafka connection strings `LISTENER://host:port`."""
    protocol_map = dict(listener_security_protocol_map or {})
    for ep in endpoints:
        listener = ep.partition("://")[0]
        protocol_map.setdefault(listener, listener)  # a listener named after its protocol
    host: str | None = None
    port = -1
    for ep in endpoints:
        listener, _, address = ep.partition("://")
        if protocol_map.get(listener) == "PLAINTEXT":
            h, _, p = address.rpartition(":")
            host, port = h.strip("[]"), int(p)
            break
    body: dict[str, Any] = {
        "version": 5,
        "host": host,
        "port": port,
        "endpoints": list(endpoints),
        "listener_security_protocol_map": protocol_map,
        "jmx_port": jmx_port,
        "timestamp": str(now_ms()),
        "features": dict(features or {}),
    }
    if rack is not None:
        body["rack"] = rack
    return to_json_bytes(body)


def decode_broker_registration(broker_id: int, data: bytes, czxid: int = -1) -> BrokerRegistration:
    js = parse_json(data)
    version = int(js["version"])
    if version == 1:
        endpoints = [f"PLAINTEXT://{js['host']}:{js['port']}"]
    else:
        endpoints = list(js.get("endpoints", []))
    return BrokerRegistration(
        id=broker_id,
        host=js.get("host"),
        port=int(js.get("port", -1)),
        endpoints=endpoints,
        listener_security_protocol_map=dict(js.get("listener_security_protocol_map") or {}),
        rack=js.get("rack"),
        epoch=czxid,
        jmx_port=int(js.get("jmx_port", -1)),
        timestamp=int(js.get("timestamp", 0)),
        features=dict(js.get("features") or {}),
    )


# -- /controller and /controller_epoch -------------------------------------
def encode_controller(broker_id: int) -> bytes:
    """Kafka 3.4+ writes version 2 with `kraftControllerEpoch` -1 (ZooKeeper-mode controller)."""
    return to_json_bytes(
        {"version": 2, "brokerid": broker_id, "timestamp": str(now_ms()), "kraftControllerEpoch": -1}
    )


def decode_controller(data: bytes) -> int:
    return int(parse_json(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    """A bare decimal number, not JSON."""
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode("ascii"))


# -- /brokers/topics/<t> ---------------------------------------------------
@dataclass(frozen=True)
class TopicAssignment:
    """A topic's id and replica assignment (partition -> replica broker ids, preferred leader first).

    `zk_version` is the znode's version when read: pass it to `set_topic_assignment`.
    """

    topic_id: uuid.UUID | None
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)
    zk_version: int = -1


def encode_topic_assignment(
    topic_id: uuid.UUID | None,
    assignment: dict[int, list[int]],
    adding_replicas: dict[int, list[int]] | None = None,
    removing_replicas: dict[int, list[int]] | None = None,
) -> bytes:
    """Version 3 (Kafka 3.x): partitions keyed by decimal strings, topic_id as Kafka's base64 Uuid."""
    body: dict[str, Any] = {"version": 3}
    if topic_id is not None:
        body["topic_id"] = encode_uuid(topic_id)
    body["partitions"] = {str(p): list(r) for p, r in sorted(assignment.items())}
    body["adding_replicas"] = {str(p): list(r) for p, r in sorted((adding_replicas or {}).items()) if r}
    body["removing_replicas"] = {str(p): list(r) for p, r in sorted((removing_replicas or {}).items()) if r}
    return to_json_bytes(body)


def decode_topic_assignment(data: bytes, zk_version: int = -1) -> TopicAssignment:
    js = parse_json(data) or {}

    def ints(section: Any) -> dict[int, list[int]]:
        return {int(p): [int(r) for r in replicas] for p, replicas in (section or {}).items()}

    raw_id = js.get("topic_id")
    return TopicAssignment(
        topic_id=decode_uuid(raw_id) if raw_id else None,
        partitions=ints(js.get("partitions")),
        adding_replicas=ints(js.get("adding_replicas")),
        removing_replicas=ints(js.get("removing_replicas")),
        zk_version=zk_version,
    )


# -- /admin/reassign_partitions ---------------------------------------------
def encode_partition_reassignment(reassignment: dict[tuple[str, int], list[int]]) -> bytes:
    """Version 1, as kafka-reassign-partitions.sh (before KIP-455) and Kafka's controller write it."""
    return to_json_bytes({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(reassignment.items())]})


def decode_partition_reassignment(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    """(topic, partition) -> target replicas; entries that are not well formed are left out (Kafka skips
    them too), and garbage reads as nothing asked."""
    try:
        js = parse_json(data)
    except ValueError:
        return {}
    entries = js.get("partitions") if isinstance(js, dict) else None
    out: dict[tuple[str, int], list[int]] = {}
    for entry in entries if isinstance(entries, list) else []:
        try:
            topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
        except (KeyError, TypeError):
            continue
        if (isinstance(topic, str) and isinstance(partition, int) and isinstance(replicas, list)
                and all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)):
            out[(topic, partition)] = list(replicas)
    return out


# -- /brokers/topics/<t>/partitions/<p>/state -------------------------------
@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    """A partition's leader, leader epoch and ISR, plus the controller epoch that wrote them."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED


def encode_partition_state(state: LeaderIsrAndControllerEpoch) -> bytes:
    """Version 1; `leader_recovery_state` only when not RECOVERED, as Kafka 3.2+ does."""
    body: dict[str, Any] = {
        "version": 1,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "controller_epoch": state.controller_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state != LEADER_RECOVERY_RECOVERED:
        body["leader_recovery_state"] = state.leader_recovery_state
    return to_json_bytes(body)


def decode_partition_state(data: bytes) -> LeaderIsrAndControllerEpoch:
    js = parse_json(data)
    return LeaderIsrAndControllerEpoch(
        leader=int(js["leader"]),
        leader_epoch=int(js["leader_epoch"]),
        isr=[int(r) for r in js["isr"]],
        controller_epoch=int(js["controller_epoch"]),
        leader_recovery_state=int(js.get("leader_recovery_state", LEADER_RECOVERY_RECOVERED)),
    )


# -- /config/<type>/<name> and /config/changes ------------------------------
def encode_entity_config(configs: dict[str, str]) -> bytes:
    return to_json_bytes({"version": 1, "config": {k: str(v) for k, v in configs.items()}})


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    js = parse_json(data)
    if not isinstance(js, dict):
        return {}
    return {k: str(v) for k, v in (js.get("config") or {}).items()}


def encode_config_change(entity_type: str, entity_name: str) -> bytes:
    """Version 2 change notification naming the entity as `<type>/<name>` (e.g. `topics/orders`)."""
    return to_json_bytes({"version": 2, "entity_path": f"{entity_type}/{entity_name}"})


def encode_log_dir_event(broker_id: int) -> bytes:
    """`/log_dir_event_notification/log_dir_event_<seq>`: a log dir of `broker_id` failed (KIP-112)."""
    return to_json_bytes({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes) -> int | None:
    """The broker a log dir failure notification names; None for anything else (another event, garbage)."""
    try:
        body = json.loads(data)
        broker, event = body["broker"], body.get("event", LOG_DIR_FAILURE_EVENT)
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
    if isinstance(broker, bool) or not isinstance(broker, int) or event != LOG_DIR_FAILURE_EVENT:
        return None
    return broker


def decode_config_change(data: bytes) -> tuple[str, str] | None:
    """(entity type, entity name) of a change notification; None for one this version cannot read."""
    try:
        path = json.loads(data).get("entity_path", "")
    except (ValueError, AttributeError):
        return None
    entity_type, sep, name = str(path).partition("/")
    return (entity_type, name) if sep and name else None


# -- ACLs: /kafka-acl, /kafka-acl-extended and their change notifications (Kafka's ZkAclStore) ---------------
ACL_PATH = "/kafka-acl"  # LITERAL patterns: /kafka-acl/<ResourceType>/<name>
EXTENDED_ACL_PATH = "/kafka-acl-extended"  # others: /kafka-acl-extended/<pattern type, lower case>/<ResourceType>/<name>
ACL_CHANGES_PATH = "/kafka-acl-changes"  # notifications of LITERAL changes: "<RESOURCE_TYPE>:<name>"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"  # of the others: JSON
ACL_CHANGE_PREFIX = "acl_changes_"
ACL_PATHS = (ACL_PATH, ACL_CHANGES_PATH, f"{EXTENDED_ACL_PATH}/prefixed", EXTENDED_ACL_CHANGES_PATH)


def acl_path(pattern: ResourcePattern) -> str:
    """`/kafka-acl/Topic/orders` or `/kafka-acl-extended/prefixed/Topic/orders-`."""
    root = ACL_PATH if pattern.pattern_type == PatternType.LITERAL else \
        f"{EXTENDED_ACL_PATH}/{pattern.pattern_type.name.lower()}"
    return f"{root}/{pattern.resource_type.camel}/{pattern.name}"


def acl_change_path(pattern: ResourcePattern) -> str:
    """Where a change of this pattern is announced (a sequential node is created under it)."""
    return ACL_CHANGES_PATH if pattern.pattern_type == PatternType.LITERAL else EXTENDED_ACL_CHANGES_PATH


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """LITERAL: the legacy `TOPIC:orders`; other patterns: Kafka's ExtendedAclChangeEvent JSON."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return to_json_bytes({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                          "patternType": pattern.pattern_type.name})


def decode_acl_change(changes_path: str, data: bytes) -> ResourcePattern | None:
    """The pattern a notification names; None for one this version cannot read."""
    try:
        if changes_path == ACL_CHANGES_PATH:
            resource_type, sep, name = data.decode().partition(":")
            if not sep:
                return None
            return ResourcePattern(ResourceType.parse(resource_type), name, PatternType.LITERAL)
        js = json.loads(data)
        return ResourcePattern(ResourceType.parse(js["resourceType"]), js["name"], PatternType.parse(js["patternType"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


# -- /latest_producer_id_block ---------------------------------------------
@dataclass(frozen=True)
class ProducerIdsBlock:
    """A range of producer ids handed to one broker: [first_producer_id, last_producer_id]."""

    broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


def encode_producer_id_block(block: ProducerIdsBlock) -> bytes:
    """Kafka writes the bounds as strings (they are longs)."""
    return to_json_bytes(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.first_producer_id),
            "block_end": str(block.last_producer_id),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdsBlock:
    js = parse_json(data)
    start, end = int(js["block_start"]), int(js["block_end"])
    return ProducerIdsBlock(int(js["broker"]), start, end - start + 1)


def encode_balancer_throttles(brokers: set[int], topics: set[str]) -> bytes:
    return json.dumps({"version": 1, "brokers": sorted(brokers), "topics": sorted(topics)}).encode()


def decode_balancer_throttles(data: bytes | None) -> tuple[set[int], set[str]]:
    """(brokers, topics) whose throttles the balancer set; nothing for an empty or unreadable znode."""
    try:
        js = parse_json(data) if data else {}
        return {int(b) for b in js.get("brokers", [])}, {str(t) for t in js.get("topics", [])}
    except (ValueError, TypeError, AttributeError):
        return set(), set()
