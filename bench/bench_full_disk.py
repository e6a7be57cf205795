"""One broker's log dir fills under load: does the rest of the cluster keep taking writes?

ZooKeeper + 3 brokers; broker 3's log dir is a small tmpfs (needs root to mount). A topic with
RF 3, min.insync.replicas 2 and 6 partitions takes 1 KiB records at about 2 MB/s from an
idempotent acks=all producer until broker 3's dir is full, and for a while after. Prints JSON:

- fill_s: seconds from the start of the load until broker 3's dir is full;
- max_gap_after_fill_s: per partition, the longest time between two acknowledgements from the
  last one before the fill to the end of the run (and the worst of them);
- delivery_errors: records the producer gave up on;
- log_growth_bytes_per_min: how fast broker 3's own log file grew after the fill;
- isr_without_full_broker: whether every partition's ISR in ZooKeeper lost broker 3;
- sigterm_exit_s: SIGTERM to exit of broker 3 on the full disk, and its exit status;
- rejoin_s: after growing the tmpfs and restarting broker 3, until every ISR is full again.

Usage: python bench/bench_full_disk.py [--size-mb 20] [--rate-mb 2] [--after-s 60]
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402

FULL = 3
PARTITIONS = 6
RECORD = 1024


def fill(directory: Path) -> Path:
    """Take whatever space is left with a filler file (the load may have taken most of it already)."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 65536)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    return path
                raise
    finally:
        os.close(fd)


class Load:
    """acks=all idempotent producer at a fixed rate; ack times per partition."""

    def __init__(self, bootstrap: str, topic: str, rate_bytes: float) -> None:
        self.topic = topic
        self.interval = RECORD / rate_bytes
        self.acks: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.errors = 0
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120_000, "log_level": 0})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acks[msg.partition()].append(time.monotonic())
        else:
            self.errors += 1

    def _run(self) -> None:
        value = b"x" * RECORD
        n = 0
        start = time.monotonic()
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, value, partition=n % PARTITIONS, on_delivery=self._on_delivery)
            except BufferError:
                self.producer.poll(0.05)
                continue
            n += 1
            self.producer.poll(0)
            delay = start + n * self.interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.producer.flush(150)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=20)
    parser.add_argument("--rate-mb", type=float, default=2.0)
    parser.add_argument("--after-s", type=float, default=60.0, help="load after the fill")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print(json.dumps({"skipped": "mounting a tmpfs needs root"}))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-full-disk-"))
    cluster = ClusterProcess(work, 3, session_timeout_ms=6000, overrides={"auto.leader.rebalance.enable": "false"})
    mount = cluster.log_dir(FULL)
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.size_mb}m", "tmpfs", str(mount)], check=True)
    out: dict[str, Any] = {"size_mb": args.size_mb, "rate_mb_s": args.rate_mb, "partitions": PARTITIONS}
    try:
        cluster.start()
        topic = "full-disk"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
        for p in range(PARTITIONS):
            cluster.wait_isr(topic, p, [1, 2, 3])
        out["led_by_full_broker"] = sum(1 for p in range(PARTITIONS)
                                        if (st := cluster.partition_state(topic, p)) and st.leader == FULL)
        log_path = cluster.broker(FULL).log_path
        load = Load(cluster.bootstrap, topic, args.rate_mb * 1_000_000)
        started = time.monotonic()
        load.thread.start()
        filler = None
        while filler is None:
            if time.monotonic() - started > 300:
                raise RuntimeError("broker 3's log dir never filled")
            if os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize < 2_000_000:
                filler = fill(mount)  # the last blocks: the disk is full from here on
            time.sleep(0.05)
        filled = time.monotonic()
        out["fill_s"] = round(filled - started, 2)
        log_at_fill = log_path.stat().st_size
        time.sleep(args.after_s)
        log_growth = log_path.stat().st_size - log_at_fill
        load.stop.set()
        load.thread.join(180)
        end = time.monotonic()
        gaps = {}
        for p, times in load.acks.items():
            before = [t for t in times if t <= filled]
            after = [t for t in times if t > filled]
            points = ([before[-1]] if before else [filled]) + after + [min(end, filled + args.after_s)]
            gaps[p] = round(max(b - a for a, b in zip(points, points[1:], strict=False)), 2)
        out["max_gap_after_fill_s"] = {"per_partition": gaps, "worst": max(gaps.values())}
        out["acks_after_fill"] = sum(1 for ts in load.acks.values() for t in ts if t > filled)
        out["delivery_errors"] = load.errors
        out["log_growth_bytes_per_min"] = round(log_growth * 60 / args.after_s)
        states = {p: cluster.partition_state(topic, p) for p in range(PARTITIONS)}
        out["isr_without_full_broker"] = all(s is not None and FULL not in s.isr and s.leader != FULL
                                             for s in states.values())
        t0 = time.monotonic()
        rc = cluster.stop(FULL, timeout=120)
        out["sigterm_exit_s"] = round(time.monotonic() - t0, 2)
        out["sigterm_exit_status"] = rc
        # Space comes back (the volume grows; the filler alone is too little: the other replicas moved on).
        subprocess.run(["mount", "-o", f"remount,size={args.size_mb * 20}m", str(mount)], check=True)
        t0 = time.monotonic()
        try:
            cluster.start_broker(FULL)
            for p in range(PARTITIONS):
                cluster.wait_isr(topic, p, [1, 2, 3], timeout=180)
            out["rejoin_s"] = round(time.monotonic() - t0, 2)
        except (AssertionError, RuntimeError) as exc:
            out["rejoin_s"] = None
            out["rejoin_error"] = str(exc).splitlines()[0][:300]
    finally:
        cluster.close()
        subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
