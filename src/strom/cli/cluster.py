"""`strom cluster up`: a local ZooKeeper-coordinated cluster (one ZooKeeper, N brokers) in the foreground.

It is the quickest way to see replication at work: brokers 1..N on consecutive loopback
ports, each with its own log dir and log file under `--data-dir`, registered in a ZooKeeper
the command starts itself (Debian's `zookeeper` package). The command owns every process
it starts and stops them by pid: on Ctrl-C or SIGTERM the brokers get SIGTERM (controlled
shutdown, the controller last) and then ZooKeeper stops. The children run in their own
sessions so that a terminal's Ctrl-C reaches only this command, which then stops them in
order; their pids are written to `<data-dir>/pids` in case this command itself is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from strom.cli.common import PLAIN_HELP, cli_errors, fail, parse_key_values

cluster_app = typer.Typer(help="Run a local ZooKeeper-coordinated Strom cluster.", no_args_is_help=True, **PLAIN_HELP)

HOST = "127.0.0.1"
CHROOT = "/strom"
POLL = 0.2


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _say(message: str, err: bool = False) -> None:
    typer.echo(f"cluster: {message}", err=err)


class LocalBroker:
    """One broker child process: `python -m strom.broker.main --override ...`, output to its own log file."""

    def __init__(self, broker_id: int, port: int, data_dir: Path, zookeeper_connect: str,
                 overrides: dict[str, str], metrics_port: int | None = None) -> None:
        self.broker_id = broker_id
        self.port = port
        self.metrics_port = metrics_port  # its /metrics, /healthz, /readyz endpoint; None = off
        self.dir = data_dir / f"broker-{broker_id}"
        self.log_path = self.dir / "broker.log"
        self.zookeeper_connect = zookeeper_connect
        self.overrides = overrides
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def command(self) -> list[str]:
        config: dict[str, object] = {
            "broker.id": self.broker_id,
            "listeners": f"PLAINTEXT://{self.address}",
            "log.dirs": self.dir / "data",
            "zookeeper.connect": self.zookeeper_connect,
            **({"metrics.listener": f"http://{HOST}:{self.metrics_port}"} if self.metrics_port else {}),
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "strom.broker.main"]
        for key, value in config.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def exited(self) -> int | None:
        """The exit status once the process has ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float) -> None:
        """SIGTERM by pid, SIGKILL if it outlives `timeout`; always reaps the child."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        _say(f"stopping broker {self.broker_id} (pid {proc.pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # a SIGSTOPped broker could not act on SIGTERM
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _say(f"broker {self.broker_id} did not stop within {timeout:g}s; killing it", err=True)
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _read_zookeeper(zk: object) -> tuple[set[int], int | None]:
    """Registered broker ids and the controller id, as the brokers wrote them into ZooKeeper."""
    from kazoo.exceptions import NoNodeError

    try:
        registered = {int(c) for c in zk.get_children("/brokers/ids")}  # type: ignore[attr-defined]
    except NoNodeError:
        registered = set()
    try:
        data, _ = zk.get("/controller")  # type: ignore[attr-defined]
        controller: int | None = int(json.loads(data)["brokerid"])
    except (NoNodeError, ValueError, KeyError, TypeError):
        controller = None
    return registered, controller


def _how_to(bootstrap: str, brokers: int, data_dir: Path, zookeeper_connect: str) -> str:
    rf = min(3, brokers)
    return (
        f"Strom cluster of {brokers} broker(s) is up.\n"
        f"Bootstrap servers: {bootstrap}\n"
        f"ZooKeeper: {zookeeper_connect}\n"
        f"Logs: {data_dir}/broker-<id>/broker.log, {data_dir}/zookeeper/zookeeper.log\n"
        f"  create a replicated topic: strom topics --bootstrap-server {bootstrap} --create --topic demo "
        f"--partitions 3 --replication-factor {rf} --config min.insync.replicas={max(1, rf - 1)}\n"
        f"  describe it (leader, replicas, ISR): strom topics --bootstrap-server {bootstrap} --describe --topic demo\n"
        f"  produce:  strom console-producer --bootstrap-server {bootstrap} --topic demo "
        "--producer-property acks=all\n"
        f"  consume:  strom console-consumer --bootstrap-server {bootstrap} --topic demo --from-beginning\n"
        "  stop:     Ctrl-C"
    )


@cluster_app.command("up")
def up(
    brokers: Annotated[int, typer.Option("--brokers", min=1, max=64, help="Number of brokers (ids 1..N).")] = 3,
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="ZooKeeper data, broker log dirs and log files (kept between runs).")
    ] = Path("cluster-data"),
    base_port: Annotated[
        int, typer.Option("--base-port", min=1, max=65535, help="Port of broker 1; broker N listens on base+N-1.")
    ] = 9092,
    zookeeper_port: Annotated[int, typer.Option("--zookeeper-port", min=1, max=65535)] = 2181,
    metrics_base_port: Annotated[
        int, typer.Option("--metrics-base-port", min=0, max=65535,
                          help="Metrics endpoint (/metrics, /healthz, /readyz) of broker 1; broker N uses "
                               "base+N-1; 0 = no metrics endpoints.")
    ] = 9308,
    override: Annotated[
        list[str] | None,
        typer.Option("--override", help="Broker property for every broker, key=value (repeatable)."),
    ] = None,
    session_timeout_ms: Annotated[
        int, typer.Option("--zookeeper-session-timeout-ms", min=1000, help="zookeeper.session.timeout.ms.")
    ] = 18000,
    startup_timeout: Annotated[float, typer.Option("--startup-timeout", help="Seconds to wait for the cluster.")] = 90,
    stop_timeout: Annotated[float, typer.Option("--stop-timeout", help="Seconds each broker gets to stop.")] = 30,
) -> None:
    """Start ZooKeeper and N brokers, print the bootstrap list, run until Ctrl-C or SIGTERM."""
    with cli_errors():
        overrides = parse_key_values(override or [], "--override")
        for reserved in ("broker.id", "node.id", "listeners", "log.dirs", "log.dir", "zookeeper.connect"):
            if reserved in overrides:
                fail(f"--override {reserved} is set by `strom cluster up` itself.")
        ports = [base_port + i for i in range(brokers)]
        if ports[-1] > 65535:
            fail(f"--base-port {base_port} leaves no room for {brokers} brokers.")
        metrics_ports: list[int | None] = [None] * brokers
        if metrics_base_port and "metrics.listener" not in overrides:
            metrics_ports = [metrics_base_port + i for i in range(brokers)]
            if metrics_ports[-1] > 65535:
                fail(f"--metrics-base-port {metrics_base_port} leaves no room for {brokers} brokers.")
            if set(metrics_ports) & {zookeeper_port, *ports}:
                fail(f"--metrics-base-port {metrics_base_port} collides with a broker or ZooKeeper port.")
        for port in [zookeeper_port, *ports, *(p for p in metrics_ports if p)]:
            if _port_open(port):
                fail(f"Port {port} on {HOST} is already in use.")
        if zookeeper_port in ports:
            fail(f"--zookeeper-port {zookeeper_port} collides with a broker port.")
        from strom.cluster.zookeeper_server import ZooKeeperServer, ZooKeeperServerError, zookeeper_available

        if not zookeeper_available():
            fail("ZooKeeper is not installed: run `make zookeeper` (Debian package `zookeeper`) or set "
                 "STROM_ZOOKEEPER_CLASSPATH.")
        data_dir = data_dir.resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        overrides.setdefault("zookeeper.session.timeout.ms", str(session_timeout_ms))
        overrides.setdefault("offsets.topic.replication.factor", str(min(3, brokers)))
        zookeeper = ZooKeeperServer(data_dir / "zookeeper", zookeeper_port)
        zookeeper_connect = f"{zookeeper.connect_string}{CHROOT}"
        members = [LocalBroker(i + 1, port, data_dir, zookeeper_connect, overrides, metrics_ports[i])
                   for i, port in enumerate(ports)]
        code = _run(zookeeper, ZooKeeperServerError, members, data_dir, startup_timeout, stop_timeout)
        if code:
            raise typer.Exit(code)


def _run(zookeeper, zookeeper_error: type[Exception], members: list[LocalBroker], data_dir: Path,  # noqa: ANN001
         startup_timeout: float, stop_timeout: float) -> int:
    """Start everything, supervise until asked to stop, then stop everything; returns the exit status."""
    from kazoo.client import KazooClient

    stop_requested = {"signal": None}

    def on_signal(signum: int, frame: object) -> None:
        stop_requested["signal"] = signum

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    zk: KazooClient | None = None
    pids_file = data_dir / "pids"
    code = 0
    try:
        _say(f"starting ZooKeeper on {zookeeper.connect_string} (data in {zookeeper.data_dir})")
        try:
            zookeeper.start(timeout=startup_timeout)
        except zookeeper_error as exc:
            _say(str(exc), err=True)
            return 1
        if stop_requested["signal"] is not None:
            return 0
        _ensure_chroot(zookeeper.connect_string)
        for member in members:
            member.start()
        _write_pids(pids_file, zookeeper, members)
        _say("started " + ", ".join(f"broker {m.broker_id} (pid {m.proc.pid}, {m.address})" for m in members)
             + f", ZooKeeper pid {zookeeper.pid}; pids in {pids_file}")
        zk = KazooClient(hosts=f"{zookeeper.connect_string}{CHROOT}", timeout=10.0)
        zk.start(timeout=15)
        code = _wait_up(zk, members, startup_timeout, stop_requested)
        if code or stop_requested["signal"] is not None:
            return code
        bootstrap = ",".join(m.address for m in members)
        typer.echo(_how_to(bootstrap, len(members), data_dir, f"{zookeeper.connect_string}{CHROOT}"), nl=True)
        if any(m.metrics_port for m in members):
            typer.echo("Metrics: " + ", ".join(f"broker {m.broker_id} http://{HOST}:{m.metrics_port}/metrics"
                                               for m in members if m.metrics_port)
                       + " (and /healthz, /readyz)")
        sys.stdout.flush()
        code = _supervise(zookeeper, members, stop_requested)
        return code
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            _stop_all(zk, zookeeper, members, stop_timeout)
        finally:
            with contextlib.suppress(OSError):
                pids_file.unlink()
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)


def _ensure_chroot(hosts: str) -> None:
    """Create the cluster's chroot znode so that every chrooted session (brokers, ours) can use it."""
    from kazoo.client import KazooClient

    root = KazooClient(hosts=hosts, timeout=10.0)
    root.start(timeout=15)
    try:
        root.ensure_path(CHROOT)
    finally:
        root.stop()
        root.close()


