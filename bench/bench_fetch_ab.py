"""Fetch A/B: raw fetch throughput and broker CPU of an older commit next to the working tree.

Two brokers run at once, one on the older commit's sources (a temporary git worktree) and one on
this checkout's, loaded with the same pre-built batches; raw fetch rounds alternate between them
(and swap order every round), so a shared machine's drift lands on both. A fetch round reads every
partition from offset 0 to the high watermark with Fetch requests of the given size (sendfile).

    python bench/bench_fetch_ab.py 35ebbc1 --rounds 30

Prints JSON: per side and fetch size, the median MB/s over the rounds and the broker CPU per MB
summed over all rounds (to the nanosecond, see bench_broker.cpu_between).

With --replica it measures replication instead: two 2-broker clusters (ZooKeeper each), a topic on
both brokers of each; a round freezes the follower (SIGSTOP), loads --records 1 KiB records into the
leader, thaws it and times it until its segment files hold every byte of the leader's. Prints per
side the median catch-up MB/s and the CPU per MB of the leader (serving replica fetches) and of the
follower (fetching and appending).

    python bench/bench_fetch_ab.py 35ebbc1 --replica --rounds 8 --records 50000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402

import bench_broker as bb  # noqa: E402

TOPIC = "bench-fetch"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref", help="the older commit")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--records", type=int, default=200_000,
                    help="1 KiB records loaded per broker (--replica: per round)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--fetch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[bb.MiB, 8 * bb.MiB])
    ap.add_argument("--replica", action="store_true",
                    help="measure a follower catching up (replica fetch) instead of consumer fetch")
    args = ap.parse_args()
    load = [round(os.getloadavg()[0], 2)]  # 1-minute load average at the start and the end
    out = replica_ab(args) if args.replica else consumer_ab(args)
    load.append(round(os.getloadavg()[0], 2))
    print(json.dumps({"benchmark": "replica fetch a/b" if args.replica else "fetch a/b", "ref": args.ref,
                      "loadavg": load, "rounds": args.rounds, "records": args.records,
                      "partitions": args.partitions, **out}, indent=1))
    return 0


def consumer_ab(args: argparse.Namespace) -> dict[str, object]:
    """Raw consumer fetch rounds from offset 0 to the high watermark, alternating the two brokers."""
    figures: dict[str, dict[int, list[tuple[float, float, float]]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory(prefix="strom-fetch-ab-") as tmp, \
            bb.ab_brokers(args.ref, Path(tmp), TOPIC, args.partitions) as brokers:
        for b in brokers.values():
            bb.raw_produce(b.port, b.pid, TOPIC, args.partitions, args.records, 1024, bb.MiB, 4)
        for k in range(args.rounds):
            for size in args.fetch_sizes:
                for side in ("before", "after") if k % 2 == 0 else ("after", "before"):
                    b = brokers[side]
                    assert b.pid is not None
                    r = bb.raw_fetch(b.port, b.pid, TOPIC, args.partitions, size)
                    if r["errors"]:
                        raise SystemExit(f"{side}: {r['errors']} fetch errors")
                    figures[side].setdefault(size, []).append((r["mb_s"], r["broker_cpu_s"], r["mb"]))
    out: dict[str, object] = {}
    for side, by_size in figures.items():
        for size, vals in by_size.items():
            out[f"{side} {size // bb.MiB}MiB"] = {
                "median_mb_s": statistics.median(v[0] for v in vals),
                "broker_cpu_ms_per_mb": round(1000 * sum(v[1] for v in vals) / sum(v[2] for v in vals), 4)}
    return out


LEADER, FOLLOWER = 1, 2


def quartiles(values: list[float]) -> list[float]:
    """Lower quartile, median and upper quartile, rounded."""
    return [round(q, 4) for q in statistics.quantiles(values, n=4)] if len(values) > 1 else [round(v, 4) for v in values]


@contextlib.contextmanager
def ab_clusters(ref: str, tmp: Path, topic: str, partitions: int) -> Iterator[dict[str, ClusterProcess]]:
    """Two 2-broker clusters at once, "before" on ``ref``'s sources and "after" on this checkout's, each
    with ``topic`` replicated on both brokers and led by LEADER; stopped and the worktree removed on exit."""
    old = tmp / "old"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(old), ref], check=True)
    clusters: dict[str, ClusterProcess] = {}
    try:
        for side, src in (("before", old / "src"), ("after", ROOT / "src")):
            cluster = clusters[side] = ClusterProcess(tmp / side, brokers=2, offsets_replication_factor=1)
            for b in cluster.brokers.values():
                b.env = {"PYTHONPATH": str(src)}
            cluster.start()
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
            new = NewTopic(topic, num_partitions=partitions, replication_factor=-1,
                           replica_assignment=[[LEADER, FOLLOWER]] * partitions)
            for f in admin.create_topics([new]).values():
                f.result(60)
            for p in range(partitions):
                cluster.wait_isr(topic, p, [LEADER, FOLLOWER])
        yield clusters
    finally:
        for c in clusters.values():
            c.close()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)


def log_bytes(cluster: ClusterProcess, broker_id: int, topic: str) -> int:
    """Bytes in the topic's segment files on one broker (a follower copies the leader's batches as they are)."""
    return sum(f.stat().st_size for f in cluster.log_dir(broker_id).glob(f"{topic}-*/*.log"))


def catch_up(cluster: ClusterProcess, topic: str, partitions: int, records: int) -> dict[str, float]:
    """One round: freeze the follower, load the leader, thaw the follower and time it until its segment
    files hold every byte of the leader's; the CPU both brokers spent meanwhile."""
    leader, follower = cluster.broker(LEADER), cluster.broker(FOLLOWER)
    assert leader.pid is not None and follower.pid is not None
    cluster.sigstop(FOLLOWER)
    try:
        r = bb.raw_produce(leader.port, leader.pid, topic, partitions, records, 1024, bb.MiB, 4)
    finally:
        cluster.sigcont(FOLLOWER)  # thawed before anything can fail, so the cluster can be closed
    if r["errors"]:
        raise SystemExit(f"{r['errors']} produce errors")
    target = log_bytes(cluster, LEADER, topic)
    lead0, fol0, t0 = bb.cpu_sample(leader.pid), bb.cpu_sample(follower.pid), time.perf_counter()
    deadline = t0 + 120
    while log_bytes(cluster, FOLLOWER, topic) < target:
        if time.perf_counter() > deadline:
            raise SystemExit("the follower did not catch up within 120 s")
        time.sleep(0.005)
    wall = time.perf_counter() - t0
    return {"seconds": wall, "mb": r["mb"], "leader_cpu_s": bb.cpu_between(lead0, bb.cpu_sample(leader.pid)),
            "follower_cpu_s": bb.cpu_between(fol0, bb.cpu_sample(follower.pid))}


