"""How long a segment roll holds the appending thread (the event loop) for the producer-state snapshot.

In process, on a real disk: a log with `--producers` idempotent producers (five batches remembered
each) is rolled `--rolls` times; each roll is timed on the calling thread, as an append that
crosses segment.bytes would pay it on the loop. The log has a storage executor, as every log a
broker's LogManager owns; the `strom` package on PYTHONPATH is measured, so the same script
compares two checkouts (before: the snapshot file written by the roll itself).

Prints JSON. Usage: python bench/bench_roll_snapshot.py [--producers 1000] [--rolls 200] [--dir .]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strom.protocol.record_batch import build_batch
from strom.storage.log import Log
from strom.storage.log_config import LogConfig


def run(producers: int, rolls: int, directory: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="storage-bench")
        log = Log(str(Path(tmp) / "bench-0"), LogConfig.from_props({}), now_ms=0)
        log.storage_executor = executor
        for pid in range(producers):
            for seq in range(5):
                log.append_as_leader(build_batch([(None, b"v", [], 1)], producer_id=pid, producer_epoch=0,
                                                 base_sequence=seq), 0)
        held_ms: list[float] = []
        for _ in range(rolls):
            log.append_as_leader(build_batch([(None, b"v", [], 1)]), 0)  # the new segment is not empty
            started = time.perf_counter()
            log.roll()
            held_ms.append((time.perf_counter() - started) * 1000)
        executor.shutdown(wait=True)
        log.close()
    held_ms.sort()
    return {"producers": producers, "rolls": rolls,
            "roll_held_ms_p50": round(statistics.median(held_ms), 3),
            "roll_held_ms_p99": round(held_ms[int(len(held_ms) * 0.99) - 1], 3),
            "roll_held_ms_max": round(held_ms[-1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=1000)
    parser.add_argument("--rolls", type=int, default=200)
    parser.add_argument("--dir", default=".")
    args = parser.parse_args()
    print(json.dumps(run(args.producers, args.rolls, args.dir)))


if __name__ == "__main__":
    main()