def _write_pids(path: Path, zookeeper, members: list[LocalBroker]) -> None:  # noqa: ANN001
    lines = [f"zookeeper {zookeeper.pid}"] + [f"broker.{m.broker_id} {m.proc.pid}" for m in members if m.proc]
    path.write_text("\n".join(lines) + "\n")


def _report_exit(member: LocalBroker) -> None:
    _say(f"broker {member.broker_id} (pid {member.proc.pid if member.proc else '?'}) exited unexpectedly "
         f"with status {member.exited()}; last lines of {member.log_path}:\n{_log_tail(member.log_path)}", err=True)


def _wait_up(zk, members: list[LocalBroker], timeout: float, stop_requested: dict) -> int:  # noqa: ANN001
    """Until every broker listens and is registered and a controller exists; 1 if one dies or time runs out."""
    want = {m.broker_id for m in members}
    deadline = time.monotonic() + timeout
    while stop_requested["signal"] is None:
        for member in members:
            if member.exited() is not None:
                _report_exit(member)
                return 1
        registered, controller = _read_zookeeper(zk)
        if registered >= want and controller is not None and all(_port_open(m.port) for m in members):
            return 0
        if time.monotonic() > deadline:
            _say(f"the cluster did not come up within {timeout:g}s (registered {sorted(registered)}, "
                 f"controller {controller})", err=True)
            for member in members:
                _say(f"last lines of {member.log_path}:\n{_log_tail(member.log_path, 15)}", err=True)
            return 1
        time.sleep(POLL)
    return 0


