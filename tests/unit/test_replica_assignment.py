"""Replica placement: balanced leaders, distinct replicas, shifted followers, rack spread."""

from __future__ import annotations

import random
from collections import Counter

import kafka.errors as Errors
import pytest

from strom.metadata.replica_assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
    rack_alternated_brokers,
    start_index_for_new_partitions,
)


def brokers(n: int, racks: str | None = None) -> list[BrokerMetadata]:
    return [BrokerMetadata(i, racks[i] if racks else None) for i in range(n)]


def test_round_robin_with_shifted_followers() -> None:
    got = assign_replicas_to_brokers(brokers(5), 10, 3, fixed_start_index=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                   # one full round later the followers move one step further from the leader
                   5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("n", "partitions", "rf"), [(1, 3, 1), (3, 6, 3), (4, 12, 2), (5, 20, 3), (6, 7, 6)])
def test_leaders_balanced_and_replicas_distinct(seed: int, n: int, partitions: int, rf: int) -> None:
    got = assign_replicas_to_brokers(brokers(n), partitions, rf, rng=random.Random(seed))
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf == len(set(replicas))
        assert set(replicas) <= set(range(n))
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(n)) <= 1
    replicas_per_broker = Counter(b for r in got.values() for b in r)
    assert max(replicas_per_broker.values()) - min(replicas_per_broker.get(b, 0) for b in range(n)) <= 1 + rf


def test_followers_of_one_leader_spread_over_the_other_brokers() -> None:
    got = assign_replicas_to_brokers(brokers(4), 12, 2, fixed_start_index=0)
    followers_of_0 = {r[1] for r in got.values() if r[0] == 0}
    assert followers_of_0 == {1, 2, 3}


def test_random_start_varies() -> None:
    starts = {assign_replicas_to_brokers(brokers(5), 1, 1, rng=random.Random(seed))[0][0] for seed in range(50)}
    assert starts == set(range(5))


def test_rack_alternated_broker_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({0: "a", 1: "a", 2: "b"}) == [0, 2, 1]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("racks", "partitions", "rf"),
                         [("abc", 6, 3), ("aab", 6, 2), ("aabb", 8, 2), ("aabbcc", 12, 3), ("aaab", 5, 3),
                          ("abcabc", 9, 2)])
def test_rack_aware_spreads_each_partition_over_racks(seed: int, racks: str, partitions: int, rf: int) -> None:
    bs = brokers(len(racks), racks)
    got = assign_replicas_to_brokers(bs, partitions, rf, rng=random.Random(seed))
    assert sorted(got) == list(range(partitions))
    num_racks = len(set(racks))
    for replicas in got.values():
        assert len(replicas) == rf == len(set(replicas))
        assert len({racks[b] for b in replicas}) == min(rf, num_racks)
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(len(racks))) <= 1


def test_rack_aware_leaders_alternate_racks() -> None:
    got = assign_replicas_to_brokers(brokers(4, "aabb"), 4, 1, fixed_start_index=0)
    assert [got[p][0] for p in range(4)] == [0, 2, 1, 3]


def test_some_brokers_without_rack_is_refused() -> None:
    with pytest.raises(Errors.InvalidReplicationFactorError, match="Not all brokers have rack information"):
        assign_replicas_to_brokers([BrokerMetadata(0, "a"), BrokerMetadata(1, None)], 1, 1)


def test_invalid_counts() -> None:
    with pytest.raises(Errors.InvalidReplicationFactorError, match="larger than available brokers: 2"):
        assign_replicas_to_brokers(brokers(2), 1, 3)
    with pytest.raises(Errors.InvalidReplicationFactorError):
        assign_replicas_to_brokers(brokers(2), 1, 0)
    with pytest.raises(Errors.InvalidPartitionsError):
        assign_replicas_to_brokers(brokers(2), 0, 1)


def test_new_partitions_continue_the_existing_round_robin() -> None:
    bs = brokers(3)
    existing = assign_replicas_to_brokers(bs, 3, 2, fixed_start_index=1)
    start = start_index_for_new_partitions(bs, existing[0][0])
    assert start == 1
    added = assign_replicas_to_brokers(bs, 3, 2, fixed_start_index=start, start_partition_id=3)
    assert sorted(added) == [3, 4, 5]
    assert added == {p: r for p, r in assign_replicas_to_brokers(bs, 6, 2, fixed_start_index=1).items() if p >= 3}
    # leaders keep going round the brokers where the topic left off
    assert [existing[p][0] for p in range(3)] + [added[p][0] for p in range(3, 6)] == [1, 2, 0, 1, 2, 0]


def test_new_partitions_after_the_first_leader_left() -> None:
    bs = [BrokerMetadata(1), BrokerMetadata(4), BrokerMetadata(7)]
    assert start_index_for_new_partitions(bs, 3) == 1  # first broker id >= 3
    assert start_index_for_new_partitions(bs, 9) == 0
    added = assign_replicas_to_brokers(bs, 2, 3, fixed_start_index=1, start_partition_id=5)
    assert sorted(added) == [5, 6]
    assert all(sorted(r) == [1, 4, 7] for r in added.values())
