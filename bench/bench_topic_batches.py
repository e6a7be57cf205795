"""Topic creation cost as a single broker fills up: does a metadata change cost O(all topics)?

Starts one broker (embedded metadata, no ZooKeeper) and creates `--batches` batches of `--topics`
topics × `--partitions` partitions, one CreateTopics request per batch through confluent-kafka's
AdminClient. Each batch is timed from the request until every new partition has a leader in the
broker's Metadata answer (asked for the batch's topics only, so the check itself does not grow).
The target is a last batch no slower than the first + 20 %.

Prints JSON per variant: seconds per batch and the ratio last/first, and the same for the broker's
CPU time (user + system); with --rounds, per batch the best of the rounds (a busy machine only adds).
Usage: python bench/bench_topic_batches.py [--batches 10] [--topics 10] [--partitions 100]
       [--src OTHER/src]   (run the broker from another source tree, e.g. an older commit)
       [--compare OLD/src --rounds 3]  (old and new brokers in alternating rounds, same run)
       [--profile DIR]     (sample the broker with py-spy while the batches run; flame graph in DIR)
       [--wait-quiet 20]   (on a shared machine: before each batch wait for quiet, at most 20 s)
       [--micro]           (in-process CPU per batch of the metadata store and log placement only)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_broker import wait_quiet  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402


def all_led(admin: AdminClient, topics: list[str], partitions: int) -> bool:
    """True once every partition of every topic has a leader in the broker's Metadata answer."""
    for t in topics:
        md = admin.list_topics(topic=t, timeout=30).topics.get(t)
        if md is None or md.error is not None or len(md.partitions) != partitions:
            return False
        if any(p.leader < 0 for p in md.partitions.values()):
            return False
    return True


def cpu_seconds(pid: int) -> float:
    """The broker's user + system CPU time so far (steadier than wall time on a shared machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_profiler(pid: int, out_dir: str) -> subprocess.Popen[bytes] | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("py-spy not found; running without --profile", file=sys.stderr)
        return None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
                             "--output", str(Path(out_dir) / "broker.collapsed")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_once(src: str | None, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """One fresh broker, all batches: (wall seconds, broker CPU seconds) per batch."""
    env = {"PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), str(ROOT)])} if src else {}
    seconds: list[float] = []
    cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="strom-bench-") as tmp:
        broker = BrokerProcess(tmp, env=env).start()
        profiler = start_profiler(broker.pid, args.profile) if args.profile else None
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
            for b in range(args.batches):
                names = [f"batch{b}-topic{i}" for i in range(args.topics)]
                if args.wait_quiet:
                    wait_quiet(args.wait_quiet)
                start, cpu_start = time.monotonic(), cpu_seconds(broker.pid)
                futures = admin.create_topics([NewTopic(t, args.partitions, 1) for t in names],
                                              operation_timeout=120, request_timeout=180)
                for f in futures.values():
                    f.result(240)
                deadline = start + 300
                while not all_led(admin, names, args.partitions):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"batch {b}: topics not led within 300 s")
                    time.sleep(0.01)
                seconds.append(time.monotonic() - start)
                cpu.append(cpu_seconds(broker.pid) - cpu_start)
                print(f"{src or 'this checkout'} batch {b}: {seconds[-1]:.3f}s, broker CPU {cpu[-1]:.3f}s",
                      file=sys.stderr)
        finally:
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(30)
            broker.stop()
    return seconds, cpu


def summary(runs: list[tuple[list[float], list[float]]]) -> dict[str, object]:
    """Per batch, the best of the rounds (a shared machine only ever adds time), and last/first of those."""
    best = [min(r[0][b] for r in runs) for b in range(len(runs[0][0]))]
    best_cpu = [min(r[1][b] for r in runs) for b in range(len(runs[0][1]))]
    return {
        "seconds_per_batch": [round(s, 3) for s in best],
        "last_over_first": round(best[-1] / best[0], 3),
        "broker_cpu_s_per_batch": [round(c, 3) for c in best_cpu],
        "cpu_last_over_first": round(best_cpu[-1] / best_cpu[0], 3),
        "rounds": [{"seconds": [round(s, 3) for s in r[0]], "cpu": [round(c, 3) for c in r[1]]} for r in runs],
    }


def micro(args: argparse.Namespace) -> dict[str, list[float]]:
    """In-process CPU seconds per batch of the two steps that used to grow with every topic: recording
    the topics in the embedded metadata store, and picking a log dir for each new partition. Uses the
    `strom` on PYTHONPATH (point it at another tree to measure that one); steadier than the broker."""
    from strom.metadata.embedded import EmbeddedMetadataStore
    from strom.storage.log_manager import LogManager

    store_s: list[float] = []
    place_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="strom-bench-") as tmp:
        store = EmbeddedMetadataStore(tmp, 0)
        logs = LogManager([tmp])
        for b in range(args.batches):
            start = time.process_time()
            for i in range(args.topics):
                store.create_topic(f"batch{b}-topic{i}", {p: [0] for p in range(args.partitions)}, {})
            store_s.append(round(time.process_time() - start, 4))
            start = time.process_time()
            for i in range(args.topics * args.partitions):
                logs._log_dir_of[(f"batch{b}", i)] = logs._next_log_dir()  # placement only, no files
            place_s.append(round(time.process_time() - start, 4))
    return {"metadata_store_cpu_s_per_batch": store_s, "log_placement_cpu_s_per_batch": place_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1, help="fresh brokers per variant; per batch the best counts")
    ap.add_argument("--src", help="source tree to run the broker from (PYTHONPATH), e.g. an older checkout")
    ap.add_argument("--compare", metavar="OLD_SRC",
                    help="also run the broker from this source tree, alternating rounds with --src")
    ap.add_argument("--profile", metavar="DIR", help="sample the broker with py-spy during the batches")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each batch, wait up to this long for other processes to go quiet")
    ap.add_argument("--micro", action="store_true", help="only the in-process figures of the growing steps")
    args = ap.parse_args()
    if args.micro:
        print(json.dumps(micro(args)))
        return
    variants = {args.src or "this checkout": args.src}
    if args.compare:
        variants = {args.compare: args.compare, **variants}
    runs: dict[str, list[tuple[list[float], list[float]]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, src in variants.items():
            runs[name].append(run_once(src, args))
    print(json.dumps({
        "batches": args.batches, "topics_per_batch": args.topics, "partitions_per_topic": args.partitions,
        **{name: summary(r) for name, r in runs.items()},
    }))


if __name__ == "__main__":
    main()
