"""A real Apache ZooKeeper server process on loopback: standalone or one member of an ensemble.

Strom's cluster mode keeps its truth in ZooKeeper as Kafka 3.x does, so tests and
`strom cluster up` run the genuine server (Debian's `zookeeper` package) rather than a
stand-in. Everything listens on 127.0.0.1, the data lives under a directory the caller
owns, and the process is stopped by its pid only.

The server is started with a short `tickTime` (500 ms) so that session timeouts of one or
two seconds are legal (ZooKeeper clamps them to [2, 20] ticks unless told otherwise; we
widen the maximum so Kafka's default 18 s still holds).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# The Debian package's layout: config dir first (log4j.properties), then every jar.
DEFAULT_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/*"
CLASSPATH_ENV = "STROM_ZOOKEEPER_CLASSPATH"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
HOST = "127.0.0.1"


class ZooKeeperServerError(RuntimeError):
    """The server could not be started (missing install, crash at start-up, time-out)."""


def zookeeper_classpath() -> str:
    """The JVM classpath holding ZooKeeper's jars; `STROM_ZOOKEEPER_CLASSPATH` overrides it."""
    return os.environ.get(CLASSPATH_ENV) or DEFAULT_CLASSPATH


def zookeeper_available() -> bool:
    """Whether java and the ZooKeeper jars can be found (lets test suites say why they skip)."""
    if shutil.which("java") is None:
        return False
    for entry in zookeeper_classpath().split(":"):
        if entry.endswith("*"):
            folder = Path(entry[:-1] or ".")
            if any(folder.glob("zookeeper*.jar")):
                return True
        elif entry.endswith(".jar") and Path(entry).name.startswith("zookeeper") and Path(entry).exists():
            return True
    return False


def free_port() -> int:
    """An unused loopback TCP port (the OS picks it; a tiny race with other binders remains)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 2.0) -> str:
    """Send one of ZooKeeper's four-letter admin commands (`srvr`, `ruok`, `mntr`) and read the answer."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


@dataclass(frozen=True)
class QuorumPeer:
    """One ensemble member as `server.N=127.0.0.1:quorum_port:election_port` names it."""

    server_id: int
    quorum_port: int
    election_port: int


class ZooKeeperServer:
    """One ZooKeeper server process; `start()` returns once it serves client requests.

    `data_dir` holds zoo.cfg, myid, the snapshots/transaction logs and the server's log
    (`zookeeper.log`), so `start()` after `stop()` or `kill9()` comes back with the same data.
    Pass `peers` (every member, this one included) to run as part of an ensemble.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        client_port: int | None = None,
        *,
        server_id: int = 1,
        peers: list[QuorumPeer] | None = None,
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 60_000,
        heap: str = "256m",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.client_port = client_port or free_port()
        self.server_id = server_id
        self.peers = list(peers or [])
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None

    # -- addresses -----------------------------------------------------------
    @property
    def connect_string(self) -> str:
        """`host:port` for `zookeeper.connect` (append `/chroot` as needed)."""
        return f"{HOST}:{self.client_port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- configuration -------------------------------------------------------
    def write_config(self) -> Path:
        """Write zoo.cfg (and myid for an ensemble member); safe to call again."""
        snapshots = self.data_dir / "data"
        snapshots.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time_ms}",
            "initLimit=20",
            "syncLimit=10",
            f"minSessionTimeout={2 * self.tick_time_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            f"dataDir={snapshots}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={HOST}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,stat,mntr,conf,cons",
            "maxClientCnxns=0",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        if self.peers:
            for peer in sorted(self.peers, key=lambda p: p.server_id):
                lines.append(f"server.{peer.server_id}={HOST}:{peer.quorum_port}:{peer.election_port}")
            (snapshots / "myid").write_text(f"{self.server_id}\n")
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def command(self) -> list[str]:
        """The java command line (logging goes to the console appender, i.e. our log file)."""
        return [
            shutil.which("java") or "java",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-Dzookeeper.console.threshold=INFO",
            f"-Dzookeeper.log.dir={self.data_dir}",
            "-Djava.net.preferIPv4Stack=true",
            "-cp",
            zookeeper_classpath(),
            MAIN_CLASS,
            str(self.config_path),
        ]

    # -- lifecycle -----------------------------------------------------------
    def start(self, wait: bool = True, timeout: float = 60.0) -> ZooKeeperServer:
        """Launch the process; with `wait`, block until it serves (an ensemble member needs a quorum)."""
        if self.is_running():
            return self
        if not zookeeper_available():
            raise ZooKeeperServerError(
                f"ZooKeeper not found (classpath {zookeeper_classpath()!r}); install Debian's `zookeeper` "
                f"package or set {CLASSPATH_ENV}"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,
        )
        if wait:
            self.wait_serving(timeout)
        return self

    def serving_mode(self) -> str | None:
        """`standalone`, `leader` or `follower` once the server answers requests, else None."""
        try:
            answer = four_letter_word(self.client_port, "srvr", timeout=1.0)
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_serving(self, timeout: float = 60.0) -> str:
        """Block until `srvr` reports a mode; raises with the log's tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process is None or self.process.poll() is not None:
                raise ZooKeeperServerError(f"ZooKeeper exited during start-up:\n{self.log_tail()}")
            mode = self.serving_mode()
            if mode:
                return mode
            if time.monotonic() > deadline:
                raise ZooKeeperServerError(f"ZooKeeper did not serve within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if the process outlives `timeout`; a no-op when not running."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(10)
        self._release()

    def kill9(self) -> None:
        """Crash the server (SIGKILL): no clean shutdown, sessions are left for the others to expire."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
        self._release()

    close = stop

    def _release(self) -> None:
        self.process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperServer(id={self.server_id}, {self.connect_string}, pid={self.pid})"


def ensemble_connect_string(servers: list[ZooKeeperServer]) -> str:
    """`host:port,host:port,...` naming every member (clients fail over between them)."""
    return ",".join(s.connect_string for s in servers)


def start_ensemble(base_dir: str | os.PathLike[str], n: int = 3, timeout: float = 90.0) -> list[ZooKeeperServer]:
    """Start an `n`-member ensemble under `base_dir/zk<N>` and wait until every member serves.

    All members are launched before any is waited for: none serves until a majority is up.
    On failure every started member is stopped again.
    """
    base = Path(base_dir)
    peers = [QuorumPeer(i, free_port(), free_port()) for i in range(1, n + 1)]
    servers = [ZooKeeperServer(base / f"zk{p.server_id}", server_id=p.server_id, peers=peers) for p in peers]
    try:
        for s in servers:
            s.start(wait=False)
        for s in servers:
            s.wait_serving(timeout)
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers
