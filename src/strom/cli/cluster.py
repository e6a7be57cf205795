"""`strom cluster up`: a local ZooKeeper-coordinated cluster (one ZooKeeper, N brokers) in the foreground.

It is the quickest way to see replication at work: brokers 1..N on consecutive loopback
ports, each with its own log dir and log file under `--data-dir`, registered in a ZooKeeper
the command starts itself (Debian's `zookeeper` package). The command owns every process
it starts and stops them by pid: on Ctrl-C or SIGTERM the brokers get SIGTERM (controlled
shutdown, the controller last) and then ZooKeeper stops. The children run in their own
sessions so that a terminal's Ctrl-C reaches only this command, which then stops them in
order; their pids are written to `<data-dir>/pids` in case this command itself is killed.

While it runs it supervises: a broker that dies is reported (which one, its exit status or
signal, its log) and the others keep running; `strom cluster stop-broker|start-broker|
restart-broker N --data-dir DIR` ask it to act on one broker (see strom.cli.cluster_control
for the state file and the request files they use); `add-broker` asks it for one more broker and
`retire-broker N` moves N's replicas away (strom.cli.broker_retirement) before asking it to drop N.
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

from strom.cli import cluster_control
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
        self.stopped_on_purpose = False  # by stop-broker: its exit is not a death to report

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
        self.stopped_on_purpose = False
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def exited(self) -> int | None:
        """The exit status once the process has ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def how_it_ended(self) -> str:
        """`exited with status 2` or `killed by SIGKILL` (Popen's negative return codes)."""
        code = self.exited()
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exited with status {code}"

    def state(self) -> dict[str, object]:
        """This broker's entry in the state file."""
        status = "running" if self.running() else "stopped" if self.stopped_on_purpose or self.proc is None else "exited"
        return {"pid": self.proc.pid if self.proc else None, "address": self.address, "log": str(self.log_path),
                "state": status, "exit": self.exited(), "command": self.command()}

    def stop(self, timeout: float) -> None:
        """SIGTERM by pid, SIGKILL if it outlives `timeout`; always reaps the child."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self.stopped_on_purpose = True
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


def _how_to(bootstrap: str, brokers: int, data_dir: Path, zookeeper_connect: str, session_timeout_ms: int) -> str:
    rf = min(3, brokers)
    return (
        f"Strom cluster of {brokers} broker(s) is up.\n"
        f"Bootstrap servers: {bootstrap}\n"
        f"ZooKeeper: {zookeeper_connect}, session timeout {session_timeout_ms / 1000:g} s "
        "(zookeeper.session.timeout.ms: how long a broker that dies without stopping keeps its leaderships)\n"
        f"Logs: {data_dir}/broker-<id>/broker.log, {data_dir}/zookeeper/zookeeper.log\n"
        f"  create a replicated topic: strom topics --bootstrap-server {bootstrap} --create --topic demo "
        f"--partitions 3 --replication-factor {rf} --config min.insync.replicas={max(1, rf - 1)}\n"
        f"  describe it (leader, replicas, ISR): strom topics --bootstrap-server {bootstrap} --describe --topic demo\n"
        f"  produce:  strom console-producer --bootstrap-server {bootstrap} --topic demo "
        "--producer-property acks=all\n"
        f"  consume:  strom console-consumer --bootstrap-server {bootstrap} --topic demo --from-beginning\n"
        f"  one broker: strom cluster stop-broker|start-broker|restart-broker <id> --data-dir {data_dir}\n"
        f"  grow, shrink: strom cluster add-broker | retire-broker <id> --data-dir {data_dir}\n"
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
        from strom.metadata.zk.zookeeper_server import (
            ZooKeeperServer,
            ZooKeeperServerError,
            zookeeper_available,
        )

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
        code = _run(zookeeper, ZooKeeperServerError, members, data_dir, startup_timeout, stop_timeout,
                    int(overrides["zookeeper.session.timeout.ms"]))
        if code:
            raise typer.Exit(code)


def _run(zookeeper, zookeeper_error: type[Exception], members: list[LocalBroker], data_dir: Path,  # noqa: ANN001
         startup_timeout: float, stop_timeout: float, session_timeout_ms: int) -> int:
    """Start everything, supervise until asked to stop, then stop everything; returns the exit status."""
    from kazoo.client import KazooClient

    stop_requested = {"signal": None}

    def on_signal(signum: int, frame: object) -> None:
        stop_requested["signal"] = signum

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    zk: KazooClient | None = None
    pids_file = data_dir / "pids"
    state = _StateFile(data_dir, zookeeper, members, session_timeout_ms)
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
        state.write()
        _say("started " + ", ".join(f"broker {m.broker_id} (pid {m.proc.pid}, {m.address})" for m in members)
             + f", ZooKeeper pid {zookeeper.pid}; pids in {pids_file}")
        zk = KazooClient(hosts=f"{zookeeper.connect_string}{CHROOT}", timeout=10.0)
        zk.start(timeout=15)
        code = _wait_up(zk, members, startup_timeout, stop_requested)
        if code or stop_requested["signal"] is not None:
            return code
        bootstrap = ",".join(m.address for m in members)
        typer.echo(_how_to(bootstrap, len(members), data_dir, f"{zookeeper.connect_string}{CHROOT}",
                           session_timeout_ms), nl=True)
        if any(m.metrics_port for m in members):
            typer.echo("Metrics: " + ", ".join(f"broker {m.broker_id} http://{HOST}:{m.metrics_port}/metrics"
                                               for m in members if m.metrics_port)
                       + " (and /healthz, /readyz)")
        sys.stdout.flush()
        code = _supervise(zookeeper, members, stop_requested, state, zk, startup_timeout, stop_timeout)
        return code
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            _stop_all(zk, zookeeper, members, stop_timeout)
        finally:
            with contextlib.suppress(OSError):
                pids_file.unlink()
            state.remove()
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


class _StateFile:
    """`<data-dir>/cluster.json` (see strom.cli.cluster_control), rewritten whenever a broker changes."""

    def __init__(self, data_dir: Path, zookeeper, members: list[LocalBroker],  # noqa: ANN001
                 session_timeout_ms: int) -> None:
        self.data_dir = data_dir
        self.path = data_dir / cluster_control.STATE_FILE
        self.zookeeper = zookeeper
        self.members = members
        self.session_timeout_ms = session_timeout_ms

    def write(self) -> None:
        _write_pids(self.data_dir / "pids", self.zookeeper, self.members)  # a restarted broker has a new pid
        cluster_control.write_json_atomically(self.path, {
            "supervisor_pid": os.getpid(),
            "zookeeper": {"pid": self.zookeeper.pid, "connect": f"{self.zookeeper.connect_string}{CHROOT}",
                          "session_timeout_ms": self.session_timeout_ms},
            "brokers": {str(m.broker_id): m.state() for m in self.members},
        })

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        control = self.data_dir / cluster_control.CONTROL_DIR
        for request in control.glob("*.request"):
            cluster_control.answer(request, False, "the cluster is stopping.")


def _report_exit(member: LocalBroker, data_dir: Path | None = None) -> None:
    pid = member.proc.pid if member.proc else "?"
    restart = (f"; `strom cluster restart-broker {member.broker_id} --data-dir {data_dir}` starts it again"
               if data_dir is not None else "")
    _say(f"broker {member.broker_id} (pid {pid}, {member.address}) died: {member.how_it_ended()}"
         f"{'; the other brokers keep running' if data_dir is not None else ''}{restart}; "
         f"its log is {member.log_path}, last lines:\n{_log_tail(member.log_path)}", err=True)


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


def _supervise(zookeeper, members: list[LocalBroker], stop_requested: dict, state: _StateFile,  # noqa: ANN001
               zk, startup_timeout: float, stop_timeout: float) -> int:  # noqa: ANN001
    """Run until a signal: report brokers that die (the rest keep running), act on stop/start/restart
    requests, give up if ZooKeeper dies or every broker has died."""
    reported: set[int] = set()
    while stop_requested["signal"] is None:
        changed = False
        for member in members:
            if member.exited() is not None and not member.stopped_on_purpose and member.broker_id not in reported:
                reported.add(member.broker_id)
                changed = True
                _report_exit(member, state.data_dir)
        if changed:
            state.write()
        if reported and all(m.broker_id in reported for m in members):
            _say("every broker has died; stopping", err=True)
            return 1
        if not zookeeper.is_running():
            _say(f"ZooKeeper exited unexpectedly; last lines of its log:\n{zookeeper.log_tail()}", err=True)
            return 1
        for path, request in cluster_control.pending_requests(state.data_dir):
            ok, message = _act(request, members, zk, startup_timeout, stop_timeout, stop_requested,
                               state.session_timeout_ms)
            if ok:
                reported.discard(request.get("broker"))
            state.write()
            _say(message, err=not ok)
            cluster_control.answer(path, ok, message)
        time.sleep(POLL)
    _say(f"received {signal.Signals(stop_requested['signal']).name}; stopping the cluster")
    return 0


def _act(request: dict, members: list[LocalBroker], zk, startup_timeout: float,  # noqa: ANN001
         stop_timeout: float, stop_requested: dict, session_timeout_ms: int) -> tuple[bool, str]:
    """Carry out one stop/start/restart request; (ok, what happened)."""
    action, broker_id = request.get("action"), request.get("broker")
    member = next((m for m in members if m.broker_id == broker_id), None)
    if action not in cluster_control.ACTIONS:
        return False, f"unknown action {action!r}"
    if action == "add":
        member, problem = _new_member(members)
        if member is None:
            return False, problem
        members.append(member)
        broker_id = member.broker_id
    elif member is None:
        return False, f"no broker {broker_id} in this cluster (brokers {', '.join(str(m.broker_id) for m in members)})"
    if action == "start" and member.running():
        return False, f"broker {broker_id} is already running (pid {member.proc.pid})"  # type: ignore[union-attr]
    if action == "stop" and not member.running():
        return False, f"broker {broker_id} is not running"
    if action == "retire":
        member.stop(stop_timeout)
        members.remove(member)
        return True, (f"broker {broker_id} stopped ({member.how_it_ended()}) and removed from the cluster; "
                      f"its data stays in {member.dir}")
    if action in ("stop", "restart") and member.running():
        member.stop(stop_timeout)
        if action == "stop":
            return True, f"broker {broker_id} stopped ({member.how_it_ended()})"
    # A broker that died without stopping is still registered until its ZooKeeper session expires,
    # and a broker cannot register an id another session holds: wait that out first.
    registered, _ = _read_zookeeper(zk)
    if broker_id in registered:
        wait = session_timeout_ms / 1000 + 10
        _say(f"broker {broker_id} is still registered by its old ZooKeeper session; waiting up to {wait:g} s "
             "for the session to expire")
        deadline = time.monotonic() + wait
        while broker_id in registered and time.monotonic() < deadline and stop_requested["signal"] is None:
            time.sleep(POLL)
            registered, _ = _read_zookeeper(zk)
        if broker_id in registered:
            return False, f"broker {broker_id} is still registered in ZooKeeper; is another process using its id?"
    member.start()
    _say(f"started broker {broker_id} (pid {member.proc.pid}, {member.address})")  # type: ignore[union-attr]
    deadline = time.monotonic() + startup_timeout
    while stop_requested["signal"] is None and time.monotonic() < deadline:
        if member.exited() is not None:
            if action == "add":
                members.remove(member)
            return False, (f"broker {broker_id} died while starting: {member.how_it_ended()}; its log is "
                           f"{member.log_path}, last lines:\n{_log_tail(member.log_path, 15)}")
        registered, _ = _read_zookeeper(zk)
        if broker_id in registered and _port_open(member.port):
            verb = {"restart": "restarted", "add": "added"}.get(action, "started")
            return True, f"broker {broker_id} {verb} (pid {member.proc.pid}, {member.address})"  # type: ignore[union-attr]
        time.sleep(POLL)
    return False, f"broker {broker_id} (pid {member.proc.pid}) is not serving after {startup_timeout:g} s; see {member.log_path}"  # type: ignore[union-attr]


def _new_member(members: list[LocalBroker]) -> tuple[LocalBroker | None, str]:
    """A broker with the next free id (above every id this data dir has used, so a retired broker's old
    logs are never picked up again) on the port and metrics port that `cluster up`'s numbering gives it."""
    if not members:
        return None, "the cluster has no broker left to take its settings from"
    first = min(members, key=lambda m: m.broker_id)
    data_dir = first.dir.parent
    used = {m.broker_id for m in members} | {int(d.name.removeprefix("broker-")) for d in data_dir.glob("broker-*")
                                             if d.name.removeprefix("broker-").isdigit()}
    broker_id = max(used) + 1
    port = first.port + broker_id - first.broker_id
    metrics_port = first.metrics_port + broker_id - first.broker_id if first.metrics_port else None
    for wanted in (port, metrics_port):
        if wanted is not None and (wanted > 65535 or _port_open(wanted)):
            return None, f"cannot add broker {broker_id}: port {wanted} on {HOST} is in use or out of range"
    return LocalBroker(broker_id, port, data_dir, first.zookeeper_connect, first.overrides, metrics_port), ""


