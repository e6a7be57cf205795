"""Produce A/B in instructions: user-space instructions per small Produce request, older commit against the working tree.

bench_produce_ab.py measures broker CPU time, which on a shared 2-core machine moves by more than
the few per cent a change to the request path is worth. This one runs each broker under
valgrind's callgrind with instrumentation off, switches it on only for a timed burst of tiny
pipelined Produce requests, then for a load of 1 MiB batches (bench_produce_ab's two phases) and
a read of the partition with 1 MiB fetches, and divides the instructions executed by the requests
answered and the MB written or read: figures other processes' load does not move (kernel time is
not in them). What the idle broker runs by itself (timers, the stall watchdog), measured over a
quiet stretch, is subtracted pro rata.

    python bench/bench_produce_instructions.py 0814a6f --rounds 2

Needs valgrind (Debian package `valgrind`). Under callgrind the broker runs ~50x slower, so a
burst answers a few thousand requests. Prints JSON: per side and round, requests, instructions per
request and per MB produced and fetched, and after/before of the round medians.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


from tests.support.broker import BrokerProcess  # noqa: E402

import bench_broker as bb  # noqa: E402

TOPIC = "bench-produce"


class CallgrindBroker(BrokerProcess):
    """A broker under callgrind, instrumentation off except between ``instrument(True)`` and ``instrument(False)``."""

    def __init__(self, data_dir: Path, out_dir: Path, name: str, env: dict[str, str]) -> None:
        super().__init__(data_dir, env=env)
        self.out_file = out_dir / f"{name}.callgrind"
        self._read: set[Path] = set()  # dumps already counted

    def command(self) -> list[str]:
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.out_file}",
                *super().command()]

    def instrument(self, on: bool) -> None:
        subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(self.pid)], check=True,
                       capture_output=True)

    def instructions(self) -> int:
        """Instructions counted since the previous call (callgrind zeroes its counters at each dump)."""
        subprocess.run(["callgrind_control", "-d", str(self.pid)], check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for dump in sorted(set(self.out_file.parent.glob(f"{self.out_file.name}.*")) - self._read):
                for line in dump.read_text(errors="replace").splitlines():
                    if line.startswith("totals:"):  # the last line: the dump is complete
                        self._read.add(dump)
                        return int(line.split()[1])
            time.sleep(0.5)
        raise RuntimeError(f"no new callgrind dump in {self.out_file.parent}")

    def measure(self, load: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], int]:
        """Run ``load`` instrumented: its figures and the instructions it cost the broker."""
        self.instructions()  # what ran since the last measurement is not this load's
        self.instrument(True)
        figures = load()
        self.instrument(False)
        return figures, self.instructions()


def measure_round(src: Path, tmp: Path, name: str, args: argparse.Namespace) -> dict[str, float]:
    """One broker on ``src``: a warm-up, then an idle stretch, the small burst, the 1 MiB load and a
    read of it all with 1 MiB fetches (sendfile), each instrumented."""
    (tmp / name).mkdir()
    broker = CallgrindBroker(tmp / name, tmp, name, {"PYTHONPATH": str(src)})
    broker.start(timeout=600)
    try:
        pid = broker.pid
        assert pid is not None
        bb.create_topic(broker.bootstrap, TOPIC, 1)
        bb.raw_small_produce(broker.port, pid, TOPIC, args.record_size, 3.0, args.window)
        idle, idle_ir = broker.measure(functools.partial(idle_for, args.idle_seconds))
        small, small_ir = broker.measure(functools.partial(
            bb.raw_small_produce, broker.port, pid, TOPIC, args.record_size, args.seconds, args.window))
        large, large_ir = broker.measure(functools.partial(
            bb.raw_produce, broker.port, pid, TOPIC, 1, args.mb * 1_000_000 // 1024, 1024, bb.MiB, 4))
        fetch, fetch_ir = broker.measure(functools.partial(bb.raw_fetch, broker.port, pid, TOPIC, 1, bb.MiB))
    finally:
        broker.stop(timeout=120)
    if small["errors"] or large["errors"] or fetch["errors"]:
        raise SystemExit(f"{name}: produce or fetch errors")
    # The broker's own timers and threads run whatever the load: their share, scaled to each load's
    # duration, is taken out, or the slower of two brokers would look dearer per request.
    idle_per_s = idle_ir / idle["seconds"]
    return {"small_requests": small["requests"],
            "small_instructions_per_request": round((small_ir - idle_per_s * small["seconds"]) / small["requests"]),
            "large_mb": large["mb"],
            "large_instructions_per_mb": round((large_ir - idle_per_s * large["seconds"]) / large["mb"]),
            "fetch_mb": fetch["mb"],
            "fetch_instructions_per_mb": round((fetch_ir - idle_per_s * fetch["seconds"]) / fetch["mb"]),
            "idle_instructions_per_s": round(idle_per_s)}


def idle_for(seconds: float) -> dict[str, Any]:
    """No load: how many instructions the broker runs by itself (timers, watchdog) in ``seconds``."""
    start = time.monotonic()
    time.sleep(seconds)
    return {"seconds": time.monotonic() - start}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref", help="the older commit")
    ap.add_argument("--rounds", type=int, default=2, help="bursts per side (fresh broker each)")
    ap.add_argument("--seconds", type=float, default=10.0, help="instrumented burst")
    ap.add_argument("--window", type=int, default=64, help="small requests in flight")
    ap.add_argument("--record-size", type=int, default=100, help="value bytes of a small request's record")
    ap.add_argument("--mb", type=int, default=20, help="MB of 1 MiB batches loaded per round (instrumented)")
    ap.add_argument("--idle-seconds", type=float, default=5.0, help="instrumented stretch without load")
    args = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("needs valgrind (callgrind and callgrind_control)")
    rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="strom-produce-instr-") as tmp_name:
        tmp = Path(tmp_name)
        old = tmp / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(old), args.ref],
                       check=True)
        try:
            for k in range(args.rounds):
                for side in ("before", "after") if k % 2 == 0 else ("after", "before"):
                    rounds[side].append(measure_round(old / "src" if side == "before" else ROOT / "src",
                                                      tmp, f"{side}-{k}", args))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    out: dict[str, Any] = {"benchmark": "produce a/b, instructions", "before": args.ref,
                           "small": {"seconds": args.seconds, "window": args.window,
                                     "record_size": args.record_size},
                           "large": {"mb_per_round": args.mb, "batch_bytes": bb.MiB, "window": 4},
                           "fetch": {"max_bytes": bb.MiB}, "rounds": rounds}
    for key in ("small_instructions_per_request", "large_instructions_per_mb", "fetch_instructions_per_mb"):
        med = {side: statistics.median(r[key] for r in rs) for side, rs in rounds.items()}
        out[key] = {"before": med["before"], "after": med["after"],
                    "after_over_before": round(med["after"] / med["before"], 4)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
