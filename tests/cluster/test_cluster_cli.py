"""`strom cluster up` as a user runs it: a real subprocess, real ZooKeeper and brokers, signals, pids."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from strom.cluster.zookeeper_server import four_letter_word, free_port
from tests.support.cluster import pid_alive
from tests.support.metrics import http_request


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free loopback ports."""
    for _ in range(200):
        base = free_port()
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no run of {count} free ports")


class CliProcess:
    """`python -m strom.cli.main cluster up ...` with its stdout and stderr collected line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "strom.cli.main", "cluster", "up", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, sink: list[str]) -> None:  # noqa: ANN001
        for line in stream:
            sink.append(line)
            self.lines.put(line)

    def wait_line(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r} (exit {self.proc.poll()})\n{self.output()}")

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(5)
        return code

    def output(self) -> str:
        return f"stdout:\n{''.join(self.out)}\nstderr:\n{''.join(self.err)}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def started_pids(cli: CliProcess, timeout: float) -> dict[str, int]:
    """Pids the CLI announced: {"zookeeper": pid, "broker.1": pid, ...}."""
    line = cli.wait_line(r"started .*ZooKeeper pid \d+", timeout).string
    pids = {f"broker.{b}": int(p) for b, p in re.findall(r"broker (\d+) \(pid (\d+)", line)}
    pids["zookeeper"] = int(re.search(r"ZooKeeper pid (\d+)", line).group(1))  # type: ignore[union-attr]
    return pids


def kill_leftovers(pids: dict[str, int]) -> list[str]:
    """SIGKILL (by pid) whatever is still alive, and say what it was."""
    alive = [name for name, pid in pids.items() if pid_alive(pid)]
    for name in alive:
        os.kill(pids[name], signal.SIGKILL)
    return alive


@pytest.mark.cluster
def test_cluster_up_serves_and_stops_every_child_on_sigint(tmp_path: Path) -> None:
    base, zk_port, metrics_base = free_port_run(2), free_port(), free_port_run(2)
    cli = CliProcess("--brokers", "2", "--data-dir", str(tmp_path), "--base-port", str(base),
                     "--zookeeper-port", str(zk_port), "--metrics-base-port", str(metrics_base),
                     "--startup-timeout", "90")
    pids: dict[str, int] = {}
    try:
        pids = started_pids(cli, 60)
        assert set(pids) == {"zookeeper", "broker.1", "broker.2"}
        pid_file = (tmp_path / "pids").read_text().split()
        assert dict(zip(pid_file[::2], map(int, pid_file[1::2]), strict=True)) == pids
        bootstrap = cli.wait_line(r"Bootstrap servers: (\S+)", 120).group(1)
        assert bootstrap == f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        metrics = cli.wait_line(r"Metrics: (.*)", 30).group(1)
        for broker_id, port in ((1, metrics_base), (2, metrics_base + 1)):
            assert f"broker {broker_id} http://127.0.0.1:{port}/metrics" in metrics
            assert http_request(port, "/readyz").status == 200
        assert four_letter_word(zk_port, "ruok") == "imok"
        zk = KazooClient(hosts=f"127.0.0.1:{zk_port}/strom")
        zk.start(timeout=15)
        try:
            assert sorted(int(b) for b in zk.get_children("/brokers/ids")) == [1, 2]
            assert zk.exists("/controller") is not None
        finally:
            zk.stop()
            zk.close()
        for broker_id in (1, 2):
            assert (tmp_path / f"broker-{broker_id}" / "broker.log").stat().st_size > 0
            assert (tmp_path / f"broker-{broker_id}" / "data").is_dir()
        os.kill(cli.proc.pid, signal.SIGINT)
        assert cli.wait(120) == 0, cli.output()
        assert "stopped" in cli.output()
        alive = [name for name, pid in pids.items() if pid_alive(pid)]
        assert alive == [], f"still running after exit: {alive}\n{cli.output()}"
        assert not (tmp_path / "pids").exists()
    finally:
        cli.kill()
        kill_leftovers(pids)


def test_cluster_up_reports_a_broker_that_dies_and_stops_the_rest(tmp_path: Path) -> None:
    # An unknown broker setting makes each broker exit at start-up, whatever cluster mode can do.
    base, zk_port = free_port_run(2), free_port()
    cli = CliProcess("--brokers", "2", "--data-dir", str(tmp_path), "--base-port", str(base),
                     "--zookeeper-port", str(zk_port), "--metrics-base-port", "0",
                     "--override", "no.such.broker.setting=1")
    pids: dict[str, int] = {}
    try:
        pids = started_pids(cli, 90)
        assert cli.wait(120) == 1, cli.output()
        err = "".join(cli.err)
        assert re.search(r"broker \d \(pid \d+\) exited unexpectedly with status 2", err), cli.output()
        assert "no.such.broker.setting" in err  # the broker's log tail
        assert "Bootstrap servers" not in "".join(cli.out)
        alive = [name for name, pid in pids.items() if pid_alive(pid)]
        assert alive == [], f"still running after exit: {alive}\n{cli.output()}"
        assert not (tmp_path / "pids").exists()
    finally:
        cli.kill()
        kill_leftovers(pids)


def test_cluster_up_refuses_bad_arguments(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "strom.cli.main", "cluster", "up", "--data-dir",
                               str(tmp_path), *args], capture_output=True, text=True, timeout=60)

    assert run("--brokers", "0").returncode == 2
    reserved = run("--override", "broker.id=7")
    assert reserved.returncode == 1 and "broker.id is set by `strom cluster up` itself" in reserved.stderr
    malformed = run("--override", "nokeyvalue")
    assert malformed.returncode == 1 and "expected key=value" in malformed.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = run("--brokers", "1", "--base-port", str(port), "--zookeeper-port", str(free_port()))
    assert taken.returncode == 1 and f"Port {port} on 127.0.0.1 is already in use." in taken.stderr
    assert "Traceback" not in reserved.stderr + malformed.stderr + taken.stderr
    assert not (tmp_path / "zookeeper").exists()  # nothing was started
