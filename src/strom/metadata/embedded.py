"""Single-node metadata store kept in a JSON file inside the first log dir.

Used when `zookeeper.connect` is empty. Every change is written atomically
(temp file, fsync, rename) before it is acknowledged, so a crash never leaves
a topic half-created.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from strom.metadata.store import (
    AclListener,
    AclUpdate,
    BrokerInfo,
    ChangeKind,
    MetadataStore,
    PartitionState,
    TopicMetadata,
)
from strom.metadata.zk.zk_data import DEFAULT_BROKER_ENTITY
from strom.security.acl import (
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
)
from strom.storage.checkpoints import write_atomically
from strom.storage.log_dirs import LogDirError, MetaProperties, check_identities, write_meta_properties
from strom.storage.log_manager import partition_dirs

log = logging.getLogger(__name__)

METADATA_FILE = "__cluster_metadata.json"


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class EmbeddedMetadataStore(MetadataStore):
    def __init__(self, data_dir: str | os.PathLike[str], broker_id: int, cluster_id: str | None = None) -> None:
        super().__init__()
        self._path = Path(data_dir) / METADATA_FILE
        self._broker_id = broker_id
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicMetadata] = {}
        self._next_producer_id = 0
        # Dynamic broker configs by entity: "<default>" or a broker id, as in ZooKeeper's /config/brokers.
        self._broker_configs: dict[str, dict[str, str]] = {}
        # Client entities by type ("users", "clients") then name, as ZooKeeper's /config/users, /config/clients.
        self._entity_configs: dict[str, dict[str, dict[str, str]]] = {}
        # ACLs by resource pattern, as ZooKeeper's /kafka-acl and /kafka-acl-extended hold them.
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._acl_listener: AclListener | None = None
        self._save_pending = False
        self._retry_warned = False
        # Each topic's encoded part of the file, by name, with the object it was encoded from; a change
        # to a topic drops its entry (or replaces the object), so the next save encodes it again.
        self._encoded: dict[str, tuple[TopicMetadata, str]] = {}
        self.cluster_id = cluster_id or _random_cluster_id()
        if self._path.exists():
            self._load()
        else:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._save()

    # -- persistence ---------------------------------------------------------
    def _load(self) -> None:
        data = json.loads(self._path.read_text())
        self.cluster_id = data["cluster_id"]
        self._next_producer_id = data.get("next_producer_id", 0)
        self._broker_configs = {str(k): dict(v) for k, v in data.get("broker_configs", {}).items()}
        self._entity_configs = {str(t): {str(n): dict(c) for n, c in names.items()}
                                for t, names in data.get("entity_configs", {}).items()}
        self._acls = {ResourcePattern(ResourceType.parse(a["resource_type"]), a["name"],
                                      PatternType.parse(a["pattern_type"])): decode_acls(json.dumps(a).encode())
                      for a in data.get("acls", [])}
        for t in data.get("topics", []):
            parts = {
                int(p["partition"]): PartitionState(
                    int(p["partition"]), p["leader"], p["leader_epoch"], list(p["replicas"]), list(p["isr"])
                )
                for p in t["partitions"]
            }
            self._topics[t["name"]] = TopicMetadata(t["name"], uuid.UUID(t["topic_id"]), parts, dict(t["configs"]))

    def _save(self) -> None:
        """Write the whole file (temp file, fsync, rename), as before; only changed topics are re-encoded.

        The file keeps its layout (``json.dumps(..., indent=1)`` of one document). Each topic's
        part is encoded once and kept until that topic changes, so a change costs the encoding of
        the topics it touched plus one write of the file, not an encoding of every topic.
        """
        head = json.dumps({
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "broker_configs": self._broker_configs,
            "entity_configs": self._entity_configs,
            "acls": [{"resource_type": p.resource_type.camel, "name": p.name, "pattern_type": p.pattern_type.name,
                      "acls": json.loads(encode_acls(entries))["acls"]}
                     for p, entries in sorted(self._acls.items(), key=lambda item: (item[0].resource_type,
                                                                                   item[0].name,
                                                                                   item[0].pattern_type))],
            "topics": [],
        }, indent=1)
        if self._topics:  # the document ends in '"topics": []\n}': put the topics' parts in the list
            topics = ",\n  ".join(self._encoded_topic(t) for t in self._topics.values())
            head = head[:-len("[]\n}")] + "[\n  " + topics + "\n ]\n}"
        write_atomically(str(self._path), head.encode())
        self._save_pending = False

    def _encoded_topic(self, topic: TopicMetadata) -> str:
        """One topic as it sits in the file's ``topics`` list (two levels deep), cached until it changes."""
        cached = self._encoded.get(topic.name)
        if cached is not None and cached[0] is topic:
            return cached[1]
        text = json.dumps({
            "name": topic.name,
            "topic_id": str(topic.topic_id),
            "configs": topic.configs,
            "partitions": [
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": p.replicas,
                    "isr": p.isr,
                }
                for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
            ],
        }, indent=1).replace("\n", "\n  ")  # JSON strings hold no raw newline: only the layout's are indented
        self._encoded[topic.name] = (topic, text)
        return text

    def _save_or_restore(self, topics: dict[str, TopicMetadata]) -> None:
        """Save; if the write fails, put the topics back as they were so memory matches the file."""
        try:
            self._save()
        except OSError:
            self._topics = topics
            raise

    def _save_topic_or_undo(self, name: str, undo: Callable[[], None]) -> None:
        """Save after changing topic ``name`` in place (its cached encoding goes); if the write fails,
        undo the change so memory matches the file, and drop the encoding made of the changed topic."""
        self._encoded.pop(name, None)
        try:
            self._save()
        except OSError:
            undo()
            self._encoded.pop(name, None)
            raise

    @property
    def save_pending(self) -> bool:
        return self._save_pending

    def retry_pending_save(self) -> bool:
        with self._lock:
            if not self._save_pending:
                return True
            try:
                self._save()
            except OSError as exc:
                if not self._retry_warned:  # retried every few seconds: say it once, not each time
                    log.warning("metadata write still failing: %s; retrying until it succeeds", exc)
                    self._retry_warned = True
                return False
            self._retry_warned = False
            log.info("pending metadata change written")
            return True

    # -- MetadataStore -------------------------------------------------------
    def register_broker(self, broker: BrokerInfo) -> None:
        self._brokers[broker.broker_id] = broker

    def live_brokers(self) -> list[BrokerInfo]:
        return list(self._brokers.values())

    def controller_id(self) -> int:
        return self._broker_id

    def topics(self) -> Mapping[str, TopicMetadata]:
        return MappingProxyType(self._topics)

    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicMetadata:
        with self._lock:
            if name in self._topics:
                raise KeyError(name)
            parts = {p: PartitionState(p, reps[0], 0, list(reps), list(reps)) for p, reps in assignment.items()}
            topic = TopicMetadata(name, uuid.uuid4(), parts, dict(configs))
            before = dict(self._topics)
            self._topics[name] = topic
            self._save_or_restore(before)
        self._notify(ChangeKind.CREATED, topic)
        return topic

    def delete_topic(self, name: str, recorded_elsewhere: bool = False) -> None:
        with self._lock:
            before = dict(self._topics)
            topic = self._topics.pop(name)
            self._encoded.pop(name, None)
            try:
                self._save()
            except OSError as exc:
                if not recorded_elsewhere:
                    self._topics = before
                    raise
                # The tombstoned partition dirs make the deletion durable; write the file later.
                log.error("could not write metadata after deleting topic %s (%s); will retry", name, exc)
                self._save_pending = True
        self._notify(ChangeKind.DELETED, topic)

    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        with self._lock:
            topic = self._topics[name]
            before = dict(topic.partitions)
            for p, reps in assignment.items():
                topic.partitions[p] = PartitionState(p, reps[0], 0, list(reps), list(reps))
            self._save_topic_or_undo(name, lambda: setattr(topic, "partitions", before))
        self._notify(ChangeKind.PARTITIONS, topic)
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        with self._lock:
            topic = self._topics[name]
            before = topic.configs
            topic.configs = dict(configs)
            self._save_topic_or_undo(name, lambda: setattr(topic, "configs", before))
        self._notify(ChangeKind.CONFIGS, topic)
        return topic

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return dict(self._broker_configs.get(_broker_entity(broker_id), {}))

    def set_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        with self._lock:
            entity = _broker_entity(broker_id)
            before = dict(self._broker_configs)
            if configs:
                self._broker_configs[entity] = dict(configs)
            else:
                self._broker_configs.pop(entity, None)
            try:
                self._save()
            except OSError:
                self._broker_configs = before
                raise

    def all_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        return {name: dict(c) for name, c in self._entity_configs.get(entity_type, {}).items()}

    async def set_entity_configs_async(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        with self._lock:
            before = {t: dict(names) for t, names in self._entity_configs.items()}
            names = self._entity_configs.setdefault(entity_type, {})
            if configs:
                names[name] = dict(configs)
            else:
                names.pop(name, None)
            try:
                self._save()
            except OSError:
                self._entity_configs = before
                raise
        self._entity_changed(entity_type, name)

    def load_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        return dict(self._acls)

    async def update_acls_async(self, pattern: ResourcePattern, update: AclUpdate) -> frozenset[AccessControlEntry]:
        with self._lock:
            before = dict(self._acls)
            entries = frozenset(update(self._acls.get(pattern, frozenset())))
            if entries == before.get(pattern, frozenset()):
                return entries
            if entries:
                self._acls[pattern] = entries
            else:
                self._acls.pop(pattern, None)
            try:
                self._save()
            except OSError:
                self._acls = before
                raise
        if self._acl_listener is not None:
            self._acl_listener(pattern, entries)
        return entries

    def watch_acls(self, listener: AclListener) -> None:
        self._acl_listener = listener

    def restore_topics(self, topics: list[TopicMetadata], next_producer_id: int) -> None:
        """Recovery only (`strom storage recover-metadata`): add topics rebuilt from the log dirs, ids kept."""
        with self._lock:
            for topic in topics:
                if topic.name in self._topics:
                    raise KeyError(topic.name)
                self._topics[topic.name] = topic
            self._next_producer_id = max(self._next_producer_id, next_producer_id)
            self._save()

    def allocate_producer_id_block(self, size: int) -> int:
        with self._lock:
            first = self._next_producer_id
            self._next_producer_id += size
            try:
                self._save()
            except OSError:
                self._next_producer_id = first
                raise
            return first


def _broker_entity(broker_id: int | None) -> str:
    return DEFAULT_BROKER_ENTITY if broker_id is None else str(broker_id)


def find_metadata_file(log_dirs: list[str]) -> str | None:
    """The one log dir holding the metadata file (any position in log.dirs), None if none does."""
    holders = [d for d in log_dirs if (Path(d) / METADATA_FILE).exists()]
    if len(holders) > 1:
        raise LogDirError(
            f"{METADATA_FILE} exists in several log dirs ({', '.join(holders)}); keep only the current one "
            "(move the others aside) and start again"
        )
    return holders[0] if holders else None


def load_metadata_store(data_dir: str, broker_id: int) -> EmbeddedMetadataStore:
    """Open an existing metadata file; unreadable content is reported with what to do, not a traceback."""
    path = Path(data_dir) / METADATA_FILE
    try:
        return EmbeddedMetadataStore(data_dir, broker_id)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        raise LogDirError(
            f"the cluster metadata file {path} is unreadable ({detail}). Move it aside "
            f"(mv {path} {path}.corrupt), then rebuild the topic metadata from the partition directories with "
            f"`{recover_command([data_dir], broker_id)}` (add every log dir to --log-dirs)"
        ) from exc


def open_metadata_store(log_dirs: list[str], broker_id: int, cluster_id: str | None) -> EmbeddedMetadataStore:
    """Open (or, on a first start, create) the store and check it against the log dirs.

    The metadata is the only thing that says which partition directories are live, so a missing
    or empty store next to partition data refuses the start with the recovery command to run,
    instead of treating every log as unknown. The store's cluster id must be the one the log
    dirs' meta.properties record; new dirs get a meta.properties once the store is open.
    """
    metas, recorded_cluster = check_identities(log_dirs, broker_id, cluster_id)
    holder = find_metadata_file(log_dirs)
    data = {d: partition_dirs(d) for d in log_dirs}
    example = next((p for dirs in data.values() for p in dirs.values()), None)
    if holder is None:
        if example is not None:
            path = Path(log_dirs[0]) / METADATA_FILE
            raise LogDirError(
                f"the cluster metadata file {path} is missing but the log dirs hold partition data "
                f"(e.g. {example}); refusing to start so that nothing is treated as deleted. Rebuild the "
                f"topic metadata from the partition directories with `{recover_command(log_dirs, broker_id)}`, "
                "then start the broker again"
            )
        store = EmbeddedMetadataStore(log_dirs[0], broker_id, recorded_cluster or cluster_id)
    else:
        store = load_metadata_store(holder, broker_id)
        if not store.topics() and example is not None:
            raise LogDirError(
                f"the cluster metadata file {Path(holder) / METADATA_FILE} has no topics but the log dirs hold "
                f"partition data (e.g. {example}); refusing to start so that nothing is treated as deleted. "
                f"Rebuild the topic metadata with `{recover_command(log_dirs, broker_id)}`, then start again"
            )
        expected_cluster = recorded_cluster or cluster_id
        if expected_cluster and store.cluster_id != expected_cluster:
            source = "the log dirs' meta.properties record" if recorded_cluster else "cluster.id is"
            raise LogDirError(
                f"the cluster metadata file {Path(holder) / METADATA_FILE} belongs to cluster {store.cluster_id} "
                f"but {source} {expected_cluster}; the file comes from another cluster"
            )
    for d, meta in metas.items():
        if meta is None:
            write_meta_properties(d, MetaProperties(store.cluster_id, broker_id))
    return store


def recover_command(log_dirs: list[str], broker_id: int) -> str:
    """The exact `strom storage recover-metadata` invocation for these log dirs."""
    cmd = f"strom storage recover-metadata --log-dirs {','.join(log_dirs)}"
    return cmd if broker_id == 0 else f"{cmd} --broker-id {broker_id}"
