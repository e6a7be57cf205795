"""Retiring a broker of a running `strom cluster up`: how long it takes, and what writers see meanwhile.

Starts `strom cluster up --brokers 4` on free loopback ports, fills an RF 3 topic of 8 partitions
with `--mb` MiB of 1 KiB records, starts a probe producer (acks=all, RF 3 topic, `--probe-rate`
records/s) and runs `strom cluster retire-broker 2` with each `--throttles` value (-1 = none; a
fresh cluster each). Reports the seconds the retirement took, the bytes broker 2 held, and the
probe's acks=all latency percentiles before and during the retirement.

    python bench/bench_retire_broker.py [--mb 128] [--throttles -1,50000000] [--probe-rate 500]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from tests.cluster.test_cluster_cli import CliProcess, free_port_run, kill_leftovers, started_pids  # noqa: E402

from strom.metadata.zk.zookeeper_server import free_port  # noqa: E402

RECORD = b"x" * 1024


def strom(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def fill(bootstrap: str, topic: str, mib: int) -> None:
    # acks=all: the followers hold everything before the probe starts, so its baseline is a quiet cluster's.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1 << 20,
                         "log_level": 0})
    for _ in range(mib * 1024):
        while True:
            try:
                producer.produce(topic, RECORD)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(300)


class Probe:
    """acks=all records at a fixed rate; latency of each acknowledgement, tagged with the send time."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                  "enable.idempotence": True, "log_level": 0})
        self.topic, self.rate = topic, rate
        self.samples: list[tuple[float, float]] = []  # (sent at, latency s)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            sent = time.monotonic()

            def done(err: object, _msg: object, sent: float = sent) -> None:
                if err is not None:
                    self.errors += 1
                else:
                    self.samples.append((sent, time.monotonic() - sent))

            self.producer.produce(self.topic, RECORD, on_delivery=done)
            self.producer.poll(0)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        self.producer.flush(60)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def percentiles(self, start: float, end: float) -> dict[str, float | int]:
        values = sorted(lat for sent, lat in self.samples if start <= sent < end)
        if not values:
            return {"records": 0}

        def pick(q: float) -> float:
            return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 2)

        return {"records": len(values), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "p999_ms": pick(0.999),
                "max_ms": round(values[-1] * 1000, 2)}


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def one_run(data_dir: Path, mib: int, throttle: int, probe_rate: int) -> dict[str, object]:
    base, zk_port = free_port_run(4), free_port()
    cli = CliProcess("--brokers", "4", "--data-dir", str(data_dir), "--base-port", str(base),
                     "--zookeeper-port", str(zk_port), "--metrics-base-port", "0",
                     "--override", "auto.leader.rebalance.enable=false")
    pids: dict[str, int] = {}
    probe: Probe | None = None
    try:
        pids = started_pids(cli, 120)
        bootstrap = cli.wait_line(r"Bootstrap servers: (\S+)", 180).group(1)
        for topic, partitions in (("bulk", "8"), ("probe", "4")):
            made = strom("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions",
                         partitions, "--replication-factor", "3", "--config", "min.insync.replicas=2")
            if made.returncode:
                raise RuntimeError(made.stderr)
        fill(bootstrap, "bulk", mib)
        held = dir_bytes(data_dir / "broker-2" / "data")
        probe = Probe(bootstrap, "probe", probe_rate).start()
        time.sleep(5)  # connections made, metadata cached: not part of the baseline
        baseline = time.monotonic()
        time.sleep(15)
        started = time.monotonic()
        retire = subprocess.Popen([sys.executable, "-m", "strom.cli.main", "cluster", "retire-broker", "2",
                                   "--data-dir", str(data_dir), "--throttle", str(throttle)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines, moved = [], None
        assert retire.stdout is not None
        for line in retire.stdout:  # the moment the replicas are all elsewhere splits moving from stopping
            lines.append(line.rstrip("\n"))
            if "holds no replicas any more" in line:
                moved = time.monotonic()
        errors = retire.stderr.read() if retire.stderr else ""
        ended = time.monotonic()
        time.sleep(2)
        probe.stop()
        if retire.wait(60) or moved is None:
            raise RuntimeError("\n".join(lines) + errors)
        return {"throttle_bytes_per_s": throttle, "broker_2_bytes": held, "retire_s": round(ended - started, 1),
                "move_s": round(moved - started, 1), "stop_s": round(ended - moved, 1),
                "probe_before": probe.percentiles(baseline, started),
                "probe_while_moving": probe.percentiles(started, moved),
                "probe_while_stopping": probe.percentiles(moved, ended + 2), "probe_errors": probe.errors,
                "output": lines}
    finally:
        if probe is not None:
            probe.stop()
        if cli.proc.poll() is None:
            os.kill(cli.proc.pid, signal.SIGINT)
            try:
                cli.wait(180)
            except subprocess.TimeoutExpired:
                pass
        cli.kill()
        kill_leftovers(pids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=128, help="MiB written to the bulk topic before retiring")
    parser.add_argument("--throttles", default="-1,50000000", help="comma-separated bytes/s; -1 = no throttle")
    parser.add_argument("--probe-rate", type=int, default=500, help="probe records per second (acks=all)")
    args = parser.parse_args()
    runs = []
    for throttle in (int(t) for t in args.throttles.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-retire-") as tmp:
            runs.append(one_run(Path(tmp), args.mb, throttle, args.probe_rate))
    print(json.dumps({"bench": "retire_broker", "brokers": 4, "mib": args.mb, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
