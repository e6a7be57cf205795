"""Where `strom cluster retire-broker` sends a broker's replicas (the pure planning step)."""

from __future__ import annotations

from collections import Counter

import pytest

from strom.cli.broker_retirement import below_min_isr, plan_retirement
from strom.cli.common import CliError
from strom.cli.reassignment_client import Broker, ClusterView, PartitionInfo


def view(racks: dict[int, str | None], replicas: dict[tuple[str, int], list[int]]) -> ClusterView:
    return ClusterView({b: Broker(b, "127.0.0.1", 9000 + b, r) for b, r in racks.items()}, controller_id=1,
                       partitions={tp: PartitionInfo(tuple(r), tuple(r), r[0]) for tp, r in replicas.items()})


def test_replicas_keep_their_rack_spread_and_place() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    cluster = view(racks, {("t", p): [p % 2 + 1, 3] if p % 2 else [3, p % 2 + 1] for p in range(6)})
    plan = plan_retirement(cluster, 3)
    assert set(plan.moves) == set(cluster.partitions)
    for tp, new in plan.moves.items():
        old = list(cluster.partitions[tp].replicas)
        assert new == [4 if b == 3 else b for b in old]  # broker 4 is the only other rack-b broker; same slot


def test_replicas_even_out_over_the_remaining_brokers() -> None:
    cluster = view({1: None, 2: None, 3: None, 4: None},
                   {("t", p): [1, 2 + p % 3] for p in range(9)} | {("u", 0): [2, 3]})
    plan = plan_retirement(cluster, 1)
    counts = Counter(b for tp, info in cluster.partitions.items()
                     for b in plan.moves.get(tp, list(info.replicas)))
    assert 1 not in counts
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    assert all(len(set(r)) == 2 for r in plan.moves.values())


def test_refuses_when_a_topic_needs_more_brokers_than_remain() -> None:
    cluster = view({1: None, 2: None, 3: None}, {("wide", 0): [1, 2, 3]})
    with pytest.raises(CliError, match="topic 'wide' has replication factor 3 but only 2 broker"):
        plan_retirement(cluster, 2)


def test_partitions_that_would_depend_on_the_broker_alone_are_named() -> None:
    cluster = view({1: None, 2: None, 3: None}, {("t", 0): [1, 2, 3], ("t", 1): [1, 2, 3]})
    cluster.partitions[("t", 1)] = PartitionInfo((1, 2, 3), (2, 3), 2)
    assert below_min_isr(cluster, 2, {"t": 2}) == ["t-1 (in-sync replicas 2,3, min.insync.replicas=2)"]
    assert below_min_isr(cluster, 1, {"t": 2}) == []


def test_a_partition_being_moved_counts_with_the_replication_factor_it_keeps() -> None:
    # Mid-move, Metadata lists old and new replicas together (4 of an RF 3 partition): not a reason to refuse.
    cluster = view({1: None, 2: None, 3: None, 4: None}, {("t", 0): [1, 2, 3, 4], ("t", 1): [1, 2, 3]})
    plan = plan_retirement(cluster, 2, skip={("t", 0)}, targets={("t", 0): [1, 3, 4]})
    assert plan.moves == {("t", 1): [1, 4, 3]}
    with pytest.raises(CliError, match="replication factor 4 but only 3"):
        plan_retirement(cluster, 2)


def test_a_finished_move_still_listed_with_its_old_replicas_does_not_refuse() -> None:
    # The controller has completed ("t", 0) but this broker's Metadata still shows old and new replicas.
    cluster = view({1: None, 2: None, 3: None, 4: None}, {("t", 0): [1, 2, 3, 4], ("t", 1): [2, 3, 4]})
    plan = plan_retirement(cluster, 2, skip={("t", 0)})
    assert plan.moves == {("t", 1): [1, 3, 4]}