def _stop_all(zk, zookeeper, members: list[LocalBroker], timeout: float) -> None:  # noqa: ANN001
    """Brokers one by one (the controller last, so control moves at most once), then ZooKeeper.

    The controller is read again before each stop: it moves when a broker dies or is stopped by hand."""
    remaining = [m for m in members if m.running()]
    while remaining:
        controller = None
        if zk is not None:
            with contextlib.suppress(Exception):
                _, controller = _read_zookeeper(zk)
        member = sorted(remaining, key=lambda m: m.broker_id == controller)[0]
        remaining.remove(member)
        member.stop(timeout)
    if zk is not None:
        with contextlib.suppress(Exception):
            zk.stop()
            zk.close()
    if zookeeper.is_running():
        _say(f"stopping ZooKeeper (pid {zookeeper.pid})")
    zookeeper.stop()
    _say("stopped")


DataDirOption = Annotated[
    Path, typer.Option("--data-dir", help="The --data-dir of the running `strom cluster up`.")
]
BrokerIdArgument = Annotated[int, typer.Argument(help="Broker id (1..N).", show_default=False)]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", help="Seconds to wait for `strom cluster up` to carry it out.")
]


def _request(action: str, broker_id: int, data_dir: Path, timeout: float) -> None:
    with cli_errors():
        data_dir = data_dir.resolve()
        state = cluster_control.read_state(data_dir)
        if state is None:
            fail(f"No `strom cluster up` is running with --data-dir {data_dir} "
                 f"(no {cluster_control.STATE_FILE} there, or the process that wrote it is gone).")
        if str(broker_id) not in state.get("brokers", {}):
            fail(f"The cluster in {data_dir} has no broker {broker_id} "
                 f"(brokers {', '.join(sorted(state.get('brokers', {}), key=int))}).")
        supervisor = int(state["supervisor_pid"])
        reply = cluster_control.send_request(data_dir, action, broker_id, timeout,
                                             lambda: cluster_control.pid_alive(supervisor))
        if not reply.get("ok"):
            fail(str(reply.get("message")))
        typer.echo(str(reply.get("message")))


