"""Old message formats: produce and fetch throughput of a message-format-v1 client next to a v2 client.

The same client library (kafka-python) pinned to ``api_version=(0, 10, 1)`` (Produce v2 with magic 1
message sets, up-converted by the broker; Fetch v3, down-converted) and to ``(2, 0)`` (Produce v3+ with
v2 batches, stored as sent; Fetch v4+, sendfile), against one broker, rounds alternating so a shared
machine's drift lands on both. The client's own cost is the same on both sides; the broker CPU per
thousand records is where conversion shows.

    python bench/bench_old_formats.py --records 20000 --rounds 3

Prints JSON: per side, median records/s of produce and of fetch, broker CPU ms per 1000 records, and the
broker's peak resident memory while the consumer reads (its high-water mark is reset before each read, so
the figure is the read's own peak: for the v1 side, what down-conversion holds in memory at once).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

import bench_broker as bb  # noqa: E402

SIDES = {"v1": (0, 10, 1), "v2": (2, 0)}


def produce(bootstrap: str, topic: str, api_version: tuple, n: int, size: int, codec: str | None) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, linger_ms=10, batch_size=256 * 1024,
                      compression_type=codec, acks=1)
    value = b"x" * size
    for i in range(n):
        p.send(topic, key=str(i).encode(), value=value)
    p.flush(timeout=300)
    p.close()


def consume(bootstrap: str, topic: str, api_version: tuple, n: int) -> None:
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, api_version=api_version, auto_offset_reset="earliest",
                      enable_auto_commit=False, group_id=None, fetch_max_bytes=8 * 1024 * 1024,
                      max_partition_fetch_bytes=4 * 1024 * 1024, consumer_timeout_ms=30000)
    seen = 0
    deadline = time.monotonic() + 600
    while seen < n and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=1000, max_records=100_000).values():
            seen += len(records)
    c.close()
    if seen < n:
        raise RuntimeError(f"read {seen} of {n} records")


def reset_peak_rss(pid: int) -> None:
    """Reset the process's resident-set high-water mark (VmHWM) to its current size."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


def timed(pid: int, fn, *args) -> tuple[float, float]:  # noqa: ANN001
    cpu0, t0 = bb.cpu_seconds(pid), time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0, bb.cpu_seconds(pid) - cpu0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=200, help="value bytes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compression", default=None, help="gzip, lz4 or none")
    args = ap.parse_args()
    codec = None if args.compression in (None, "none") else args.compression
    figures: dict[str, dict[str, list[float]]] = {s: {"produce": [], "fetch": [], "pcpu": [], "fcpu": [],
                                                      "rss": []} for s in SIDES}
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp)) as broker:
        pid = broker.pid
        assert pid is not None
        for r in range(args.rounds):
            order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
            for side in order:
                topic = f"bench-{side}-{r}"
                bb.create_topic(broker.bootstrap, topic, 1)
                wall, cpu = timed(pid, produce, broker.bootstrap, topic, SIDES[side], args.records, args.size, codec)
                figures[side]["produce"].append(args.records / wall)
                figures[side]["pcpu"].append(cpu * 1000 / (args.records / 1000))
                reset_peak_rss(pid)
                wall, cpu = timed(pid, consume, broker.bootstrap, topic, SIDES[side], args.records)
                figures[side]["rss"].append(peak_rss_mb(pid))
                figures[side]["fetch"].append(args.records / wall)
                figures[side]["fcpu"].append(cpu * 1000 / (args.records / 1000))
                bb.log(f"round {r} {side}: produce {figures[side]['produce'][-1]:.0f}/s "
                       f"fetch {figures[side]['fetch'][-1]:.0f}/s peak rss {figures[side]['rss'][-1]:.0f} MB")
    out = {side: {"client_api_version": ".".join(map(str, SIDES[side])),
                  "produce_records_s": round(statistics.median(f["produce"])),
                  "fetch_records_s": round(statistics.median(f["fetch"])),
                  "broker_cpu_ms_per_1k_produced": round(statistics.median(f["pcpu"]), 2),
                  "broker_cpu_ms_per_1k_fetched": round(statistics.median(f["fcpu"]), 2),
                  "broker_peak_rss_mb_while_fetching": round(statistics.median(f["rss"]), 1)}
           for side, f in figures.items()}
    print(json.dumps({"records": args.records, "value_bytes": args.size, "compression": codec or "none",
                      "rounds": args.rounds, "sides": out}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
