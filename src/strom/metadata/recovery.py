"""Rebuild the embedded store's topic metadata from the partition directories.

Used by `strom storage recover-metadata` when ``__cluster_metadata.json`` was lost or is
unreadable. Everything needed to serve the data again is on disk: topic names and partition
numbers in the directory names, topic ids in each ``partition.metadata``, the cluster and
broker ids in ``meta.properties``, config overrides in each ``topic.configs``. A topic without
recorded configs gets the broker defaults (``__consumer_offsets`` its compacted settings).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from strom.metadata.embedded import (
    METADATA_FILE,
    EmbeddedMetadataStore,
    find_metadata_file,
    load_metadata_store,
)
from strom.metadata.store import PartitionState, TopicMetadata
from strom.storage.log_dirs import LogDirError, check_identities, lock_log_dirs, read_meta_properties
from strom.storage.log_manager import partition_dirs
from strom.storage.partition_metadata import read_topic_configs, read_topic_id

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass
class RecoveredTopic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    id_recorded: bool
    missing_partitions: list[int] = field(default_factory=list)
    configs: dict[str, str] = field(default_factory=dict)


@dataclass
class RecoveryReport:
    metadata_file: str
    cluster_id: str
    recovered: list[RecoveredTopic] = field(default_factory=list)
    already_known: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def recover_metadata(
    log_dirs: list[str],
    broker_id: int | None = None,
    internal_topic_configs: dict[str, dict[str, str]] | None = None,
    dry_run: bool = False,
) -> RecoveryReport:
    """Add every topic found in the log dirs that the metadata file lacks; existing entries are kept.

    Takes the log dir locks first, so it refuses to run next to a live broker. An unreadable
    metadata file is refused (move it aside first): recovery never overwrites anything.
    """
    dirs = [str(Path(d).absolute()) for d in log_dirs]
    for d in dirs:
        if not Path(d).is_dir():
            raise LogDirError(f"log dir {d} does not exist")
    locks = lock_log_dirs(dirs)
    try:
        return _recover(dirs, broker_id, internal_topic_configs or {}, dry_run)
    finally:
        for lk in locks:
            lk.release()


def _recover(
    dirs: list[str], broker_id: int | None, internal_configs: dict[str, dict[str, str]], dry_run: bool
) -> RecoveryReport:
    if broker_id is None:
        broker_id = _recorded_broker(dirs)
    _, cluster_id = check_identities(dirs, broker_id, None)
    holder = find_metadata_file(dirs)
    store: EmbeddedMetadataStore | None = None
    if holder is not None:
        store = load_metadata_store(holder, broker_id)
        if cluster_id and store.cluster_id != cluster_id:
            raise LogDirError(f"{Path(holder) / METADATA_FILE} belongs to cluster {store.cluster_id} but the log dirs "
                              f"record {cluster_id}; move it aside and run this command again")
        cluster_id = store.cluster_id
    known = store.topics() if store is not None else {}
    report = RecoveryReport(str(Path(holder or dirs[0]) / METADATA_FILE), cluster_id or "")

    found: dict[str, dict[int, list[str]]] = {}
    for d in dirs:
        for (topic, partition), path in partition_dirs(d).items():
            found.setdefault(topic, {}).setdefault(partition, []).append(path)

    topics: list[TopicMetadata] = []
    for name in sorted(found):
        parts = found[name]
        if name in known:
            report.already_known.append(name)
            continue
        ids: dict[uuid.UUID, int] = {}
        configs: dict[str, str] | None = None
        for p, paths in sorted(parts.items()):
            if configs is None:
                configs = read_topic_configs(paths[0])
            if len(paths) > 1:
                report.notes.append(f"{name}-{p} exists in several log dirs ({', '.join(paths)}); the broker "
                                    "keeps the first")
            tid = read_topic_id(paths[0])
            if tid is not None:
                ids[tid] = ids.get(tid, 0) + 1
        if ids:
            topic_id = max(ids, key=lambda t: ids[t])
            if len(ids) > 1:
                report.notes.append(f"{name}: partitions record different topic ids; kept {topic_id}, the "
                                    "other directories will be set aside as stray at the next start")
        else:
            topic_id = uuid.uuid4()
        count = max(parts) + 1
        state = {p: PartitionState(p, broker_id, 0, [broker_id], [broker_id]) for p in range(count)}
        if configs is None:
            configs = dict(internal_configs.get(name, {}))
        topics.append(TopicMetadata(name, topic_id, state, configs))
        report.recovered.append(RecoveredTopic(name, topic_id, count, bool(ids),
                                               [p for p in range(count) if p not in parts], configs))
    if dry_run or not topics:
        return report
    if store is None:
        store = EmbeddedMetadataStore(dirs[0], broker_id, cluster_id)
        report.cluster_id = store.cluster_id
    # Producer ids handed out before the loss are unknown; start far above any sequential allocation so a
    # new idempotent producer never inherits an old id's sequence state kept in the logs.
    store.restore_topics(topics, next_producer_id=int(time.time() * 1000) * 1000)
    return report


def _recorded_broker(dirs: list[str]) -> int:
    """The broker id the log dirs' meta.properties record (0 when none does)."""
    for d in dirs:
        meta = read_meta_properties(d)
        if meta is not None:
            return meta.node_id
    return 0