@cluster_app.command("stop-broker")
def stop_broker(broker_id: BrokerIdArgument, data_dir: DataDirOption = Path("cluster-data"),
                timeout: TimeoutOption = 120) -> None:
    """Stop one broker of the running cluster (SIGTERM: controlled shutdown); the others keep running."""
    _request("stop", broker_id, data_dir, timeout)


@cluster_app.command("start-broker")
def start_broker(broker_id: BrokerIdArgument, data_dir: DataDirOption = Path("cluster-data"),
                 timeout: TimeoutOption = 120) -> None:
    """Start a stopped or dead broker again with its original command line; waits until it serves."""
    _request("start", broker_id, data_dir, timeout)


@cluster_app.command("restart-broker")
def restart_broker(broker_id: BrokerIdArgument, data_dir: DataDirOption = Path("cluster-data"),
                   timeout: TimeoutOption = 180) -> None:
    """Stop one broker if it runs, then start it again; waits until it serves."""
    _request("restart", broker_id, data_dir, timeout)


def _running_state(data_dir: Path) -> dict:
    state = cluster_control.read_state(data_dir)
    if state is None:
        fail(f"No `strom cluster up` is running with --data-dir {data_dir} "
             f"(no {cluster_control.STATE_FILE} there, or the process that wrote it is gone).")
    return state


