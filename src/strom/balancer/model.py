"""The planner's inputs and its working copy of the cluster (Cruise Control's ClusterModel, much reduced).

Inputs are plain frozen records a caller fills from Metadata and DescribeLogDirs answers. The
working copy (`ClusterModel`) keeps per-broker replica counts, preferred-leader counts and bytes
up to date as goals try moves on it, so that every goal reads the same numbers and a rejected
move is undone exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors

from strom.server_common.types import TopicPartition


class PlanError(ValueError):
    """The planner's input cannot describe a real cluster (duplicate replicas, negative sizes, ...)."""


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker. `disk_capacity_bytes` None = unknown (disk goals then leave this broker alone);
    `offline_log_dirs` = a log dir failed (KIP-112): it keeps its replicas but receives none."""

    broker_id: int
    rack: str | None = None
    disk_capacity_bytes: int | None = None
    offline_log_dirs: bool = False


@dataclass(frozen=True)
class PartitionInfo:
    """A partition as the cluster has it now: replicas in preferred order, current leader (-1 = none),
    ISR (None = unknown, read as all replicas), size of its log in bytes, and whether a reassignment
    of it is already in flight (then the planner leaves it alone)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int = -1
    size_bytes: int = 0
    isr: tuple[int, ...] | None = None
    reassigning: bool = False

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class BalancerConstraints:
    """What a plan must respect. `goals` names goals from strom.balancer.goals (run in priority
    order whatever order they are given in); `disk_threshold` is the share of a broker's disk
    capacity its replicas may fill; `balance_threshold` is how far (a fraction of the average) a
    broker may sit from the average before a distribution goal moves anything, as Cruise Control's
    *.balance.threshold; `excluded_brokers` never receive replicas or leadership."""

    goals: tuple[str, ...] | None = None
    disk_threshold: float = 0.8
    max_replicas_per_broker: int | None = None
    balance_threshold: float = 0.10
    excluded_brokers: frozenset[int] = field(default_factory=frozenset)