def _supervise(zookeeper, members: list[LocalBroker], stop_requested: dict) -> int:  # noqa: ANN001
    """Run until a signal; report brokers that die (the rest keep running) and give up if ZooKeeper dies."""
    reported: set[int] = set()
    while stop_requested["signal"] is None:
        for member in members:
            if member.broker_id not in reported and member.exited() is not None:
                reported.add(member.broker_id)
                _report_exit(member)
        if len(reported) == len(members):
            _say("every broker has exited; stopping", err=True)
            return 1
        if not zookeeper.is_running():
            _say(f"ZooKeeper exited unexpectedly; last lines of its log:\n{zookeeper.log_tail()}", err=True)
            return 1
        time.sleep(POLL)
    _say(f"received {signal.Signals(stop_requested['signal']).name}; stopping the cluster")
    return 0


def _stop_all(zk, zookeeper, members: list[LocalBroker], timeout: float) -> None:  # noqa: ANN001
    """Brokers one by one (the controller last, so control moves at most once), then ZooKeeper."""
    controller = None
    if zk is not None:
        with contextlib.suppress(Exception):
            _, controller = _read_zookeeper(zk)
    for member in sorted(members, key=lambda m: m.broker_id == controller):
        member.stop(timeout)
    if zk is not None:
        with contextlib.suppress(Exception):
            zk.stop()
            zk.close()
    if zookeeper.is_running():
        _say(f"stopping ZooKeeper (pid {zookeeper.pid})")
    zookeeper.stop()
    _say("stopped")
