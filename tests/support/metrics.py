"""Reading a broker's metrics endpoint in tests: raw HTTP answers and parsed Prometheus samples."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import BrokerProcess, free_port


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: bytes


def http_request(port: int, path: str, method: str = "GET", timeout: float = 10.0) -> HttpAnswer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return HttpAnswer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def raw_exchange(port: int, data: bytes, timeout: float = 15.0) -> bytes:
    """Send bytes as they are and read until the server closes (for malformed requests)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


class Samples:
    """One scrape: value of a sample by name and labels; sums over the labels not given."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = []
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for s in family.samples:
                self.samples.append((s.name, dict(s.labels), s.value))

    def get(self, name: str, **labels: str) -> float | None:
        """The one sample with exactly these labels (others absent or empty), or None."""
        for n, lab, value in self.samples:
            if n == name and {k: v for k, v in lab.items() if v != ""} == labels:
                return value
        return None

    def total(self, name: str, **labels: str) -> float:
        """Sum of every sample of `name` whose labels include these (0 when none)."""
        return sum(v for n, lab, v in self.samples
                   if n == name and all(lab.get(k) == want for k, want in labels.items()))

    def matching(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(lab, v) for n, lab, v in self.samples
                if n == name and all(lab.get(k) == want for k, want in labels.items())]


def scrape(port: int) -> Samples:
    answer = http_request(port, "/metrics")
    assert answer.status == 200, answer
    return Samples(answer.body.decode())


def listening_ports(pid: int) -> set[int]:
    """TCP ports a process listens on: its socket inodes matched against /proc/net/tcp{,6} in LISTEN."""
    inodes: set[str] = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@contextlib.contextmanager
def metered_broker(directory: Path) -> Iterator[BrokerProcess]:
    """A started broker with its metrics endpoint on a free loopback port (see ``metrics_port``)."""
    broker = BrokerProcess(directory, {"metrics.listener": f"http://127.0.0.1:{free_port()}"})
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def metrics_port(broker: BrokerProcess) -> int:
    """The port of a broker's metrics endpoint, from its ``metrics.listener``."""
    return int(str(broker.overrides["metrics.listener"]).rsplit(":", 1)[1])
