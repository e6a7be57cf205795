"""Replica placement for new topics and new partitions, as Kafka's AdminUtils does it.

Round-robin from a random broker so that leaders of many topics do not pile up on the
first broker, with each later partition's followers shifted (``next_replica_shift``) so a
broker's followers are spread over all other brokers instead of always its neighbour.
When brokers carry ``broker.rack`` the broker list is first alternated by rack (a1, b1,
c1, a2, b2, ...), and a follower is skipped while it would put a second replica on a
rack or broker when another rack or broker has none: every partition spans as many racks
as its replication factor allows.

Pure functions: the caller reads the brokers (ZooKeeper or the embedded store) and
writes the result.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import kafka.errors as Errors


class BrokerMetadata(NamedTuple):
    """What placement needs of a broker (Kafka's ``BrokerMetadata``)."""

    id: int
    rack: str | None = None


def assign_replicas_to_brokers(brokers: Sequence[BrokerMetadata], num_partitions: int, replication_factor: int,
                               fixed_start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """Partition id -> replica broker ids (the first is the preferred leader).

    ``fixed_start_index`` (>= 0) replaces both random choices, the start broker and the first
    follower shift; ``start_partition_id`` numbers the partitions from there (CreatePartitions).
    """
    if num_partitions <= 0:
        raise Errors.InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise Errors.InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise Errors.InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    if all(b.rack is None for b in brokers):
        return _assign_rack_unaware(sorted(b.id for b in brokers), num_partitions, replication_factor,
                                    fixed_start_index, start_partition_id, rng)
    if any(b.rack is None for b in brokers):
        # Kafka raises AdminOperationException here; the wire has no better code than this one.
        raise Errors.InvalidReplicationFactorError(
            "Not all brokers have rack information for replica rack aware assignment.")
    return _assign_rack_aware({b.id: b.rack for b in brokers if b.rack is not None}, num_partitions,
                              replication_factor, fixed_start_index, start_partition_id, rng)


def start_index_for_new_partitions(brokers: Sequence[BrokerMetadata], first_leader: int) -> int:
    """CreatePartitions continues the topic's round-robin: start at the first broker (by id)
    whose id is not below partition 0's leader, as Kafka's AdminZkClient.createPartitions does."""
    ids = sorted(b.id for b in brokers)
    return next((i for i, broker_id in enumerate(ids) if broker_id >= first_leader), 0)


def replica_index(first_replica_index: int, replica_shift: int, replica: int, num_brokers: int) -> int:
    """Position of follower number ``replica`` (0-based): never the leader's own position."""
    shift = 1 + (replica_shift + replica) % (num_brokers - 1)
    return (first_replica_index + shift) % num_brokers


def rack_alternated_brokers(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered by taking one from each rack in turn (racks sorted, brokers by id in a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in sorted(broker_racks.items()):
        by_rack.setdefault(rack, []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[row] for row in range(max(map(len, columns), default=0))
            for column in columns if row < len(column)]


def _assign_rack_unaware(broker_ids: list[int], num_partitions: int, replication_factor: int,
                         fixed_start_index: int, start_partition_id: int,
                         rng: random.Random) -> dict[int, list[int]]:
    n = len(broker_ids)
    out: dict[int, list[int]] = {}
    for partition, first, shift in _leader_slots(n, num_partitions, fixed_start_index, start_partition_id, rng):
        out[partition] = [broker_ids[first]] + [broker_ids[replica_index(first, shift, j, n)]
                                                for j in range(replication_factor - 1)]
    return out


def _leader_slots(n: int, num_partitions: int, fixed_start_index: int, start_partition_id: int,
                  rng: random.Random) -> Iterator[tuple[int, int, int]]:
    """(partition, index of its leader in the broker list, follower shift): a start broker and a
    shift picked once (at random unless fixed), the shift growing by one every n partitions."""
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        yield partition, (partition + start_index) % n, shift
        partition += 1


def _assign_rack_aware(broker_racks: dict[int, str], num_partitions: int, replication_factor: int,
                       fixed_start_index: int, start_partition_id: int,
                       rng: random.Random) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(broker_racks)
    n = len(arranged)
    num_racks = len(set(broker_racks.values()))
    out: dict[int, list[int]] = {}
    for partition, first, shift in _leader_slots(n, num_partitions, fixed_start_index, start_partition_id, rng):
        leader = arranged[first]
        replicas = [leader]
        racks = {broker_racks[leader]}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = broker_racks[broker]
                # Take it unless its rack already has a replica while some rack has none, or it already
                # holds one while some broker has none.
                if (rack not in racks or len(racks) == num_racks) and (broker not in replicas or len(replicas) == n):
                    replicas.append(broker)
                    racks.add(rack)
                    break
        out[partition] = replicas
    return out
