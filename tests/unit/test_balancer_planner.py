"""The rebalance planner: hard goals met, a new broker gets its share, few bytes moved, same input → same plan."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strom.balancer import BalancerConstraints, BrokerInfo, PartitionInfo, Plan, PlanError, plan_rebalance

MB = 1 << 20


def final_assignment(partitions: list[PartitionInfo], plan: Plan) -> dict[tuple[str, int], tuple[int, ...]]:
    out = {p.tp: p.replicas for p in partitions}
    for r in plan.reassignments:
        out[(r.topic, r.partition)] = r.target_replicas
    return out


def replica_counts(assignment: dict[tuple[str, int], tuple[int, ...]]) -> Counter[int]:
    return Counter(b for replicas in assignment.values() for b in replicas)


def two_broker_cluster(partitions: int = 12, rf: int = 2, size: int = MB) -> list[PartitionInfo]:
    """Topics created while only brokers 1 and 2 were up (leaders alternate, as Kafka places them)."""
    pairs = [(1, 2), (2, 1)]
    return [PartitionInfo("orders", i, pairs[i % 2][:rf], leader=pairs[i % 2][0], size_bytes=size)
            for i in range(partitions)]


def test_a_new_empty_broker_receives_its_share_of_replicas_and_leaders() -> None:
    partitions = two_broker_cluster(12)
    plan = plan_rebalance([BrokerInfo(1), BrokerInfo(2), BrokerInfo(3)], partitions)
    after = final_assignment(partitions, plan)
    assert replica_counts(after) == {1: 8, 2: 8, 3: 8}
    assert Counter(r[0] for r in after.values()) == {1: 4, 2: 4, 3: 4}
    assert {b.broker_id: (b.replicas, b.leaders) for b in plan.after} == {1: (8, 4), 2: (8, 4), 3: (8, 4)}
    assert [b.replicas for b in plan.before] == [12, 12, 0]
    # Only the new broker receives data: 8 replicas of 1 MiB, no byte copied between the old brokers.
    assert plan.replica_moves == 8 and plan.bytes_to_move == 8 * MB
    assert all(r.adding == (3,) for r in plan.reassignments if not r.leader_only)
    assert not plan.unsatisfied_hard and not plan.unsatisfied_soft


def test_a_balanced_cluster_gets_an_empty_plan() -> None:
    partitions = [PartitionInfo("t", i, tuple((i + k) % 3 + 1 for k in range(3)), leader=i % 3 + 1, size_bytes=MB)
                  for i in range(9)]
    plan = plan_rebalance([BrokerInfo(1), BrokerInfo(2), BrokerInfo(3)], partitions)
    assert plan.reassignments == ()


def test_rack_violations_are_fixed() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    brokers = [BrokerInfo(b, rack=r) for b, r in racks.items()]
    # Every partition has both replicas in one rack (created before broker.rack was set).
    partitions = [PartitionInfo("t", i, pair, leader=pair[0], size_bytes=MB)
                  for i, pair in enumerate([(1, 2), (2, 1), (3, 4), (4, 3), (5, 6), (6, 5)])]
    plan = plan_rebalance(brokers, partitions)
    assert not plan.unsatisfied_hard
    for replicas in final_assignment(partitions, plan).values():
        assert len({racks[b] for b in replicas}) == len(replicas), replicas
    # Six replicas must move; the greedy goals move a few more to even replica counts again, not all of them.
    assert 6 <= plan.replica_moves <= 8
    assert {b.replicas for b in plan.after} == {2}


def test_rack_awareness_spreads_evenly_when_racks_are_fewer_than_replicas() -> None:
    racks = {1: "a", 2: "a", 3: "a", 4: "b", 5: "b", 6: "b"}
    partitions = [PartitionInfo("t", i, (1, 2, 3), leader=1, size_bytes=MB) for i in range(3)]
    plan = plan_rebalance([BrokerInfo(b, rack=r) for b, r in racks.items()], partitions)
    for replicas in final_assignment(partitions, plan).values():
        assert max(Counter(racks[b] for b in replicas).values()) == 2  # 3 replicas, 2 racks: 2 + 1


def test_other_goals_never_break_rack_awareness() -> None:
    racks = {1: "a", 2: "b", 3: "a", 4: "b"}
    # Brokers 3 and 4 are new; every replica of rack a must stay in rack a's brokers and so on.
    partitions = [PartitionInfo("t", i, (1, 2) if i % 2 else (2, 1), leader=1, size_bytes=MB) for i in range(8)]
    plan = plan_rebalance([BrokerInfo(b, rack=r) for b, r in racks.items()], partitions)
    after = final_assignment(partitions, plan)
    for replicas in after.values():
        assert {racks[b] for b in replicas} == {"a", "b"}
    assert replica_counts(after) == {1: 4, 2: 4, 3: 4, 4: 4}


def test_disk_over_threshold_moves_the_fewest_bytes_away() -> None:
    brokers = [BrokerInfo(1, disk_capacity_bytes=100 * MB), BrokerInfo(2, disk_capacity_bytes=100 * MB),
               BrokerInfo(3, disk_capacity_bytes=100 * MB)]
    # Broker 1 is at 90 % (limit 80 %): moving the 12 MiB partition is enough; the 40 MiB one is not needed.
    sizes = {0: 40 * MB, 1: 12 * MB, 2: 8 * MB, 3: 30 * MB}
    partitions = [PartitionInfo("t", i, (1,), leader=1, size_bytes=s) for i, s in sizes.items()]
    partitions.append(PartitionInfo("u", 0, (2,), leader=2, size_bytes=10 * MB))
    partitions.append(PartitionInfo("u", 1, (3,), leader=3, size_bytes=10 * MB))
    plan = plan_rebalance(brokers, partitions, BalancerConstraints(goals=("disk-capacity",), disk_threshold=0.8))
    assert [(r.topic, r.partition) for r in plan.reassignments] == [("t", 1)]
    assert plan.bytes_to_move == 12 * MB
    assert {b.broker_id: b.disk_bytes for b in plan.after}[1] == 78 * MB
    assert not plan.unsatisfied_hard


def test_a_disk_threshold_no_broker_can_meet_is_reported() -> None:
    brokers = [BrokerInfo(1, disk_capacity_bytes=10 * MB), BrokerInfo(2, disk_capacity_bytes=10 * MB)]
    partitions = [PartitionInfo("t", i, (1, 2), leader=1, size_bytes=6 * MB) for i in range(2)]
    plan = plan_rebalance(brokers, partitions, BalancerConstraints(disk_threshold=0.5))
    assert plan.bytes_to_move == 0
    assert any(u.startswith("disk-capacity: broker 1") for u in plan.unsatisfied_hard)


def test_replica_distribution_moves_the_smallest_partitions() -> None:
    sizes = [900 * MB, 1 * MB, 700 * MB, 2 * MB, 800 * MB, 3 * MB]
    partitions = [PartitionInfo("t", i, (1,), leader=1, size_bytes=s) for i, s in enumerate(sizes)]
    plan = plan_rebalance([BrokerInfo(1), BrokerInfo(2)], partitions,
                          BalancerConstraints(goals=("replica-distribution",)))
    assert sorted(r.partition for r in plan.reassignments) == [1, 3, 5]
    assert plan.bytes_to_move == 6 * MB


def test_minimal_movement_undoes_moves_no_goal_needs() -> None:
    # The disk goal alone would move; with disk usage already even after the replica moves, the
    # minimal-movement pass keeps the plan to the moves the replica-count goal needs.
    partitions = two_broker_cluster(6, size=MB)
    with_pass = plan_rebalance([BrokerInfo(1), BrokerInfo(2), BrokerInfo(3)], partitions)
    goals = ("replica-distribution", "disk-usage-distribution", "leader-distribution")
    without = plan_rebalance([BrokerInfo(1), BrokerInfo(2), BrokerInfo(3)], partitions,
                             BalancerConstraints(goals=goals))
    assert with_pass.bytes_to_move <= without.bytes_to_move
    assert with_pass.bytes_to_move == 4 * MB  # 12 replicas over 3 brokers: 4 go to the new one


def test_each_partition_appears_once_and_moves_at_most_its_replicas_once() -> None:
    rng = random.Random(7)
    brokers = [BrokerInfo(b, rack="abc"[b % 3]) for b in range(1, 7)]
    partitions = []
    for i in range(60):
        replicas = tuple(rng.sample(range(1, 4), 3))  # everything on the first three brokers
        partitions.append(PartitionInfo("t", i, replicas, leader=replicas[0], size_bytes=rng.randrange(1, 100) * MB))
    plan = plan_rebalance(brokers, partitions)
    names = [(r.topic, r.partition) for r in plan.reassignments]
    assert len(names) == len(set(names))
    for r in plan.reassignments:
        assert len(r.adding) == len(r.removing) <= 3


def test_plan_is_deterministic_whatever_the_input_order() -> None:
    rng = random.Random(3)
    brokers = [BrokerInfo(b, rack="xy"[b % 2], disk_capacity_bytes=10_000 * MB) for b in range(1, 6)]
    partitions = []
    for i in range(80):
        replicas = tuple(rng.sample(range(1, 4), 2))
        partitions.append(PartitionInfo(f"t{i % 4}", i, replicas, leader=replicas[0],
                                        size_bytes=rng.randrange(0, 500) * MB))
    first = plan_rebalance(brokers, partitions)
    shuffled_partitions, shuffled_brokers = partitions[:], brokers[:]
    rng.shuffle(shuffled_partitions)
    rng.shuffle(shuffled_brokers)
    assert plan_rebalance(shuffled_brokers, shuffled_partitions) == first
    assert first.reassignments  # the test means something only if there was work to do


def test_leaders_are_evened_by_preferred_order_without_moving_data() -> None:
    partitions = [PartitionInfo("t", i, (1, 2, 3), leader=1, size_bytes=MB) for i in range(9)]
    plan = plan_rebalance([BrokerInfo(1), BrokerInfo(2), BrokerInfo(3)], partitions)
    assert plan.bytes_to_move == 0 and all(r.leader_only for r in plan.reassignments)
    assert Counter(r[0] for r in final_assignment(partitions, plan).values()) == {1: 3, 2: 3, 3: 3}


def test_out_of_sync_replicas_do_not_become_preferred_leaders() -> None:
    partitions = [PartitionInfo("t", i, (1, 2), leader=1, isr=(1,), size_bytes=MB) for i in range(4)]
    plan = plan_rebalance([BrokerInfo(1), BrokerInfo(2)], partitions)
    assert plan.reassignments == ()


def test_dead_brokers_offline_dirs_and_inflight_reassignments() -> None:
    brokers = [BrokerInfo(1), BrokerInfo(2), BrokerInfo(3, offline_log_dirs=True), BrokerInfo(4)]
    partitions = [PartitionInfo("t", i, (1, 2), leader=1, size_bytes=MB) for i in range(8)]
    partitions.append(PartitionInfo("dead", 0, (1, 9), leader=1, size_bytes=MB))  # broker 9 is down
    partitions.append(PartitionInfo("moving", 0, (1, 2), leader=1, size_bytes=MB, reassigning=True))
    plan = plan_rebalance(brokers, partitions)
    after = final_assignment(partitions, plan)
    assert after[("dead", 0)] == (1, 9) and after[("moving", 0)] == (1, 2)
    assert all(3 not in r.target_replicas and 9 not in r.target_replicas for r in plan.reassignments)
    assert replica_counts(after)[4] > 0
    assert any("dead-0" in n for n in plan.notes) and any("moving-0" in n for n in plan.notes)
    assert any("[3]" in n and "receive nothing" in n for n in plan.notes)


@pytest.mark.parametrize(("brokers", "partitions", "constraints", "message"), [
    ([BrokerInfo(1), BrokerInfo(1)], [], None, "listed twice"),
    ([BrokerInfo(1), BrokerInfo(2)], [PartitionInfo("t", 0, (1, 1))], None, "replica twice"),
    ([BrokerInfo(1)], [PartitionInfo("t", 0, ())], None, "no replicas"),
    ([BrokerInfo(1)], [PartitionInfo("t", 0, (1,), size_bytes=-1)], None, "negative size"),
    ([BrokerInfo(1)], [PartitionInfo("t", 0, (1,)), PartitionInfo("t", 0, (1,))], None, "listed twice"),
    ([BrokerInfo(1, disk_capacity_bytes=0)], [], None, "disk capacity"),
    ([], [], None, "no live broker"),
    ([BrokerInfo(1)], [], BalancerConstraints(goals=("nonsense",)), "unknown goal"),
    ([BrokerInfo(1)], [], BalancerConstraints(disk_threshold=1.5), "disk threshold"),
    ([BrokerInfo(1)], [], BalancerConstraints(disk_threshold=0), "disk threshold"),
    ([BrokerInfo(1)], [], BalancerConstraints(balance_threshold=-0.1), "balance threshold"),
])
def test_invalid_input_is_refused(brokers: list[BrokerInfo], partitions: list[PartitionInfo],
                                  constraints: BalancerConstraints | None, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        plan_rebalance(brokers, partitions, constraints)


@pytest.mark.parametrize("seed", range(25))
def test_random_clusters_keep_replication_factor_and_use_only_receiving_brokers(seed: int) -> None:
    rng = random.Random(seed)
    ids = list(range(1, rng.randrange(2, 8)))
    offline = {b for b in ids if rng.random() < 0.15}
    brokers = [BrokerInfo(b, rack=("r" + str(b % 3)) if seed % 2 else None, offline_log_dirs=b in offline,
                          disk_capacity_bytes=rng.choice([None, 1000 * MB])) for b in ids]
    partitions = []
    for i in range(rng.randrange(1, 60)):
        rf = rng.randrange(1, len(ids) + 1)
        replicas = tuple(rng.sample(ids + [99], rf))  # broker 99 is down
        partitions.append(PartitionInfo(f"t{i % 3}", i, replicas, leader=replicas[0],
                                        size_bytes=rng.randrange(0, 300) * MB))
    plan = plan_rebalance(brokers, partitions, BalancerConstraints(disk_threshold=rng.choice([0.5, 0.8, 1.0])))
    originals = {p.tp: p.replicas for p in partitions}
    receivers = {b for b in ids if b not in offline}
    for r in plan.reassignments:
        current = originals[(r.topic, r.partition)]
        assert r.current_replicas == current
        assert len(r.target_replicas) == len(current) == len(set(r.target_replicas))
        assert set(r.adding) <= receivers
        assert 99 not in current


def test_the_controller_balancer_batches_and_throttles_as_kafka_tools_do() -> None:
    from strom.balancer import Reassignment
    from strom.controller.auto_balancer import batch_of, throttle_configs

    plan = plan_rebalance([BrokerInfo(1), BrokerInfo(2), BrokerInfo(3)], two_broker_cluster(12, size=MB))
    moves = [r for r in plan.reassignments if not r.leader_only]
    batch = batch_of(plan, 3)
    assert [r for r in batch if not r.leader_only] == sorted(moves, key=lambda r: (r.bytes_to_move, r.partition))[:3]
    brokers, topics = throttle_configs([Reassignment("t", 0, (1, 2), (3, 2), MB), Reassignment("t", 1, (2, 1), (1, 2), 0)])
    assert brokers == {1, 2, 3}  # the leader-only change throttles nothing
    assert topics == {"t": {"leader.replication.throttled.replicas": "0:1,0:2",
                            "follower.replication.throttled.replicas": "0:3"}}
