"""How long the rebalance planner takes, and how much it moves, on synthetic clusters.

For each size, N partitions of replication factor 3 with random sizes (up to 1 GB) sit on the first
B-1 of B brokers (3 racks); broker B has just joined with nothing. Reports planning time, replica
moves, bytes moved against the ideal share of the newcomer, and per-broker replicas after.

    python bench/bench_rebalance_planner.py [--partitions 300,1000,3000] [--brokers 7] [--seed 1]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from strom.balancer import BrokerInfo, PartitionInfo, plan_rebalance


def cluster(partitions: int, brokers: int, seed: int) -> tuple[list[BrokerInfo], list[PartitionInfo]]:
    rng = random.Random(seed)
    infos = [BrokerInfo(b, rack=f"r{b % 3}", disk_capacity_bytes=10**13) for b in range(1, brokers + 1)]
    by_rack: dict[str, list[int]] = {}
    for b in range(1, brokers):  # the last broker is the newcomer
        by_rack.setdefault(f"r{b % 3}", []).append(b)
    parts = []
    for i in range(partitions):
        chosen = [rng.choice(members) for members in by_rack.values()]  # one per rack, as Kafka places
        rng.shuffle(chosen)
        replicas = tuple(chosen)
        parts.append(PartitionInfo(f"t{i % 20}", i, replicas, leader=replicas[0],
                                   size_bytes=rng.randrange(1, 10**9)))
    return infos, parts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", default="300,1000,3000")
    parser.add_argument("--brokers", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    runs = []
    for n in (int(x) for x in args.partitions.split(",")):
        brokers, partitions = cluster(n, args.brokers, args.seed)
        racks = {b.broker_id: b.rack for b in brokers}
        newcomer_rack = racks[args.brokers]
        in_rack = sum(p.size_bytes for p in partitions for b in p.replicas if racks[b] == newcomer_rack)
        rack_brokers = sum(1 for r in racks.values() if r == newcomer_rack)
        start = time.perf_counter()
        plan = plan_rebalance(brokers, partitions)
        seconds = time.perf_counter() - start
        runs.append({
            "partitions": n, "brokers": args.brokers, "plan_seconds": round(seconds, 3),
            "reassignments": len(plan.reassignments), "replica_moves": plan.replica_moves,
            "bytes_moved": plan.bytes_to_move,
            # What the newcomer holds when its rack's bytes are even (one replica per rack: its rack's share).
            "newcomer_rack_share_bytes": in_rack // rack_brokers,
            "newcomer_bytes_after": next(b.disk_bytes for b in plan.after if b.broker_id == args.brokers),
            "replicas_after": {b.broker_id: b.replicas for b in plan.after},
            "leaders_after": {b.broker_id: b.leaders for b in plan.after},
            "unsatisfied_hard": len(plan.unsatisfied_hard), "unsatisfied_soft": len(plan.unsatisfied_soft),
        })
    print(json.dumps({"bench": "rebalance_planner", "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
