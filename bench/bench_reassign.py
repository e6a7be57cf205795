"""Moving a large partition to a new broker, with and without a replication throttle (KIP-73).

ZooKeeper + 3 brokers. Topic `bulk` has one partition on brokers [1, 2], filled with `--mb` MiB of
1 KiB records; `strom reassign-partitions --execute [--throttle T]` moves it to [1, 3] (broker 3
held none of it), then `--verify` clears the throttles once the move is done. Meanwhile a probe
producer writes acks=all records (`--probe-rate` per second) to another RF 3 topic of 2 partitions
led by brokers 1 and 2. For each `--throttles` value (-1 = none; a fresh cluster each) it reports
the move time, the copy rate broker 3 saw (its partition directory sampled every 0.5 s: over the
whole move, and the most it copied in any span of one quota window), and the probe's acks=all
latency before and during the move. `--window-num` sets `replication.quota.window.num` (Kafka's 11
samples of 1 s): the rate is an average over that window, so a fresh throttle first lets through
(window - 1) seconds' worth at once.

    python bench/bench_reassign.py [--mb 1024] [--throttles=-1,50000000] [--probe-rate 200] [--window-num 11]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from tests.support.cluster import ClusterProcess  # noqa: E402
from tests.support.replicas import create_topic  # noqa: E402

from bench_retire_broker import Probe, fill  # noqa: E402

TARGET = [1, 3]


def strom(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log")) if path.is_dir() else 0


def most_in_any_span(copied: list[tuple[float, int]], span_s: float) -> int:
    """The most bytes copied between two samples at most span_s apart."""
    best, j = 0, 0
    for t, b in copied:
        while copied[j][0] < t - span_s:
            j += 1
        best = max(best, b - copied[j][1])
    return best


def one_run(base: Path, mib: int, throttle: int, probe_rate: int, window_num: int) -> dict[str, object]:
    overrides = {"auto.leader.rebalance.enable": "false", "replication.quota.window.num": window_num}
    with ClusterProcess(base, 3, overrides=overrides) as cluster:
        bulk = create_topic(cluster, replicas=[[1, 2]])
        probe_topic = create_topic(cluster, replicas=[[1, 2, 3], [2, 3, 1]], config={"min.insync.replicas": "2"})
        fill(cluster.bootstrap, bulk, mib)
        size = dir_bytes(cluster.log_dir(1) / f"{bulk}-0")
        cluster.wait_for(lambda: dir_bytes(cluster.log_dir(2) / f"{bulk}-0") >= size, 300, "broker 2 caught up")
        plan = base / "reassign.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": bulk, "partition": 0, "replicas": TARGET}]}))
        probe = Probe(cluster.bootstrap, probe_topic, probe_rate).start()
        try:
            time.sleep(12)  # the first 2 s (connections, producer id) are left out of "before"
            started = time.monotonic()
            args = ["reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
                    "--reassignment-json-file", str(plan)]
            executed = strom(*args, *(["--throttle", str(throttle)] if throttle >= 0 else []))
            if executed.returncode:
                raise RuntimeError(executed.stdout + executed.stderr)
            execute_s = time.monotonic() - started
            copied: list[tuple[float, int]] = []
            new_replica = cluster.log_dir(3) / f"{bulk}-0"
            while cluster.topic_assignment(bulk).get(0) != TARGET:
                copied.append((time.monotonic() - started, dir_bytes(new_replica)))
                if copied[-1][0] > 1800:
                    raise RuntimeError("the move did not finish within 30 minutes")
                time.sleep(0.5)
            move_s = time.monotonic() - started
            time.sleep(2)
        finally:
            probe.stop()
        verified = strom("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                         "--reassignment-json-file", str(plan))
        copied.append((move_s, size))
        return {
            "throttle_bytes_per_s": throttle, "replication_quota_window_s": window_num,
            "partition_bytes": size, "move_s": round(move_s, 1), "execute_cli_s": round(execute_s, 1), "copy_mb_per_s": round(size / move_s / 1e6, 1),
            "most_mb_copied_in_one_window": round(most_in_any_span(copied, window_num) / 1e6, 1),
            "copied_mb_each_second": [round(next((b for t, b in copied if t >= s), size) / 1e6)
                                      for s in range(int(move_s) + 2)],
            "probe_before": probe.percentiles(started - 10, started),
            "probe_during": probe.percentiles(started, started + move_s), "probe_errors": probe.errors,
            "verify": verified.stdout.strip().splitlines()[-3:],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="MiB written to the partition that moves")
    parser.add_argument("--throttles", default="-1,50000000", help="comma-separated bytes/s; -1 = no throttle")
    parser.add_argument("--probe-rate", type=int, default=200, help="probe records per second (acks=all)")
    parser.add_argument("--window-num", type=int, default=11, help="replication.quota.window.num (1 s samples)")
    args = parser.parse_args()
    runs = []
    for throttle in (int(t) for t in args.throttles.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-reassign-") as tmp:
            runs.append(one_run(Path(tmp), args.mb, throttle, args.probe_rate, args.window_num))
    print(json.dumps({"bench": "reassign", "brokers": 3, "mib": args.mb, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
