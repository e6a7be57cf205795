"""A cluster whose ZooKeeper and brokers each live in their own network namespace, so links can be cut.

Layout: a hub namespace routes between one namespace per node; node i sits alone on 10.77.i.0/24
behind a veth pair, its address 10.77.i.2, the hub's 10.77.i.1. A cut is a pair of `ip rule ...
blackhole` rules in the hub: forwarded packets between two nodes vanish silently, as on a
partitioned network (no reset, no ICMP), and every other path stays up. The test process (its
Kafka clients and the harness's kazoo session) works from the hub namespace: `NetnsLab.inside()`
moves the calling thread there (threads it starts inherit it), so it reaches every node and no
cut ever isolates it. Nothing is configured in the host's own namespace. Processes are stopped
by pid; namespaces are deleted by the names this lab created.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from strom.metadata.zk.zookeeper_server import ZooKeeperServer
from tests.support.broker import BrokerProcess
from tests.support.cluster import ClusterProcess
from tests.support.raw_client import RawClient

CLONE_NEWNET = 0x40000000
SUBNET = "10.77"
ZOOKEEPER_INDEX = 100
KAFKA_PORT = 9092
ZOOKEEPER_PORT = 2181
COMMAND_TIMEOUT_S = 15


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here (not root, no `ip`, no kernel support), or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"strom-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        stderr = getattr(exc, "stderr", b"") or b""
        return f"`ip netns add` failed: {stderr.decode(errors='replace').strip() or exc}"
    with contextlib.suppress(Exception):
        _ip("netns", "del", probe)
    return None


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


class NetnsLab:
    """A hub namespace and one namespace per node; `cut` and `heal` change only the hub's rules."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex[:6]
        self.hub = f"strom-{self.token}-hub"
        self.addresses: dict[str, str] = {}  # node name -> its address
        self.namespaces: dict[str, str] = {}  # node name -> its namespace
        self._rules: set[tuple[str, str]] = set()
        self._created: list[str] = []

    def setup(self) -> NetnsLab:
        _ip("netns", "add", self.hub)
        self._created.append(self.hub)
        _ip("-n", self.hub, "link", "set", "lo", "up")
        subprocess.run(["ip", "netns", "exec", self.hub, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
                       check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)
        return self

    def add_node(self, name: str, index: int) -> str:
        """A namespace for node `name` on its own subnet behind the hub; returns its address."""
        ns = f"strom-{self.token}-{name}"
        _ip("netns", "add", ns)
        self._created.append(ns)
        hub_side = f"s{self.token}h{index}"
        _ip("link", "add", hub_side, "netns", self.hub, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.hub, "addr", "add", f"{SUBNET}.{index}.1/24", "dev", hub_side)
        _ip("-n", self.hub, "link", "set", hub_side, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{SUBNET}.{index}.2/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "default", "via", f"{SUBNET}.{index}.1")
        self.namespaces[name] = ns
        self.addresses[name] = f"{SUBNET}.{index}.2"
        return self.addresses[name]

    def cut(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Drop every packet between a node of `side_a` and a node of `side_b`, both ways."""
        for a in side_a:
            for b in side_b:
                for src, dst in ((a, b), (b, a)):
                    pair = (self.addresses[src], self.addresses[dst])
                    if pair not in self._rules:
                        _ip("-n", self.hub, "rule", "add", "from", pair[0], "to", pair[1], "blackhole")
                        self._rules.add(pair)

    def heal(self) -> None:
        """Remove every cut."""
        for src, dst in sorted(self._rules):
            _ip("-n", self.hub, "rule", "del", "from", src, "to", dst, "blackhole")
        self._rules.clear()

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """Run the calling thread (and the threads it starts) in the hub namespace until the block ends."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            hub = os.open(f"/run/netns/{self.hub}", os.O_RDONLY)
            try:
                _setns(hub)
            finally:
                os.close(hub)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(own)

    def exec_prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[name]]

    def close(self) -> None:
        """Delete every namespace this lab made (their veths go with them); stop the processes first."""
        for ns in reversed(self._created):
            with contextlib.suppress(Exception):
                _ip("netns", "del", ns)
        self._created.clear()


class NetnsZooKeeper(ZooKeeperServer):
    """The ZooKeeper server, listening on its namespace's address."""

    def __init__(self, data_dir: str | os.PathLike[str], lab: NetnsLab, node: str) -> None:
        super().__init__(data_dir, client_port=ZOOKEEPER_PORT)
        self.lab = lab
        self.node = node
        self.host = lab.addresses[node]

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.client_port}"

    def write_config(self) -> Path:
        path = super().write_config()
        text = path.read_text().replace("clientPortAddress=127.0.0.1", f"clientPortAddress={self.host}")
        path.write_text(text)
        return path

    def command(self) -> list[str]:
        return [*self.lab.exec_prefix(self.node), *super().command()]

    def serving_mode(self) -> str | None:
        try:
            with socket.create_connection((self.host, self.client_port), timeout=1.0) as s:
                s.sendall(b"srvr")
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
        except OSError:
            return None
        for line in answer.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


class NetnsBroker(BrokerProcess):
    """A broker process started with `ip netns exec` (which execs: the pid is the broker's own)."""

    def __init__(self, data_dir: str | os.PathLike[str], lab: NetnsLab, node: str) -> None:
        super().__init__(data_dir, port=KAFKA_PORT)
        self.lab = lab
        self.node = node
        self.host = lab.addresses[node]

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        self.overrides["listeners"] = f"PLAINTEXT://{self.host}:{self.port}"
        return [*self.lab.exec_prefix(self.node), *super().command()]


class _NetnsRawClient(RawClient):
    def __init__(self, broker: NetnsBroker) -> None:  # noqa: D107 - RawClient, on the broker's own address
        self.sock = socket.create_connection((broker.host, broker.port), timeout=10)
        self.correlation = 0
        self.client_id = "raw"


class NetnsCluster(ClusterProcess):
    """ClusterProcess with ZooKeeper on node "zk" and broker N on node "bN" of `lab`.

    Build, start and use it inside `lab.inside()`: the harness's own clients must reach the nodes.
    """

    def __init__(self, base_dir: str | os.PathLike[str], lab: NetnsLab, brokers: int = 3, **kwargs: object) -> None:
        super().__init__(base_dir, brokers, **kwargs)  # type: ignore[arg-type]
        self.lab = lab
        lab.add_node("zk", ZOOKEEPER_INDEX)
        self.zookeeper = NetnsZooKeeper(self.base_dir / "zookeeper", lab, "zk")
        for broker_id in self.broker_ids:
            lab.add_node(f"b{broker_id}", broker_id)
            broker = NetnsBroker(self.base_dir / f"broker-{broker_id}", lab, f"b{broker_id}")
            self._brokers[broker_id] = broker
        for broker_id, broker in self._brokers.items():
            broker.overrides = self._broker_config(broker_id)

    def _raw_client(self, broker_id: int) -> RawClient:
        broker = self._brokers[broker_id]
        assert isinstance(broker, NetnsBroker)
        return _NetnsRawClient(broker)
