"""Single-node metadata store kept in a JSON file inside the first log dir.

Used when `zookeeper.connect` is empty. Every change is written atomically
(temp file, fsync, rename) before it is acknowledged, so a crash never leaves
a topic half-created.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from strom.metadata.image import MetadataDelta, MetadataImage
from strom.metadata.store import (
    AclListener,
    AclUpdate,
    BrokerInfo,
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
        # Topics as the file has them (replaced whole on a change, never changed in place, so the writer
        # thread and the loop never see one half-changed); the broker serves the image, published once
        # a change is applied.
        self._topics: dict[str, TopicMetadata] = {}
        self._controller: TopicController | None = None
        self._writer: ThreadPoolExecutor | None = None  # one thread: writes never overlap, and keep their order
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
        self._image = MetadataImage(controller_id=broker_id)
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
        self._image = MetadataImage.of(self._topics.values(), controller_id=self._broker_id)

    def _save(self, *, topics: Mapping[str, TopicMetadata] | None = None, next_producer_id: int | None = None,
              broker_configs: dict[str, dict[str, str]] | None = None,
              entity_configs: dict[str, dict[str, dict[str, str]]] | None = None,
              acls: dict[ResourcePattern, frozenset[AccessControlEntry]] | None = None) -> None:
        """Write the whole file (temp file, fsync, rename), as before; only changed topics are re-encoded.

        Each part given replaces the store's current one in the written document (the caller adopts it
        once the write succeeded). The file keeps its layout (``json.dumps(..., indent=1)`` of one
        document). Each topic's part is encoded once and kept until that topic changes, so a change
        costs the encoding of the topics it touched plus one write of the file.
        """
        topics = self._topics if topics is None else topics
        acls = self._acls if acls is None else acls
        head = json.dumps({
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id if next_producer_id is None else next_producer_id,
            "broker_configs": self._broker_configs if broker_configs is None else broker_configs,
            "entity_configs": self._entity_configs if entity_configs is None else entity_configs,
            "acls": [{"resource_type": p.resource_type.camel, "name": p.name, "pattern_type": p.pattern_type.name,
                      "acls": json.loads(encode_acls(entries))["acls"]}
                     for p, entries in sorted(acls.items(), key=lambda item: (item[0].resource_type,
                                                                             item[0].name,
                                                                             item[0].pattern_type))],
            "topics": [],
        }, indent=1)
        if topics:  # the document ends in '"topics": []\n}': put the topics' parts in the list
            parts = ",\n  ".join(self._encoded_topic(t) for t in topics.values())
            head = head[:-len("[]\n}")] + "[\n  " + parts + "\n ]\n}"
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

    def _update(self, change: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Read-modify-write of the file: ``change`` returns the parts it replaces (built from the current
        ones, never mutating them); they are written, then adopted whole. A failed write adopts nothing,
        so memory always matches the file. Runs on the writer thread (or in tools, before the broker)."""
        with self._lock:
            parts = change()
            if not parts:
                return parts
            self._save(**parts)
            for key, value in parts.items():
                setattr(self, f"_{key}", value)
            return parts

    def start_writer(self) -> ThreadPoolExecutor:
        """The store's one writer thread, started now (at the broker's start-up: starting a thread waits
        for it to run, which the first write would otherwise do on the event loop)."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metadata-writer")
            self._writer.submit(lambda: None).result()
        return self._writer

    async def _update_async(self, change: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``_update`` on the store's one writer thread: off the event loop, one write at a time, in order."""
        return await asyncio.get_running_loop().run_in_executor(self.start_writer(), self._update, change)

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

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    # -- MetadataStore -------------------------------------------------------
    def register_broker(self, broker: BrokerInfo) -> None:
        self.publish_delta(MetadataDelta(brokers={**self._image.brokers, broker.broker_id: broker}))

    def being_created(self, name: str) -> bool:
        return name in self._topics and name not in self._image.topics

    # -- topic changes: the primitives the single node's controller composes ------------------------
    def recorded_topic(self, name: str) -> TopicMetadata | None:
        """The topic as the file has it (it may not be published yet)."""
        return self._topics.get(name)

    def new_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicMetadata:
        """A topic not recorded yet, its partitions led by their first replica at leader epoch 0."""
        if name in self._topics:
            raise KeyError(name)
        parts = {p: PartitionState(p, reps[0], 0, list(reps), list(reps)) for p, reps in assignment.items()}
        return TopicMetadata(name, uuid.uuid4(), parts, dict(configs))

    def with_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        """A recorded topic with partitions added (a new object: the published one is never changed)."""
        topic = self._topics[name]
        parts = dict(topic.partitions)
        for p, reps in assignment.items():
            parts[p] = PartitionState(p, reps[0], 0, list(reps), list(reps))
        return dataclasses.replace(topic, partitions=parts)

    def _record(self, topic: TopicMetadata) -> Callable[[], dict[str, Any]]:
        def change() -> dict[str, Any]:
            if topic.topic_id != getattr(self._topics.get(topic.name), "topic_id", topic.topic_id):
                raise KeyError(topic.name)  # another topic of the name was recorded meanwhile
            return {"topics": {**self._topics, topic.name: topic}}
        return change

    def _forget(self, name: str, recorded_elsewhere: bool) -> TopicMetadata:
        with self._lock:
            topic = self._topics[name]
            topics = {n: t for n, t in self._topics.items() if n != name}
            try:
                self._save(topics=topics)
            except OSError as exc:
                if not recorded_elsewhere:
                    raise
                # The tombstoned partition dirs make the deletion durable; write the file later.
                log.error("could not write metadata after deleting topic %s (%s); will retry", name, exc)
                self._save_pending = True
            self._topics = topics
            self._encoded.pop(name, None)
            return topic

    async def write_topic(self, topic: TopicMetadata) -> None:
        """Record a new or changed topic durably (off the loop); the broker does not serve it yet."""
        await self._update_async(self._record(topic))

    async def write_deletion(self, name: str, recorded_elsewhere: bool = False) -> TopicMetadata:
        """Forget a topic durably (off the loop); see ``delete_topic`` for ``recorded_elsewhere``."""
        return await asyncio.get_running_loop().run_in_executor(self.start_writer(), self._forget, name,
                                                                recorded_elsewhere)

    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicMetadata:
        topic = self.new_topic(name, assignment, configs)
        self._update(self._record(topic))
        self.publish_delta(MetadataDelta.of([topic]))
        return topic

    def delete_topic(self, name: str, recorded_elsewhere: bool = False) -> None:
        self.publish_delta(MetadataDelta.of(deleted=[self._forget(name, recorded_elsewhere)]))

    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        topic = self.with_partitions(name, assignment)
        self._update(self._record(topic))
        self.publish_delta(MetadataDelta.of([topic]))
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        topic = dataclasses.replace(self._topics[name], configs=dict(configs))
        self._update(self._record(topic))
        self.publish_delta(MetadataDelta.of([topic], configs_changed=[name]))
        return topic

    def attach_controller(self, controller: TopicController | None) -> None:
        """The single node's controller: topic writes go through it (logs first, leadership after)."""
        self._controller = controller

    async def create_topic_async(self, name: str, assignment: dict[int, list[int]],
                                 configs: dict[str, str]) -> TopicMetadata:
        if self._controller is not None:
            return await self._controller.create_topic(name, assignment, configs)
        topic = self.new_topic(name, assignment, configs)
        await self.write_topic(topic)
        self.publish_delta(MetadataDelta.of([topic]))
        return topic

    async def delete_topic_async(self, name: str, recorded_elsewhere: bool = False) -> None:
        if self._controller is not None:
            await self._controller.delete_topic(name)
            return
        self.publish_delta(MetadataDelta.of(deleted=[await self.write_deletion(name, recorded_elsewhere)]))

    async def add_partitions_async(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        if self._controller is not None:
            return await self._controller.add_partitions(name, assignment)
        topic = self.with_partitions(name, assignment)
        await self.write_topic(topic)
        self.publish_delta(MetadataDelta.of([topic]))
        return topic

    async def set_topic_configs_async(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        if self._controller is not None:
            return await self._controller.set_topic_configs(name, configs)
        topic = dataclasses.replace(self._topics[name], configs=dict(configs))
        await self.write_topic(topic)
        self.publish_delta(MetadataDelta.of([topic], configs_changed=[name]))
        return topic

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return dict(self._broker_configs.get(_broker_entity(broker_id), {}))

    def set_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        entity = _broker_entity(broker_id)

        def change() -> dict[str, Any]:
            updated = {k: v for k, v in self._broker_configs.items() if k != entity}
            if configs:
                updated[entity] = dict(configs)
            return {"broker_configs": updated}

        self._update(change)

    def all_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        return {name: dict(c) for name, c in self._entity_configs.get(entity_type, {}).items()}

    async def set_entity_configs_async(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        def change() -> dict[str, Any]:
            updated = dict(self._entity_configs)
            names = {n: c for n, c in updated.get(entity_type, {}).items() if n != name}
            if configs:
                names[name] = dict(configs)
            updated[entity_type] = names
            return {"entity_configs": updated}

        await self._update_async(change)
        self._entity_changed(entity_type, name)

    def load_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        return dict(self._acls)

    async def update_acls_async(self, pattern: ResourcePattern, update: AclUpdate) -> frozenset[AccessControlEntry]:
        outcome: list[frozenset[AccessControlEntry]] = []

        def change() -> dict[str, Any]:
            current = self._acls.get(pattern, frozenset())
            entries = frozenset(update(current))
            outcome.append(entries)
            if entries == current:
                return {}
            acls = {p: e for p, e in self._acls.items() if p != pattern}
            if entries:
                acls[pattern] = entries
            return {"acls": acls}

        if not await self._update_async(change):
            return outcome[0]  # nothing changed: nothing written, no one told
        if self._acl_listener is not None:
            self._acl_listener(pattern, outcome[0])
        return outcome[0]

    def watch_acls(self, listener: AclListener) -> None:
        self._acl_listener = listener

    def restore_topics(self, topics: list[TopicMetadata], next_producer_id: int) -> None:
        """Recovery only (`strom storage recover-metadata`): add topics rebuilt from the log dirs, ids kept."""
        def change() -> dict[str, Any]:
            restored = dict(self._topics)
            for topic in topics:
                if topic.name in restored:
                    raise KeyError(topic.name)
                restored[topic.name] = topic
            return {"topics": restored, "next_producer_id": max(self._next_producer_id, next_producer_id)}

        recorded = self._update(change)["topics"]
        self._image = MetadataImage.of(recorded.values(), self._image.brokers.values(), self._image.controller_id)

    def allocate_producer_id_block(self, size: int) -> int:
        return self._update(self._allocate(size))["next_producer_id"] - size

    async def allocate_producer_id_block_async(self, size: int) -> int:
        return (await self._update_async(self._allocate(size)))["next_producer_id"] - size

    def _allocate(self, size: int) -> Callable[[], dict[str, Any]]:
        return lambda: {"next_producer_id": self._next_producer_id + size}


class TopicController(Protocol):
    """What runs a single node's topic writes: the in-process controller (metadata/local_controller.py)."""

    async def create_topic(self, name: str, assignment: dict[int, list[int]],
                           configs: dict[str, str]) -> TopicMetadata: ...

    async def delete_topic(self, name: str) -> None: ...

    async def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata: ...

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata: ...


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
