"""ReplicaManager: owns this broker's partitions and serves produce and fetch.

Handlers never touch logs directly; they go through here, so replication can
later hook acks=all and follower fetches in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors

from strom.broker.partition import Partition
from strom.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from strom.cluster.metadata import MetadataStore, TopicMetadata
from strom.config import BrokerConfig
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.partition_metadata import ensure_topic_configs, ensure_topic_id

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class FetchPartitionRequest:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int


@dataclass(slots=True)
class FetchPartitionResult:
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = None  # FetchDataInfo or None
    size: int = 0


@dataclass(slots=True)
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    committed_only: bool
    partitions: list[FetchPartitionRequest] = field(default_factory=list)


class DelayedFetch(DelayedOperation):
    """A long-poll fetch parked until min_bytes are available or max_wait_ms passes."""

    def __init__(self, manager: ReplicaManager, params: FetchParams, future: asyncio.Future[Any]) -> None:
        super().__init__(params.max_wait_ms)
        self._manager = manager
        self._params = params
        self._future = future
        self._result: list[FetchPartitionResult] | None = None

    def try_complete(self) -> bool:
        if not self._manager.has_new_data(self._params):
            return False  # the common case after an append elsewhere: no log read needed
        results, total = self._manager.read_from_local_log(self._params)
        if total >= self._params.min_bytes or any(r.error_code for r in results):
            self._result = results
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self._result is None:
            self._result, _ = self._manager.read_from_local_log(self._params)
        if not self._future.done():
            self._future.set_result(self._result)

    def on_expiration(self) -> None:
        pass


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, metadata: MetadataStore,
                 fetch_purgatory: DelayedOperationPurgatory) -> None:
        self.config = config
        self.broker_id: int = config.get("broker.id")
        self.log_manager = log_manager
        self.metadata = metadata
        self.fetch_purgatory = fetch_purgatory
        self.partitions: dict[TopicPartition, Partition] = {}
        metadata.add_listener(self._on_metadata_change)

    # -- partition lifecycle ---------------------------------------------------
    def log_config_for(self, topic: TopicMetadata) -> LogConfig:
        return LogConfig.from_props({**self.config.topic_defaults(), **topic.configs})

    def load_partitions(self) -> None:
        """Attach every partition in the metadata to its log (creating missing logs)."""
        for topic in self.metadata.topics().values():
            self._ensure_partitions(topic)

    def _ensure_partitions(self, topic: TopicMetadata) -> None:
        log_config = self.log_config_for(topic)
        for state in topic.partitions.values():
            if self.broker_id not in state.replicas:
                continue
            tp = (topic.name, state.partition)
            part = self.partitions.get(tp)
            if part is None:
                plog = self.log_manager.get_or_create_log(topic.name, state.partition, log_config)
                # The directory carries its topic id, so metadata can be checked against it and rebuilt.
                ensure_topic_id(plog.directory, topic.topic_id)
                ensure_topic_configs(plog.directory, topic.configs)
                self.partitions[tp] = Partition(topic.name, state.partition, topic.topic_id, state, plog,
                                                self.broker_id)
            else:
                part.update_state(state)

    def _on_metadata_change(self, kind: str, topic: TopicMetadata) -> None:
        if kind in ("created", "partitions"):
            self._ensure_partitions(topic)
        elif kind == "configs":
            cfg = self.log_config_for(topic)
            for (name, _), part in self.partitions.items():
                if name == topic.name:
                    part.log.update_config(cfg)
                    ensure_topic_configs(part.log.directory, topic.configs)
        elif kind == "deleted":
            for tp in [tp for tp in self.partitions if tp[0] == topic.name]:
                del self.partitions[tp]
                self.log_manager.delete_log(*tp)
                self.fetch_purgatory.check_and_complete(tp)

    def get_partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            raise Errors.UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
        return part

    def partitions_of(self, topic: str) -> Iterable[Partition]:
        return (p for (t, _), p in self.partitions.items() if t == topic)

    # -- produce ---------------------------------------------------------------
    def append_records(self, topic: str, partition: int, records: Any, required_acks: int) -> Any:
        part = self.get_partition(topic, partition)
        info = part.append_records_to_leader(records, required_acks)
        if not info.duplicate:
            self.fetch_purgatory.check_and_complete((topic, partition))
        return info

    # -- fetch -----------------------------------------------------------------
    def has_new_data(self, params: FetchParams) -> bool:
        """Whether any watched partition moved past its fetch offset (or vanished) since parking."""
        for req in params.partitions:
            part = self.partitions.get((req.topic, req.partition))
            if part is None:
                return True
            limit = part.last_stable_offset if params.committed_only else part.high_watermark
            if limit > req.fetch_offset or req.fetch_offset < part.log_start_offset:
                return True
        return False

    def read_from_local_log(self, params: FetchParams) -> tuple[list[FetchPartitionResult], int]:
        results: list[FetchPartitionResult] = []
        remaining = params.max_bytes
        total = 0
        for req in params.partitions:
            res = FetchPartitionResult()
            try:
                part = self.get_partition(req.topic, req.partition)
                res.high_watermark = part.high_watermark
                res.last_stable_offset = part.last_stable_offset
                res.log_start_offset = part.log_start_offset
                limit = min(req.max_bytes, remaining)
                if limit > 0 or total == 0:
                    data = part.read_records(req.fetch_offset, max(limit, 0), params.committed_only,
                                             min_one_message=(total == 0))
                    res.records = data
                    res.size = data.size
                    remaining -= data.size
                    total += data.size
            except Errors.KafkaError as exc:
                res.error_code = exc.errno
            results.append(res)
        return results, total

    async def fetch_messages(self, params: FetchParams) -> list[FetchPartitionResult]:
        results, total = self.read_from_local_log(params)
        if (params.max_wait_ms <= 0 or total >= params.min_bytes or not params.partitions
                or any(r.error_code for r in results)):
            return results
        future: asyncio.Future[list[FetchPartitionResult]] = asyncio.get_running_loop().create_future()
        op = DelayedFetch(self, params, future)
        keys = [(r.topic, r.partition) for r in params.partitions]
        self.fetch_purgatory.try_complete_else_watch(op, keys)
        return await future
