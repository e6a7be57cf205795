"""Where the brokers' CPU goes under acks=all RF 3 load: py-spy on all three brokers during a fixed-rate run.

Starts ZooKeeper and 3 brokers (bench_cluster's Cluster), one RF 3 topic of 6 partitions
(min.insync.replicas 2), produces 1 KiB records at `--mb-s` MB/s with acks=all for `--seconds`, and
samples every broker's event loop with py-spy meanwhile. Prints JSON: the latency figures, the brokers'
CPU seconds per acknowledged record, and per broker the share of event-loop samples by activity.

    python bench/profile_acks_all.py [--mb-s 20] [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_cluster import Cluster, latency  # noqa: E402

# First matching frame (innermost wins) -> activity.
ACTIVITIES = [
    ("produce handler", "handlers/produce.py"),
    ("leader: follower fetch", "handlers/fetch.py"),
    ("leader: parked fetch completion", "DelayedFetch"),
    ("follower: replica fetcher", "replica_fetcher.py"),
    ("acks=all completion", "DelayedProduce"),
    ("request decoding", "codec.py"),
    ("socket writes", "_SelectorSocketTransport.write"),
    ("socket reads", "_SelectorSocketTransport._read_ready"),
    ("connection handling", "network/connection.py"),
]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def runqueue_wait_seconds(pid: int) -> float:
    """Time the process's threads were runnable but waited for a core (/proc/<pid>/task/*/schedstat, field 2):
    what other work on the machine costs this process."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _own_cpu_seconds() -> float:
    """User + system CPU of this process, librdkafka's threads included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def shares(collapsed: Path) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for line in collapsed.read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        frames = stack.split(";")
        if not any(f.startswith("Handle._run") for f in frames):
            continue  # not the event loop (ZooKeeper client, storage threads, idle)
        activity = "other"
        for name, needle in ACTIVITIES:
            if any(needle in f for f in frames):
                activity = name
                break
        counts[activity] += int(n)
    total = sum(counts.values()) or 1
    return {k: round(v / total, 3) for k, v in counts.most_common()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb-s", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    spy = str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory(prefix="strom-profile-") as tmp:
        cluster = Cluster(tmp)
        try:
            cluster.create_topic("rf3", 6, 3, {"min.insync.replicas": "2"})
            pids = {i: b.pid for i, b in cluster.brokers.items()}
            cpu0 = {i: cpu_seconds(p) for i, p in pids.items()}
            spies = {i: subprocess.Popen([spy, "record", "--pid", str(p), "--rate", "200", "--duration",
                                          str(int(args.seconds + 5)), "--format", "raw", "--nonblocking",
                                          "--output", f"{tmp}/b{i}.collapsed"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for i, p in pids.items()}
            client0, load0 = _own_cpu_seconds(), os.getloadavg()[0]
            waits0 = {i: runqueue_wait_seconds(p) for i, p in {**pids, "client": os.getpid()}.items()}
            figures = latency(cluster.bootstrap, "rf3", 1024, args.mb_s, args.seconds)
            cpu = {i: cpu_seconds(p) - cpu0[i] for i, p in pids.items()}
            client = _own_cpu_seconds() - client0
            waits = {i: round(runqueue_wait_seconds(p) - waits0[i], 2)
                     for i, p in {**pids, "client": os.getpid()}.items()}
            for s in spies.values():
                s.wait(timeout=120)
        finally:
            cluster.close()
        out = {"latency": figures, "broker_cpu_s": {i: round(c, 2) for i, c in cpu.items()},
               "broker_cpu_us_per_acked_record": round(1e6 * sum(cpu.values()) / max(figures["acked"], 1), 1),
               # The producer (Python loop + librdkafka threads) shares the 2 cores with the brokers.
               "client_cpu_s": round(client, 2),
               "client_cpu_us_per_acked_record": round(1e6 * client / max(figures["acked"], 1), 1),
               "load_average_1m": [round(load0, 1), round(os.getloadavg()[0], 1)],
               # Seconds runnable but waiting for a core, per broker and for the producer: CPU contention.
               "runqueue_wait_s": waits,
               "loop_share_by_activity": {i: shares(Path(f"{tmp}/b{i}.collapsed")) for i in pids}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
