"""What every coordinator backed by an internal topic shares (Kafka's ``coordinator-common``).

The group coordinator owns the partitions of ``__consumer_offsets``; the transaction
coordinator will own those of ``__transaction_state``. Both follow one rule: the
coordinator of a key is whichever broker leads the key's partition of the internal
topic, so the broker loads a partition's state when it becomes leader and unloads it on
losing leadership. This module keeps that rule in one place: the ``PartitionedCoordinator``
protocol a coordinator implements, ``attach_coordinator`` to follow the metadata publisher,
``sync_ownership`` to reconcile, and ``ensure_internal_topic`` to create the topic on
first use with the coordinator's own settings.

A failed load is retried with back-off (1 s doubling to 30 s) for as long as this
broker still leads the partition; meanwhile the partition answers
COORDINATOR_LOAD_IN_PROGRESS, so clients retry instead of hunting for a coordinator
that does not exist.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import kafka.errors as Errors

from strom.coordinator.clock import SYSTEM_CLOCK, Clock
from strom.metadata.store import TopicMetadata

if TYPE_CHECKING:
    from strom.broker.admin_manager import AdminManager
    from strom.broker.server import KafkaServer
    from strom.metadata.store import MetadataStore

log = logging.getLogger(__name__)

LOAD_RETRY_INITIAL_S = 1.0
LOAD_RETRY_MAX_S = 30.0
_LOADS: set[asyncio.Task[None]] = set()  # keeps running loads referenced until they finish


class PartitionedCoordinator(Protocol):
    """A coordinator whose state lives in the partitions of one internal topic."""

    @property
    def topic_name(self) -> str:
        """The internal topic whose partitions this coordinator owns."""
        ...

    @property
    def clock(self) -> Clock:
        """The coordinator's time source (load retries back off on it)."""
        ...

    @property
    def active(self) -> bool:
        """False once shut down: nothing more is loaded."""
        ...

    @property
    def owned_partitions(self) -> set[int]:
        """Partitions whose state is loaded and served."""
        ...

    @property
    def loading_partitions(self) -> set[int]:
        """Partitions being (re)loaded: their keys answer COORDINATOR_LOAD_IN_PROGRESS."""
        ...

    def set_partition_count(self, count: int) -> None:
        """The topic's partition count, which maps keys to partitions."""
        ...

    def on_election(self, partition: int) -> None:
        """Load a partition synchronously (no running loop: tests and tools)."""
        ...

    async def load_partition(self, partition: int) -> None:
        """Load a partition off the loop; raises if its log could not be read."""
        ...

    def on_resignation(self, partition: int) -> None:
        """Leadership moved away: fail what is parked and forget the partition's state."""
        ...


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: like Math.abs but Integer.MIN_VALUE maps to 0, never negative."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    """The internal-topic partition of a group id or transactional id, as Kafka computes it, so a
    client's FindCoordinator lands where Kafka's would."""
    return kafka_abs(java_string_hashcode(key)) % num_partitions


def internal_topic_partitions(server: KafkaServer, topic_name: str, configured: int) -> int:
    """An existing topic's partition count wins over the config, as in Kafka."""
    topic = server.metadata.topic(topic_name)
    if topic is not None and topic.partitions:
        return len(topic.partitions)
    return configured


def attach_coordinator(server: KafkaServer, coordinator: PartitionedCoordinator) -> None:
    """Follow the metadata: the broker's publisher reconciles ownership after every change of the
    internal topic, once the replica manager has applied it."""
    server.publisher.add_coordinator(coordinator)


def led_partitions(server: KafkaServer, topic_name: str) -> set[int]:
    """Partitions of the internal topic this broker hosts and leads (as the replica manager says:
    in a cluster, LeaderAndIsr reaches the replica manager before UpdateMetadata reaches the cache)."""
    return {p for (t, p), part in server.replica_manager.partitions.items()
            if t == topic_name and part.is_leader}


def _still_led(server: KafkaServer, coordinator: PartitionedCoordinator, partition: int) -> bool:
    return partition in led_partitions(server, coordinator.topic_name)


def sync_ownership(server: KafkaServer, coordinator: PartitionedCoordinator) -> None:
    """Load partitions we now lead, unload those we no longer lead."""
    topic = server.metadata.topic(coordinator.topic_name)
    if topic is not None and topic.partitions:
        coordinator.set_partition_count(len(topic.partitions))
    led = led_partitions(server, coordinator.topic_name)
    for partition in sorted(coordinator.owned_partitions - led):
        coordinator.on_resignation(partition)
    for partition in sorted(led - coordinator.owned_partitions - coordinator.loading_partitions):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coordinator.on_election(partition)
        else:
            coordinator.loading_partitions.add(partition)  # from now on: COORDINATOR_LOAD_IN_PROGRESS
            task = loop.create_task(load_with_retry(
                coordinator, partition, functools.partial(_still_led, server, coordinator, partition),
                coordinator.clock))
            _LOADS.add(task)
            task.add_done_callback(_LOADS.discard)


async def load_with_retry(coordinator: PartitionedCoordinator, partition: int,
                          still_leader: Callable[[], bool], clock: Clock = SYSTEM_CLOCK) -> None:
    """Load one partition, retrying failures with back-off while this broker still leads it.

    Without the retry, one unreadable moment (a full disk, a log being replaced) would leave
    the partition's keys answering NOT_COORDINATOR until the next leadership change.
    """
    delay = LOAD_RETRY_INITIAL_S
    attempt = 1
    while True:
        try:
            await coordinator.load_partition(partition)
            return
        except Exception:
            log.exception("loading %s-%d failed (attempt %d), retrying in %.1f s",
                          coordinator.topic_name, partition, attempt, delay)
        coordinator.loading_partitions.add(partition)  # clients keep retrying, not re-discovering
        try:
            await clock.sleep(delay)
        finally:
            coordinator.loading_partitions.discard(partition)
        if not coordinator.active or not still_leader() or partition in coordinator.owned_partitions:
            return
        coordinator.loading_partitions.add(partition)
        delay = min(delay * 2, LOAD_RETRY_MAX_S)
        attempt += 1


async def ensure_internal_topic(metadata: MetadataStore, admin_manager: AdminManager, topic_name: str,
                                num_partitions: int, replication_factor: int,
                                configs: Mapping[str, str]) -> TopicMetadata | None:
    """Create an internal topic on first use, replication capped to the live brokers."""
    topic = metadata.topic(topic_name)
    if topic is not None:
        return topic
    live = len(metadata.live_brokers())
    rf = min(replication_factor, max(live, 1))
    try:
        await admin_manager.create_topic(topic_name, num_partitions, rf, configs=dict(configs))
        log.info("created %s with replication factor %d", topic_name, rf)
    except Errors.TopicAlreadyExistsError:
        pass
    return metadata.topic(topic_name)
