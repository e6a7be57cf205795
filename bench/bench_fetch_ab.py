"""Fetch A/B: raw fetch throughput and broker CPU of an older commit next to the working tree.

Two brokers run at once, one on the older commit's sources (a temporary git worktree) and one on
this checkout's, loaded with the same pre-built batches; raw fetch rounds alternate between them
(and swap order every round), so a shared machine's drift lands on both. A fetch round reads every
partition from offset 0 to the high watermark with Fetch requests of the given size (sendfile).

    python bench/bench_fetch_ab.py 35ebbc1 --rounds 30

Prints JSON: per side and fetch size, the median MB/s over the rounds and the broker CPU per MB
summed over all rounds (one round is only a few clock ticks of CPU, so per-round figures are coarse).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


import bench_broker as bb  # noqa: E402

TOPIC = "bench-fetch"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref", help="the older commit")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--records", type=int, default=200_000, help="1 KiB records loaded per broker")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--fetch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[bb.MiB, 8 * bb.MiB])
    args = ap.parse_args()
    figures: dict[str, dict[int, list[tuple[float, float, float]]]] = {"before": {}, "after": {}}
    load = [round(os.getloadavg()[0], 2)]  # 1-minute load average at the start and the end
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
    load.append(round(os.getloadavg()[0], 2))
    out: dict[str, object] = {"benchmark": "fetch a/b", "ref": args.ref, "loadavg": load, "rounds": args.rounds,
                              "records": args.records, "partitions": args.partitions}
    for side, by_size in figures.items():
        for size, vals in by_size.items():
            out[f"{side} {size // bb.MiB}MiB"] = {
                "median_mb_s": statistics.median(v[0] for v in vals),
                "broker_cpu_ms_per_mb": round(1000 * sum(v[1] for v in vals) / sum(v[2] for v in vals), 4)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
