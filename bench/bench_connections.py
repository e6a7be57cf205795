"""Connection cost benchmark: broker memory per idle connection and under declared-but-unsent frames.

Prints one JSON document on stdout (progress goes to stderr). Starts its own brokers through
tests/support/broker.py with default settings on a free loopback port:

    python bench/bench_connections.py
    python bench/bench_connections.py --idle 2000 --hostile 40 --declared-mib 100

Phases:
- idle: RSS of the broker (VmRSS from /proc/<pid>/status) before and after opening N idle
  connections; the difference divided by N is the cost of one idle connection.
- hostile (on a fresh broker): M connections each send a 4-byte length prefix declaring a large
  frame plus a few bytes, and never the rest. Reports the broker's RSS (and peak RSS, VmHWM)
  meanwhile and the ApiVersions round-trip latency of a normal client (the first request right
  after the hostile headers, then a series).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kafka.protocol.metadata import ApiVersionsRequest  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402
from tests.support.raw_client import RawClient  # noqa: E402

MiB = 1 << 20


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """Resident set size (VmRSS) or its peak so far (VmHWM) of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


def settle_rss(pid: int, seconds: float = 1.0) -> int:
    """RSS once the broker has had time to accept and set up what was just opened."""
    time.sleep(seconds)
    return rss_bytes(pid)


def round_trip_ms(client: RawClient) -> float:
    started = time.perf_counter()
    client.request(ApiVersionsRequest(), 0)
    return (time.perf_counter() - started) * 1000


def open_idle(broker: BrokerProcess, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        socks.append(s)
    return socks


def idle_phase(broker: BrokerProcess, n: int) -> dict[str, Any]:
    assert broker.pid is not None
    probe = RawClient(broker)
    round_trip_ms(probe)
    before = settle_rss(broker.pid)
    socks = open_idle(broker, n)
    round_trip_ms(probe)  # the broker has accepted everything queued before this answer
    after = settle_rss(broker.pid)
    for s in socks:
        s.close()
    probe.close()
    return {"connections": n, "rss_before_mib": round(before / MiB, 1),
            "rss_after_mib": round(after / MiB, 1),
            "rss_per_idle_connection_kib": round((after - before) / n / 1024, 1)}


def hostile_phase(broker: BrokerProcess, n: int, declared_mib: int) -> dict[str, Any]:
    assert broker.pid is not None
    probe = RawClient(broker)
    probe.sock.settimeout(300)  # before the fix the first answer took seconds
    round_trip_ms(probe)
    before = settle_rss(broker.pid)
    peak_before = rss_bytes(broker.pid, "VmHWM")
    socks = open_idle(broker, n)
    round_trip_ms(probe)
    started = time.perf_counter()
    for s in socks:
        s.sendall(struct.pack(">i", declared_mib * MiB) + b"\x00\x00\x00\x00")
    first = round_trip_ms(probe)
    send_to_answer = (time.perf_counter() - started) * 1000
    series = [round_trip_ms(probe) for _ in range(50)]
    during = settle_rss(broker.pid)
    series += [round_trip_ms(probe) for _ in range(50)]
    for s in socks:
        s.close()
    probe.close()
    return {"connections": n, "declared_mib_each": declared_mib, "rss_before_mib": round(before / MiB, 1),
            "rss_during_mib": round(during / MiB, 1),
            "rss_added_mib": round((during - before) / MiB, 1),
            "peak_rss_added_mib": round((rss_bytes(broker.pid, "VmHWM") - peak_before) / MiB, 1),
            "first_round_trip_ms": round(first, 2),
            "headers_sent_to_first_answer_ms": round(send_to_answer, 2),
            "round_trip_median_ms": round(statistics.median(series), 3),
            "round_trip_max_ms": round(max(series), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle", type=int, default=1000, help="idle connections to open")
    ap.add_argument("--hostile", type=int, default=40, help="connections declaring a large frame")
    ap.add_argument("--declared-mib", type=int, default=100,
                    help="frame size each hostile connection declares")
    args = ap.parse_args()
    result: dict[str, Any] = {}
    with BrokerProcess() as broker:  # a fresh broker per phase: freed memory must not hide the next figure
        progress(f"idle phase: {args.idle} connections (broker pid {broker.pid})")
        result["idle"] = idle_phase(broker, args.idle)
    with BrokerProcess() as broker:
        progress(f"hostile phase: {args.hostile} connections declaring {args.declared_mib} MiB "
                 f"(broker pid {broker.pid})")
        result["hostile"] = hostile_phase(broker, args.hostile, args.declared_mib)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
