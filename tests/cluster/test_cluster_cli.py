"""`strom cluster up` as a user runs it: a real subprocess, real ZooKeeper and brokers, signals, pids."""

from __future__ import annotations

import json
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

from strom.metadata.zk.zookeeper_server import four_letter_word, free_port
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
        assert re.search(r"broker \d \(pid \d+, 127\.0\.0\.1:\d+\) died: exited with status 2", err), cli.output()
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
    nothing = subprocess.run([sys.executable, "-m", "strom.cli.main", "cluster", "restart-broker", "1", "--data-dir",
                              str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert nothing.returncode == 1
    assert nothing.stderr.startswith(f"Error: No `strom cluster up` is running with --data-dir {tmp_path}")


def strom(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cluster_up_supervises_its_brokers(tmp_path: Path) -> None:
    """A killed broker is reported while the others serve; tools use the surviving brokers; one broker is
    stopped, started and restarted through the running `cluster up`; the full teardown skips the pointless
    controlled-shutdown retries of the last broker."""
    base, zk_port = free_port_run(3), free_port()
    addresses = [f"127.0.0.1:{base + i}" for i in range(3)]
    cli = CliProcess("--brokers", "3", "--data-dir", str(tmp_path), "--base-port", str(base),
                     "--zookeeper-port", str(zk_port), "--metrics-base-port", "0")
    pids: dict[str, int] = {}
    try:
        pids = started_pids(cli, 90)
        cli.wait_line(r"Bootstrap servers: ", 120)
        cli.wait_line(r"ZooKeeper: 127\.0\.0\.1:\d+/strom, session timeout 18 s \(zookeeper\.session\.timeout\.ms", 5)
        ok = strom("topics", "--bootstrap-server", ",".join(addresses), "--create", "--topic", "sup",
                   "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2")
        assert ok.returncode == 0, ok.stderr
        zk = KazooClient(hosts=f"127.0.0.1:{zk_port}/strom")
        zk.start(timeout=15)
        try:
            controller = int(json.loads(zk.get("/controller")[0])["brokerid"])
        finally:
            zk.stop()
            zk.close()
        other = controller % 3 + 1
        dead, alive = addresses[controller - 1], addresses[other - 1]

        # kill -9 of the controller: reported, the rest keeps serving, tools try the brokers they know.
        os.kill(pids[f"broker.{controller}"], signal.SIGKILL)
        cli.wait_line(rf"broker {controller} \(pid {pids[f'broker.{controller}']}, {dead}\) died: killed by SIGKILL; "
                      rf"the other brokers keep running; .*restart-broker {controller}.*its log is "
                      rf"{re.escape(str(tmp_path / f'broker-{controller}' / 'broker.log'))}", 30)
        for bootstrap in (f"{dead},{alive}", alive):
            described = strom("topics", "--describe", "--bootstrap-server", bootstrap, "--topic", "sup")
            assert described.returncode == 0, (bootstrap, described.stderr)
            assert "Configs: min.insync.replicas=2" in described.stdout, described.stdout
            assert len(re.findall(r"\tPartition: \d", described.stdout)) == 3, described.stdout
        altered = strom("configs", "--bootstrap-server", alive, "--topic", "sup", "--alter", "--add-config",
                        "retention.ms=7200000")
        assert altered.returncode == 0, altered.stderr
        configs = strom("configs", "--bootstrap-server", f"{dead},{alive}", "--topic", "sup", "--describe")
        assert configs.returncode == 0 and "  retention.ms=7200000 " in configs.stdout, configs.stderr
        state = json.loads((tmp_path / "cluster.json").read_text())
        assert state["brokers"][str(controller)]["state"] == "exited"
        assert state["brokers"][str(other)]["command"][1:3] == ["-m", "strom.broker.main"]

        restarted = strom("cluster", "restart-broker", str(controller), "--data-dir", str(tmp_path), timeout=240)
        assert restarted.returncode == 0, restarted.stderr
        assert re.fullmatch(rf"broker {controller} restarted \(pid (\d+), {dead}\)\n", restarted.stdout)
        pids[f"broker.{controller}.new"] = int(re.search(r"pid (\d+)", restarted.stdout).group(1))  # type: ignore[union-attr]
        assert f"broker.{controller} {pids[f'broker.{controller}.new']}\n" in (tmp_path / "pids").read_text()

        stopped = strom("cluster", "stop-broker", str(other), "--data-dir", str(tmp_path))
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout == f"broker {other} stopped (exited with status 0)\n"
        assert not pid_alive(pids[f"broker.{other}"])
        again = strom("cluster", "stop-broker", str(other), "--data-dir", str(tmp_path))
        assert again.returncode == 1 and again.stderr == f"Error: broker {other} is not running\n", again.stderr
        started = strom("cluster", "start-broker", str(other), "--data-dir", str(tmp_path), timeout=240)
        assert started.returncode == 0, started.stderr
        pids[f"broker.{other}.new"] = int(re.search(r"pid (\d+)", started.stdout).group(1))  # type: ignore[union-attr]
        unknown = strom("cluster", "start-broker", "9", "--data-dir", str(tmp_path))
        assert unknown.returncode == 1 and "has no broker 9 (brokers 1, 2, 3)" in unknown.stderr
        assert not [line for line in cli.err if f"broker {other} (pid" in line and "died" in line], cli.output()

        os.kill(cli.proc.pid, signal.SIGINT)
        assert cli.wait(180) == 0, cli.output()
        alive_after = [name for name, pid in pids.items() if pid_alive(pid)]
        assert alive_after == [], f"still running after exit: {alive_after}\n{cli.output()}"
        assert not (tmp_path / "cluster.json").exists()
        logs = {b: (tmp_path / f"broker-{b}" / "broker.log").read_text() for b in (1, 2, 3)}
        assert sum("controlled shutdown skipped: no other live broker" in text for text in logs.values()) == 1
        assert not any("controlled shutdown did not complete" in text for text in logs.values())
    finally:
        cli.kill()
        kill_leftovers(pids)