def replica_ab(args: argparse.Namespace) -> dict[str, object]:
    """Follower catch-up rounds alternating the two clusters: the leader's cost of serving replica fetches
    and the follower's of fetching and appending, per MB replicated."""
    rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="strom-replica-ab-") as tmp, \
            ab_clusters(args.ref, Path(tmp), TOPIC, args.partitions) as clusters:
        for k in range(args.rounds):
            for side in ("before", "after") if k % 2 == 0 else ("after", "before"):
                rounds[side].append(catch_up(clusters[side], TOPIC, args.partitions, args.records))
    out: dict[str, object] = {}
    for side, rs in rounds.items():
        mb = sum(r["mb"] for r in rs)
        out[side] = {
            "median_catch_up_mb_s": round(statistics.median(r["mb"] / r["seconds"] for r in rs), 1),
            "leader_cpu_ms_per_mb": round(1000 * sum(r["leader_cpu_s"] for r in rs) / mb, 4),
            "follower_cpu_ms_per_mb": round(1000 * sum(r["follower_cpu_s"] for r in rs) / mb, 4),
            # per-round quartiles: the spread two rounds of one side show on this machine
            "leader_cpu_ms_per_mb_rounds": quartiles([1000 * r["leader_cpu_s"] / r["mb"] for r in rs]),
            "follower_cpu_ms_per_mb_rounds": quartiles([1000 * r["follower_cpu_s"] / r["mb"] for r in rs])}
    return out


if __name__ == "__main__":
    sys.exit(main())
