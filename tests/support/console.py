"""Runs `strom console` as a subprocess on a free loopback port, and a headless Chromium to look at it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.broker import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class ConsoleProcess:
    """One console process. Cleans up by pid; never by name."""

    def __init__(self, bootstrap: str, log_dir: str | os.PathLike[str], *extra_args: str) -> None:
        self.bootstrap = bootstrap
        self.port = free_port()
        self.log_path = Path(log_dir) / "console.log"
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ConsoleProcess:
        cmd = [sys.executable, "-m", "strom.cli.main", "console", "--bootstrap-server", self.bootstrap,
               "--port", str(self.port), "--host", "127.0.0.1", *self.extra_args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"console exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"console did not listen within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> ConsoleProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch_chromium(playwright: Any) -> Any:
    """Debian's Chromium, headless, with nothing that reaches beyond loopback."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def first_message(bootstrap: str, topic: str, partition: int, group: str, timeout_s: float = 15) -> Any:
    """The record at offset 0 of one partition, read with a plain confluent-kafka consumer (None if none came)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    message = None
    deadline = time.monotonic() + timeout_s
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(1)
    consumer.close()
    return message
