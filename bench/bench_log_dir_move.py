"""Moving a partition between two log dirs of one broker (AlterReplicaLogDirs) under produce load.

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_log_dir_move.py                      # 200 MiB, no throttle
    python bench/bench_log_dir_move.py --mb 200 --throttle 50000000

A broker with two log dirs; partition 0 of a two-partition topic is filled with ``--mb`` MiB of 1 KiB
records, then moved to the other dir while a canary producer (acks=all) writes one 1 KiB record
every 5 ms to each partition. Reported: the move's wall time and copy rate, and the canary's
produce latency (p50/p99/max) before and during the move, for the moving partition (whose writers
wait once, at the swap) and the other one; plus the broker's loop-stall warnings.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.protocol.admin import AlterReplicaLogDirsRequest, DescribeLogDirsRequest  # noqa: E402
from tests.integration.test_api_version_matrix import call  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

TOPIC = "bench-move"
RECORD = b"x" * 1024


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": round(percentile(values, 0.5), 2), "p99_ms": round(percentile(values, 0.99), 2),
            "max_ms": round(max(values), 2) if values else float("nan")}


class Canary:
    """One record every ``interval`` to each partition; latency per delivered record, by partition and phase."""

    def __init__(self, bootstrap: str, interval: float = 0.005) -> None:
        self.phase = "before"
        self.latencies: dict[tuple[str, int], list[float]] = {}
        self.errors = 0
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                   "enable.idempotence": True})
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in (0, 1):
                sent, phase = time.monotonic(), self.phase

                def done(err: Any, _msg: Any, sent: float = sent, phase: str = phase, p: int = p) -> None:
                    if err is not None:
                        self.errors += 1
                    else:
                        self.latencies.setdefault((phase, p), []).append((time.monotonic() - sent) * 1000)

                self._producer.produce(TOPIC, RECORD, partition=p, on_delivery=done)
            self._producer.poll(self._interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(60)


def fill(bootstrap: str, mb: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": 1})
    for _ in range(mb * 1024):
        while True:
            try:
                producer.produce(TOPIC, RECORD, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)


def future_replicas(b: BrokerProcess) -> list[Any]:
    resp = call(b, DescribeLogDirsRequest(topics=None), 1)
    return [p for r in resp.results for t in r.topics if t.name == TOPIC for p in t.partitions if p.is_future_key]


def run(mb: int, throttle: int | None, baseline_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="strom-bench-move-") as tmp:
        d1, d2 = Path(tmp) / "data", Path(tmp) / "data2"
        overrides: dict[str, object] = {"log.dirs": f"{d1},{d2}"}
        if throttle:
            overrides["replica.alter.log.dirs.io.max.bytes.per.second"] = throttle
        b = BrokerProcess(tmp, overrides)
        b.start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=30)
            src = d1 if (d1 / f"{TOPIC}-0").is_dir() else d2
            dst = d2 if src == d1 else d1
            print(f"filling {mb} MiB", file=sys.stderr)
            fill(b.bootstrap, mb)
            canary = Canary(b.bootstrap)
            time.sleep(baseline_s)
            canary.phase = "during"
            started = time.monotonic()
            move = AlterReplicaLogDirsRequest.AlterReplicaLogDir
            resp = call(b, AlterReplicaLogDirsRequest(dirs=[move(path=str(dst), topics=[
                move.AlterReplicaLogDirTopic(name=TOPIC, partitions=[0])])]), 1)
            assert resp.results[0].partitions[0].error_code == 0
            time.sleep(0.2)
            while future_replicas(b) or not (dst / f"{TOPIC}-0").is_dir():
                time.sleep(0.05)
            elapsed = time.monotonic() - started
            canary.phase = "after"
            time.sleep(1)
            canary.stop()
            stalls = b.log_path.read_text(errors="replace").count("stall")
        finally:
            b.close()
    return {
        "mib": mb, "throttle_bytes_per_s": throttle, "move_s": round(elapsed, 2),
        "copy_mib_per_s": round(mb / elapsed, 1),
        "canary_errors": canary.errors,
        "moving_partition": {ph: summary(canary.latencies.get((ph, 0), [])) for ph in ("before", "during")},
        "other_partition": {ph: summary(canary.latencies.get((ph, 1), [])) for ph in ("before", "during")},
        "loop_stall_warnings": stalls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--throttle", type=int, default=None, help="replica.alter.log.dirs.io.max.bytes.per.second")
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(json.dumps(run(args.mb, args.throttle, args.baseline_seconds), indent=2))


if __name__ == "__main__":
    main()
