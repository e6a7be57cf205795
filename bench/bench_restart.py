"""Restart benchmark: start-up time, RSS and descriptors with many partitions, after SIGTERM and kill -9.

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_restart.py                          # 2,000 partitions
    python bench/bench_restart.py --partitions 500 --records-per-partition 20
    python bench/bench_restart.py --src ../old/src         # run the broker from another source tree
    python bench/bench_restart.py --crash-first            # kill -9 before the first clean shutdown

SIGTERM time runs from the signal until the process exits. Each start also counts its
WARNING/ERROR lines about indexes or recovery (a clean restart should have none) and its
one-line crash-recovery summaries. Start-up time is measured from process start until the listener accepts a connection
(logs are loaded before the listener opens). RSS and descriptors are read from /proc
right after that.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402


def progress(msg: str) -> None:
    print(f"[restart-bench] {msg}", file=sys.stderr, flush=True)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def recovery_log_lines(b: BrokerProcess, since: int) -> dict[str, int]:
    """Counts of the start's WARNING/ERROR lines about indexes or recovery, and of INFO summaries."""
    with open(b.log_path, "rb") as f:
        f.seek(since)
        lines = f.read().decode(errors="replace").splitlines()
    loud = [ln for ln in lines if (" WARNING " in ln or " ERROR " in ln)
            and any(w in ln for w in ("index", "recover", "torn", "truncat"))]
    return {"recovery_warnings": len(loud), "recovery_info_lines": sum("not shut down cleanly" in ln for ln in lines)}


def timed_stop(b: BrokerProcess) -> float:
    """Seconds from SIGTERM until the process has exited (flush, checkpoints, clean-shutdown marker)."""
    since = b.log_path.stat().st_size
    started = time.monotonic()
    b.stop(timeout=300)
    elapsed = round(time.monotonic() - started, 2)
    with open(b.log_path, "rb") as f:
        f.seek(since)
        # The log manager's own account of its shutdown (closing logs, syncing), where it gives one.
        for line in f.read().decode(errors="replace").splitlines():
            if "strom.storage.log_manager: closed " in line:
                progress(line.split("log_manager: ", 1)[1])
    return elapsed


def timed_start(b: BrokerProcess) -> dict[str, float]:
    since = b.log_path.stat().st_size if b.log_path.exists() else 0
    started = time.monotonic()
    b.start(timeout=600)
    elapsed = time.monotonic() - started
    assert b.pid is not None
    # The listener is open: give the loop a moment and make sure it answers a connection.
    with socket.create_connection(("127.0.0.1", b.port), timeout=5):
        pass
    return {"start_s": round(elapsed, 2), "rss_mb": rss_mb(b.pid), "descriptors": descriptors(b.pid),
            **recovery_log_lines(b, since)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--records-per-partition", type=int, default=10)
    ap.add_argument("--record-size", type=int, default=1000)
    ap.add_argument("--crash-first", action="store_true",
                    help="kill -9 before the first clean shutdown (then SIGTERM and start again)")
    ap.add_argument("--src", help="source tree to run the broker from (PYTHONPATH), e.g. an older checkout")
    args = ap.parse_args()

    env = {"PYTHONPATH": str(Path(args.src).resolve())} if args.src else {}
    with tempfile.TemporaryDirectory(prefix="strom-restart-bench-") as tmp:
        b = BrokerProcess(tmp, env=env)
        try:
            result = run(b, args)
        finally:
            b.close()  # also when a step fails: no broker left running
    print(json.dumps(result, indent=2))


def run(b: BrokerProcess, args: argparse.Namespace) -> dict[str, object]:
    b.start(timeout=120)
    per_topic = args.partitions // args.topics
    # Creating thousands of partitions can take longer than librdkafka's default 60 s request timeout.
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 300_000})
    topics = [f"restart-{i}" for i in range(args.topics)]
    for name, fut in admin.create_topics([NewTopic(t, per_topic, 1) for t in topics],
                                         request_timeout=300).items():
        fut.result(timeout=300)
        progress(f"created {name}")
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * args.record_size
    for t in topics:
        for part in range(per_topic):
            for _ in range(args.records_per_partition):
                p.produce(t, value, partition=part)
        p.poll(0)
    assert p.flush(120) == 0
    # A group commit creates __consumer_offsets: its mostly empty partitions restart too.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "restart-bench", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topics[0], 0, 1)], asynchronous=False)
    c.close()
    del p, admin, c  # no client reconnect noise while the broker restarts
    progress(f"produced {args.records_per_partition} records to each of {args.partitions} partitions")
    result: dict[str, object] = {"partitions": args.partitions,
                                 "records_per_partition": args.records_per_partition,
                                 "src": args.src or "this checkout"}
    assert b.pid is not None
    result["running"] = {"rss_mb": rss_mb(b.pid), "descriptors": descriptors(b.pid)}
    if args.crash_first:
        # A crash before any clean shutdown: no index file of the segments written so far exists.
        b.kill9()
        result["after_kill9"] = timed_start(b)
        progress(f"after kill -9: {result['after_kill9']}")
        result["sigterm_s"] = timed_stop(b)
        result["after_sigterm"] = timed_start(b)
        progress(f"after SIGTERM: {result['after_sigterm']}")
        b.stop(timeout=300)
    else:
        # Clean first: the segments written since the broker started (most of them empty) are closed
        # by a shutdown for the first time, which is what a clean restart must find complete.
        result["sigterm_s"] = timed_stop(b)
        progress(f"SIGTERM took {result['sigterm_s']} s")
        result["after_sigterm"] = timed_start(b)
        progress(f"after SIGTERM: {result['after_sigterm']}")
        b.kill9()
        result["after_kill9"] = timed_start(b)
        progress(f"after kill -9: {result['after_kill9']}")
        result["sigterm_after_recovery_s"] = timed_stop(b)
    return result


if __name__ == "__main__":
    main()