class ClusterModel:
    """The cluster the goals rearrange: assignment per partition plus per-broker totals kept in step."""

    def __init__(self, brokers: Iterable[BrokerInfo], partitions: Iterable[PartitionInfo],
                 constraints: BalancerConstraints) -> None:
        self.constraints = constraints
        self.brokers: dict[int, BrokerInfo] = {}
        for broker in brokers:
            if broker.broker_id in self.brokers:
                raise PlanError(f"broker {broker.broker_id} is listed twice")
            if broker.disk_capacity_bytes is not None and broker.disk_capacity_bytes <= 0:
                raise PlanError(f"broker {broker.broker_id} has a disk capacity of {broker.disk_capacity_bytes} bytes")
            self.brokers[broker.broker_id] = broker
        if not self.brokers:
            raise PlanError("no live broker")
        # Brokers that may receive replicas and leadership: live, every log dir online, not excluded.
        self.receivers: list[int] = sorted(b for b, info in self.brokers.items()
                                           if not info.offline_log_dirs and b not in constraints.excluded_brokers)
        self.assignment: dict[TopicPartition, list[int]] = {}
        self.original: dict[TopicPartition, tuple[int, ...]] = {}
        self.leader: dict[TopicPartition, int] = {}
        self.size: dict[TopicPartition, int] = {}
        self.isr: dict[TopicPartition, frozenset[int]] = {}
        # Partitions no goal may touch, with the reason (shown in the plan's notes).
        self.frozen: dict[TopicPartition, str] = {}
        self.replicas_of: dict[int, set[TopicPartition]] = {b: set() for b in self.brokers}
        self.bytes_of: dict[int, int] = dict.fromkeys(self.brokers, 0)
        self.leads: dict[int, int] = dict.fromkeys(self.brokers, 0)
        # Bumped whenever a broker's or a partition's share changes: a goal can tell that an action it
        # already judged would be judged the same again (its verdict depends only on what it touches).
        self.versions: dict[object, int] = {}
        # Cheap checks of hard goals (source, destination) that rule a move out before it is tried.
        self.placement_rules: list[Callable[[TopicPartition, int, int], bool]] = []
        for p in partitions:
            self._add_partition(p)
        self.partitions: list[TopicPartition] = sorted(self.assignment)

    def _add_partition(self, p: PartitionInfo) -> None:
        tp = p.tp
        if tp in self.assignment:
            raise PlanError(f"partition {p.topic}-{p.partition} is listed twice")
        if not p.replicas:
            raise PlanError(f"partition {p.topic}-{p.partition} has no replicas")
        if len(set(p.replicas)) != len(p.replicas):
            raise PlanError(f"partition {p.topic}-{p.partition} lists a replica twice: {list(p.replicas)}")
        if p.size_bytes < 0:
            raise PlanError(f"partition {p.topic}-{p.partition} has a negative size ({p.size_bytes} bytes)")
        self.assignment[tp] = list(p.replicas)
        self.original[tp] = tuple(p.replicas)
        self.leader[tp] = p.leader
        self.size[tp] = p.size_bytes
        self.isr[tp] = frozenset(p.replicas if p.isr is None else p.isr)
        if p.reassigning:
            self.frozen[tp] = "a reassignment is already in progress"
        elif any(b not in self.brokers for b in p.replicas):
            dead = [b for b in p.replicas if b not in self.brokers]
            self.frozen[tp] = f"replica(s) on broker(s) {dead} that are not alive"
        for b in p.replicas:
            if b in self.brokers:
                self.replicas_of[b].add(tp)
                self.bytes_of[b] += p.size_bytes
        if p.replicas[0] in self.brokers:
            self.leads[p.replicas[0]] += 1

    # -- reading ---------------------------------------------------------------------------------------
    def rack(self, broker: int) -> str | None:
        info = self.brokers.get(broker)
        return info.rack if info else None

    def capacity(self, broker: int) -> int | None:
        info = self.brokers.get(broker)
        return info.disk_capacity_bytes if info else None

    def disk_limit(self, broker: int) -> float | None:
        capacity = self.capacity(broker)
        return None if capacity is None else capacity * self.constraints.disk_threshold

    def added(self, tp: TopicPartition, broker: int) -> bool:
        """Whether the plan put this replica here (its data has yet to be copied)."""
        return broker not in self.original[tp]

    def movable(self, tp: TopicPartition, broker: int, destination: int | None = None) -> bool:
        """A replica a goal may move: its partition is not frozen and it has not been moved already,
        unless it goes back where it came from (a replica moves at most once per plan, so no data is
        copied twice and goals cannot undo each other forever)."""
        if tp in self.frozen:
            return False
        return not self.added(tp, broker) or (destination is not None and destination in self.original[tp])

    def can_receive(self, tp: TopicPartition, broker: int, source: int | None = None) -> bool:
        """Whether `broker` may take a replica of `tp` (from `source`: then hard goals' rules apply too)."""
        if broker not in self.receivers or broker in self.assignment[tp]:
            return False
        return source is None or all(rule(tp, source, broker) for rule in self.placement_rules)

    def can_lead(self, tp: TopicPartition, broker: int) -> bool:
        """Preferred leadership may go to a receiving broker whose replica is (or will be, once the
        reassignment completes) in sync."""
        return (broker in self.receivers and broker in self.assignment[tp]
                and (broker in self.isr[tp] or self.added(tp, broker)))

    def stamp(self, brokers: Iterable[int], partitions: Iterable[TopicPartition]) -> tuple[int, ...]:
        return (tuple(self.versions.get(b, 0) for b in sorted(brokers))
                + tuple(self.versions.get(tp, 0) for tp in sorted(partitions)))

    def _bump(self, *keys: object) -> None:
        for key in keys:
            self.versions[key] = self.versions.get(key, 0) + 1

    # -- changing -------------------------------------------------------------------------------------
    def move_replica(self, tp: TopicPartition, source: int, destination: int) -> None:
        """Replace `source` by `destination` in the same position of the replica list."""
        self._bump(tp, source, destination)
        replicas = self.assignment[tp]
        index = replicas.index(source)
        replicas[index] = destination
        size = self.size[tp]
        self.replicas_of[source].discard(tp)
        self.replicas_of[destination].add(tp)
        self.bytes_of[source] -= size
        self.bytes_of[destination] += size
        if index == 0:
            self.leads[source] -= 1
            self.leads[destination] += 1

    def set_preferred(self, tp: TopicPartition, broker: int) -> int:
        """Put `broker` first in the replica list; returns the broker that was first (to undo)."""
        replicas = self.assignment[tp]
        previous = replicas[0]
        self._bump(tp, previous, broker)
        replicas.remove(broker)
        replicas.insert(0, broker)
        self.leads[previous] -= 1
        self.leads[broker] += 1
        return previous


def fold_log_dirs(results: Iterable[Any], sizes: dict[tuple[str, int], int]) -> tuple[int, bool]:
    """One broker's DescribeLogDirs results: records each replica's size in ``sizes`` (the largest copy of a
    partition counts), returns the bytes in its online dirs and whether one of its dirs is offline."""
    total, offline = 0, False
    for result in results:
        if result.error_code == Errors.KafkaStorageError.errno:
            offline = True
            continue
        if result.error_code:
            continue
        total += max(0, result.total_bytes)
        for topic in result.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                sizes[key] = max(sizes.get(key, 0), p.partition_size)
    return total, offline