def _bootstrap(state: dict, without: int | None = None) -> str:
    """The running brokers' addresses (but `without`'s), as a bootstrap list."""
    return ",".join(b["address"] for i, b in sorted(state["brokers"].items(), key=lambda kv: int(kv[0]))
                    if b.get("state") == "running" and int(i) != without)


@cluster_app.command("add-broker")
def add_broker(data_dir: DataDirOption = Path("cluster-data"), timeout: TimeoutOption = 180) -> None:
    """Start one more broker (the next free id) in the running cluster; it holds no replicas until moved."""
    with cli_errors():
        data_dir = data_dir.resolve()
        supervisor = int(_running_state(data_dir)["supervisor_pid"])
        reply = cluster_control.send_request(data_dir, "add", None, timeout,
                                             lambda: cluster_control.pid_alive(supervisor))
        if not reply.get("ok"):
            fail(str(reply.get("message")))
        typer.echo(str(reply.get("message")))
        state = _running_state(data_dir)
        ids = ",".join(sorted(state["brokers"], key=int))
        typer.echo(
            "It holds no replicas yet: nothing moves to a new broker by itself. To give it a share, reassign "
            "partitions to it, e.g.\n"
            f"  strom reassign-partitions --bootstrap-server {_bootstrap(state)} --generate "
            f"--topics-to-move-json-file topics.json --broker-list {ids}\n"
            "then save the proposed plan and run it with --execute --reassignment-json-file plan.json "
            "[--throttle BYTES_PER_S], and --verify until it is complete.")


