"""How long `strom cluster up` takes to stop everything on Ctrl-C (SIGINT).

Starts `strom cluster up --brokers 3` on free loopback ports, creates an RF 3 topic with 6
partitions (so every broker leads some), sends SIGINT and measures the seconds until the command
exits, and which controlled shutdowns the broker logs report. Repeats `--runs` times.

Prints one JSON document. Usage: python bench/bench_cluster_teardown.py [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.cluster.test_cluster_cli import CliProcess, free_port_run, kill_leftovers, started_pids  # noqa: E402

from strom.metadata.zk.zookeeper_server import free_port  # noqa: E402


def one_run(data_dir: Path) -> dict[str, object]:
    base, zk_port = free_port_run(3), free_port()
    cli = CliProcess("--brokers", "3", "--data-dir", str(data_dir), "--base-port", str(base),
                     "--zookeeper-port", str(zk_port), "--metrics-base-port", "0")
    pids: dict[str, int] = {}
    try:
        pids = started_pids(cli, 120)
        bootstrap = cli.wait_line(r"Bootstrap servers: (\S+)", 180).group(1)
        subprocess.run([sys.executable, "-m", "strom.cli.main", "topics", "--bootstrap-server", bootstrap, "--create",
                        "--topic", "teardown", "--partitions", "6", "--replication-factor", "3"],
                       check=True, capture_output=True, timeout=120)
        started = time.monotonic()
        os.kill(cli.proc.pid, signal.SIGINT)
        code = cli.wait(300)
        seconds = time.monotonic() - started
        logs = "".join((data_dir / f"broker-{b}" / "broker.log").read_text() for b in (1, 2, 3))
        return {"exit": code, "teardown_s": round(seconds, 2),
                "controlled_shutdown_complete": logs.count("controlled shutdown complete"),
                "controlled_shutdown_skipped": logs.count("controlled shutdown skipped"),
                "controlled_shutdown_retries": logs.count("(attempt ")}
    finally:
        cli.kill()
        kill_leftovers(pids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="teardown-") as tmp:
            runs.append(one_run(Path(tmp)))
    print(json.dumps({"brokers": 3, "runs": runs,
                      "max_teardown_s": max(r["teardown_s"] for r in runs)}, indent=2))  # type: ignore[type-var]


if __name__ == "__main__":
    main()
