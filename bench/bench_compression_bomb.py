"""Compression bomb against the log cleaner: peak RSS growth of the broker and time to compact.

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_compression_bomb.py                 # gzip (~978 KB -> 950 MiB) and zstd (~92 KB -> 2 GiB)
    python bench/bench_compression_bomb.py --codec zstd

Each codec runs on a fresh broker; see tests/support/compression_bomb.py for the scenario. Last,
the zstd bomb goes to a topic with compression.type=gzip: the broker recompresses 2 GiB, and the
longest Metadata round trip on another connection meanwhile shows whether that held its event loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.compression_bomb import SCENARIOS, bomb_broker, run_bomb, run_recompression  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codec", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for compaction")
    parser.add_argument("--no-recompression", action="store_true",
                        help="skip the zstd bomb sent to a compression.type=gzip topic")
    args = parser.parse_args()
    results = []
    for codec in args.codec or ["gzip", "zstd"]:
        with tempfile.TemporaryDirectory(prefix="bomb-bench-") as tmp:
            broker = bomb_broker(tmp).start()
            try:
                print(f"[bomb-bench] {codec} ...", file=sys.stderr, flush=True)
                results.append(run_bomb(broker, codec, args.timeout).as_dict())
            finally:
                broker.close()
    recompression = None
    if not args.no_recompression:
        with tempfile.TemporaryDirectory(prefix="bomb-bench-") as tmp:
            broker = bomb_broker(tmp).start()
            try:
                print("[bomb-bench] recompression ...", file=sys.stderr, flush=True)
                recompression = run_recompression(broker, args.timeout)
            finally:
                broker.close()
    print(json.dumps({"benchmark": "compression_bomb", "results": results, "recompression": recompression},
                     indent=2))


if __name__ == "__main__":
    main()