@cluster_app.command("retire-broker")
def retire_broker(
    broker_id: BrokerIdArgument,
    data_dir: DataDirOption = Path("cluster-data"),
    throttle: Annotated[int, typer.Option(
        "--throttle", help="Replication throttle in bytes/s while its replicas move; -1 = none.")] = 50_000_000,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds to wait for its replicas to move.")] = 1800,
    isr_wait: Annotated[float, typer.Option(
        "--isr-wait", help="Seconds to wait for lagging replicas to be back in sync before refusing.")] = 60,
) -> None:
    """Move every replica off one broker (reassignment, throttled), then stop it and drop it from the cluster."""
    from strom.cli.broker_retirement import move_replicas_off
    from strom.cli.reassign_partitions import run_admin

    with cli_errors():
        if throttle < -1:
            fail("--throttle is a rate in bytes/s (or -1 for none).")
        data_dir = data_dir.resolve()
        state = _running_state(data_dir)
        if str(broker_id) not in state.get("brokers", {}):
            fail(f"The cluster in {data_dir} has no broker {broker_id} "
                 f"(brokers {', '.join(sorted(state.get('brokers', {}), key=int))}).")
        if state["brokers"][str(broker_id)].get("state") != "running":
            fail(f"Broker {broker_id} is not running: start it (`strom cluster start-broker {broker_id}`) so its "
                 "replicas can be copied from it, then retire it.")
        bootstrap = _bootstrap(state, without=broker_id)
        if not bootstrap:
            fail(f"Broker {broker_id} is the only running broker; there is nowhere to move its replicas.")
        moved = run_admin(bootstrap, None, lambda admin: move_replicas_off(
            admin, broker_id, throttle, timeout, isr_wait, lambda line: typer.echo(f"retire-broker: {line}")))
        typer.echo(f"retire-broker: broker {broker_id} holds no replicas any more ({moved} moved); stopping it")
        supervisor = int(state["supervisor_pid"])
        reply = cluster_control.send_request(data_dir, "retire", broker_id, 180,
                                             lambda: cluster_control.pid_alive(supervisor))
        if not reply.get("ok"):
            fail(str(reply.get("message")))
        typer.echo(str(reply.get("message")))
