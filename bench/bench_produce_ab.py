"""Produce A/B: small-request rate and broker CPU of an older commit next to the working tree.

Two brokers run at once, one on the older commit's sources (a temporary git worktree) and one on
this checkout's; rounds alternate between them (and swap order every round), so a shared machine's
drift lands on both. A round is one timed burst of tiny pipelined Produce requests (what the
network layer's per-request cost shows in) and one load of 1 MiB batches.

    python bench/bench_produce_ab.py main --rounds 10

Prints JSON: per side, the median requests/s and MB/s over the rounds, the broker CPU per
request and per MB summed over all rounds (to the nanosecond, see bench_broker.cpu_between), and
the quartiles of the per-round CPU per MB (their spread is the machine's noise), plus the load
average at the start and the end.
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

TOPIC = "bench-produce"


def quartiles(values: list[float]) -> list[float]:
    """Lower quartile, median and upper quartile, rounded."""
    return [round(q, 4) for q in statistics.quantiles(values, n=4)] if len(values) > 1 else [round(v, 4) for v in values]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref", help="the older commit")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=2.0, help="small-request burst per round")
    ap.add_argument("--window", type=int, default=64, help="small requests in flight")
    ap.add_argument("--record-size", type=int, default=100, help="value bytes of a small request's record")
    ap.add_argument("--mb", type=int, default=50, help="MB of 1 MiB batches loaded per round")
    args = ap.parse_args()
    small: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    large: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    load = [round(os.getloadavg()[0], 2)]  # 1-minute load average at the start and the end
    with tempfile.TemporaryDirectory(prefix="strom-produce-ab-") as tmp, \
            bb.ab_brokers(args.ref, Path(tmp), TOPIC, 1) as brokers:
        for k in range(args.rounds):
            for side in ("before", "after") if k % 2 == 0 else ("after", "before"):
                b = brokers[side]
                assert b.pid is not None
                r = bb.raw_small_produce(b.port, b.pid, TOPIC, args.record_size, args.seconds, args.window)
                big = bb.raw_produce(b.port, b.pid, TOPIC, 1, args.mb * 1_000_000 // 1024, 1024, bb.MiB, 4)
                if r["errors"] or big["errors"]:
                    raise SystemExit(f"{side}: produce errors")
                small[side].append(r)
                large[side].append(big)
    load.append(round(os.getloadavg()[0], 2))
    out: dict[str, object] = {"benchmark": "produce a/b", "ref": args.ref, "loadavg": load, "rounds": args.rounds,
                              "small": {"seconds": args.seconds, "window": args.window,
                                        "record_size": args.record_size},
                              "large": {"mb_per_round": args.mb, "batch_bytes": bb.MiB, "window": 4}}
    for side in ("before", "after"):
        s, g = small[side], large[side]
        cpu_s = sum(r["broker_cpu_us_per_request"] * r["requests"] for r in s) / 1e6
        out[side] = {
            "small_median_requests_s": statistics.median(r["requests_s"] for r in s),
            "small_broker_cpu_us_per_request": round(1e6 * cpu_s / sum(r["requests"] for r in s), 2),
            "large_median_mb_s": statistics.median(r["mb_s"] for r in g),
            "large_broker_cpu_ms_per_mb": round(1000 * sum(r["broker_cpu_s"] for r in g) / sum(r["mb"] for r in g),
                                                4),
            # per-round spread: how far apart two rounds of one side land on this machine
            "large_broker_cpu_ms_per_mb_rounds": quartiles([1000 * r["broker_cpu_s"] / r["mb"] for r in g]),
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
