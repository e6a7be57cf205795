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
from pathlib import Path

from strom.cluster.metadata import BrokerInfo, MetadataStore, PartitionState, TopicMetadata

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
        self._save_pending = False
        self._retry_warned = False
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
        for t in data.get("topics", []):
            parts = {
                int(p["partition"]): PartitionState(
                    int(p["partition"]), p["leader"], p["leader_epoch"], list(p["replicas"]), list(p["isr"])
                )
                for p in t["partitions"]
            }
            self._topics[t["name"]] = TopicMetadata(t["name"], uuid.UUID(t["topic_id"]), parts, dict(t["configs"]))

    def _save(self) -> None:
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "configs": t.configs,
                    "partitions": [
                        {
                            "partition": p.partition,
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replicas": p.replicas,
                            "isr": p.isr,
                        }
                        for p in sorted(t.partitions.values(), key=lambda p: p.partition)
                    ],
                }
                for t in self._topics.values()
            ],
        }
        tmp = self._path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)
        except OSError:
            try:
                os.unlink(tmp)  # never leave a partial file holding the last free blocks
            except OSError:
                pass
            raise
        self._save_pending = False

    def _save_or_restore(self, topics: dict[str, TopicMetadata]) -> None:
        """Save; if the write fails, put the topics back as they were so memory matches the file."""
        try:
            self._save()
        except OSError:
            self._topics = topics
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

    def topics(self) -> dict[str, TopicMetadata]:
        return self._topics

    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicMetadata:
        with self._lock:
            if name in self._topics:
                raise KeyError(name)
            parts = {p: PartitionState(p, reps[0], 0, list(reps), list(reps)) for p, reps in assignment.items()}
            topic = TopicMetadata(name, uuid.uuid4(), parts, dict(configs))
            before = dict(self._topics)
            self._topics[name] = topic
            self._save_or_restore(before)
        self._notify("created", topic)
        return topic

    def delete_topic(self, name: str, recorded_elsewhere: bool = False) -> None:
        with self._lock:
            before = dict(self._topics)
            topic = self._topics.pop(name)
            try:
                self._save()
            except OSError as exc:
                if not recorded_elsewhere:
                    self._topics = before
                    raise
                # The tombstoned partition dirs make the deletion durable; write the file later.
                log.error("could not write metadata after deleting topic %s (%s); will retry", name, exc)
                self._save_pending = True
        self._notify("deleted", topic)

    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMetadata:
        with self._lock:
            topic = self._topics[name]
            before = dict(topic.partitions)
            for p, reps in assignment.items():
                topic.partitions[p] = PartitionState(p, reps[0], 0, list(reps), list(reps))
            try:
                self._save()
            except OSError:
                topic.partitions = before
                raise
        self._notify("partitions", topic)
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        with self._lock:
            topic = self._topics[name]
            before = topic.configs
            topic.configs = dict(configs)
            try:
                self._save()
            except OSError:
                topic.configs = before
                raise
        self._notify("configs", topic)
        return topic

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
