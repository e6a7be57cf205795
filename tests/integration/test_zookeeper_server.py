"""ZooKeeperServer: the real server process starts, stops, crashes and comes back with its data."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from strom.metadata.zk.zookeeper_server import ZooKeeperServer, four_letter_word

pytestmark = pytest.mark.zookeeper


def _client(server: ZooKeeperServer) -> KazooClient:
    zk = KazooClient(hosts=server.connect_string, timeout=5.0)
    zk.start(timeout=30)
    return zk


def test_standalone_serves_on_loopback(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper.is_running()
    assert zookeeper.connect_string.startswith("127.0.0.1:")
    assert zookeeper.serving_mode() == "standalone"
    assert four_letter_word(zookeeper.client_port, "ruok") == "imok"
    config = zookeeper.config_path.read_text()
    assert "clientPortAddress=127.0.0.1" in config and "admin.enableServer=false" in config


def test_data_survives_stop_and_kill9(zookeeper_factory: Callable[..., ZooKeeperServer]) -> None:
    server = zookeeper_factory()
    zk = _client(server)
    zk.create("/kept", b"v1", makepath=True)
    zk.stop()
    zk.close()
    pid = server.pid

    server.stop()
    assert not server.is_running() and server.serving_mode() is None
    server.start()
    assert server.pid != pid
    zk = _client(server)
    assert zk.get("/kept")[0] == b"v1"
    zk.set("/kept", b"v2")
    zk.stop()
    zk.close()

    server.kill9()
    assert not server.is_running()
    server.start()
    zk = _client(server)
    try:
        assert zk.get("/kept")[0] == b"v2"
    finally:
        zk.stop()
        zk.close()


def test_stop_is_idempotent(zookeeper_factory: Callable[..., ZooKeeperServer]) -> None:
    server = zookeeper_factory(start=False)
    server.stop()  # never started: nothing to do
    server.start()
    server.stop()
    server.stop()
    assert server.pid is None


@pytest.mark.slow
def test_ensemble_has_one_leader(zookeeper_ensemble: list[ZooKeeperServer]) -> None:
    modes = sorted(s.serving_mode() or "" for s in zookeeper_ensemble)
    assert modes == ["follower", "follower", "leader"]
    for s in zookeeper_ensemble:
        assert f"server.{s.server_id}=127.0.0.1:" in s.config_path.read_text()
        assert (s.data_dir / "data" / "myid").read_text().strip() == str(s.server_id)
