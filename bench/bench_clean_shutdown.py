"""Clean shutdown and the next load of the log manager alone, in process: N logs that each got a little data.

Prints one JSON document on stdout:

    python bench/bench_clean_shutdown.py                         # 10,000 logs, 10 records of 1 KB each
    python bench/bench_clean_shutdown.py --logs 2000 --src ../old/src   # another source tree's storage

Times LogManager.shutdown (flush and close every log, checkpoints, the clean-shutdown marker), the
load_logs that follows it, and a second shutdown with nothing written since; counts the fsyncs of each
shutdown and the files the first one created in the partition directories. No broker, no network: the
storage layer's share of a SIGTERM and a start (bench_restart.py measures the whole broker).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=10, help="records per log, in one batch")
    ap.add_argument("--record-size", type=int, default=1000)
    ap.add_argument("--src", help="source tree to import strom from, e.g. an older checkout")
    ap.add_argument("--dir", help="parent directory for the log dir (default: the system's temp dir)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.src).resolve()) if args.src else str(Path(__file__).resolve().parents[1] / "src"))
    from strom.protocol.record_batch import build_batch
    from strom.storage.log_manager import LogManager

    fsyncs: Counter[str] = Counter()
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs["fsync"] += 1
        real_fsync(fd)

    os.fsync = counting_fsync  # type: ignore[assignment]  # counted, still done
    log_dir = tempfile.mkdtemp(prefix="strom-clean-shutdown-bench-", dir=args.dir)
    try:
        mgr = LogManager([log_dir])
        mgr.load_logs()
        batch = build_batch([(None, b"x" * args.record_size, [], 1_000 + i) for i in range(args.records)])
        for p in range(args.logs):
            mgr.get_or_create_log("bench", p).append_as_leader(batch, 0)
        before = sum(len(os.listdir(os.path.join(log_dir, d))) for d in os.listdir(log_dir)
                     if os.path.isdir(os.path.join(log_dir, d)))
        fsyncs.clear()
        started = time.monotonic()
        mgr.shutdown()
        shutdown_s = time.monotonic() - started
        shutdown_fsyncs = fsyncs["fsync"]
        after = sum(len(os.listdir(os.path.join(log_dir, d))) for d in os.listdir(log_dir)
                    if os.path.isdir(os.path.join(log_dir, d)))
        started = time.monotonic()
        mgr = LogManager([log_dir])
        mgr.load_logs()
        load_s = time.monotonic() - started
        fsyncs.clear()
        started = time.monotonic()
        mgr.shutdown()
        second_s = time.monotonic() - started
        result = {
            "logs": args.logs, "records_per_log": args.records, "src": args.src or "this checkout",
            "shutdown_s": round(shutdown_s, 2), "shutdown_fsyncs": shutdown_fsyncs,
            "files_created_by_shutdown": after - before,
            "load_s": round(load_s, 2),
            "second_shutdown_s": round(second_s, 2), "second_shutdown_fsyncs": fsyncs["fsync"],
        }
    finally:
        os.fsync = real_fsync  # type: ignore[assignment]
        shutil.rmtree(log_dir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
