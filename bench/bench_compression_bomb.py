"""Compression bomb against the log cleaner: peak RSS growth of the broker and time to compact.

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_compression_bomb.py                 # gzip (~978 KB -> 950 MiB) and zstd (~92 KB -> 2 GiB)
    python bench/bench_compression_bomb.py --codec zstd

Each codec runs on a fresh broker; see tests/support/compression_bomb.py for the scenario.
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

from tests.support.compression_bomb import SCENARIOS, bomb_broker, run_bomb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codec", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for compaction")
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
    print(json.dumps({"benchmark": "compression_bomb", "results": results}, indent=2))


if __name__ == "__main__":
    main()
