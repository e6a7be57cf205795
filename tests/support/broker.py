"""Runs a real Strom broker as a subprocess on a free loopback port for tests and benchmarks."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.stalls import STALL_WARN_MS, watch_broker_log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """One broker process. Cleans up by pid; never by name."""

    host = "127.0.0.1"  # where wait_listening() looks for the listeners (a network namespace has its own)

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, overrides: dict[str, object] | None = None,
                 port: int | None = None, env: dict[str, str] | None = None,
                 rlimit_nofile: tuple[int, int] | None = None) -> None:
        self._owned_tmp = None
        if data_dir is None:
            self._owned_tmp = tempfile.TemporaryDirectory(prefix="strom-test-")
            data_dir = self._owned_tmp.name
        self.data_dir = str(Path(data_dir) / "data")
        self.log_path = Path(data_dir) / "broker.log"
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.env = dict(env or {})  # extra environment for the child (e.g. STROM_SENDFILE_MIN_BYTES)
        self.rlimit_nofile = rlimit_nofile  # (soft, hard) open files limit of the child, like `ulimit -n`
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        opts = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": self.data_dir,
                "group.initial.rebalance.delay.ms": 0, "strom.loop.stall.warn.ms": STALL_WARN_MS,
                **self.overrides}
        cmd = [sys.executable, "-m", "strom.broker.main"]
        for k, v in opts.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0, wait: bool = True) -> BrokerProcess:
        """Start the process; with wait (the default) return once the Kafka port accepts connections."""
        watch_broker_log(self.log_path)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env}, preexec_fn=self._preexec())
        return self.wait_listening(timeout) if wait else self

    def wait_listening(self, timeout: float = 30.0) -> BrokerProcess:
        """Return once the started process accepts connections on every listener; kill it if it does not."""
        assert self.proc is not None, "start(wait=False) first"
        deadline = time.monotonic() + timeout
        # Every listener, not only the first: they open one after another, and a test may use any.
        ports = [int(p) for p in re.findall(r":(\d+)(?:,|$)", str(self.overrides.get("listeners", "")))] or [self.port]
        waiting = list(dict.fromkeys([self.port, *ports]))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, waiting[0]), timeout=0.5):
                    waiting.pop(0)
                if not waiting:
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill9()
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.log_tail()}")

    def _preexec(self):  # noqa: ANN202 - a callable for Popen, or None
        if self.rlimit_nofile is None:
            return None
        limits = self.rlimit_nofile

        def set_limits() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)

        return set_limits

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill9()

    def kill9(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(10)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._owned_tmp is not None:
            self._owned_tmp.cleanup()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
