"""`strom zookeeper-shell` against a real ZooKeeper server, checked on what a user sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from strom.metadata.zk import KafkaZkClient
from strom.metadata.zk.zookeeper_server import ZooKeeperServer, free_port

pytestmark = pytest.mark.zookeeper


def shell(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "zookeeper-shell", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer) -> Iterator[tuple[str, uuid.UUID, int]]:
    """A chroot holding one broker and one topic, as a Kafka cluster would leave them."""
    connect = zookeeper.connect_string + "/shell"
    topic_id = uuid.uuid4()
    with KafkaZkClient(connect) as c:
        epoch = c.register_broker(1, ["PLAINTEXT://127.0.0.1:9092"])
        c.create_topic("orders", topic_id, {0: [1], 1: [1]}, {"retention.ms": "1000"})
        yield connect, topic_id, epoch


def test_ls_prints_children_like_zkcli(cluster: tuple[str, uuid.UUID, int]) -> None:
    connect, _, _ = cluster
    result = shell(connect, "ls", "/brokers/ids")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[1]\n"
    assert shell(connect, "ls", "/brokers/topics").stdout == "[orders]\n"


def test_ls_recursive(cluster: tuple[str, uuid.UUID, int]) -> None:
    connect, _, _ = cluster
    lines = shell(connect, "ls", "-R", "/brokers").stdout.splitlines()
    assert lines[0] == "/brokers"
    assert {"/brokers/ids", "/brokers/ids/1", "/brokers/topics", "/brokers/topics/orders"} <= set(lines)


def test_get_prints_the_json(cluster: tuple[str, uuid.UUID, int]) -> None:
    connect, topic_id, _ = cluster
    data = json.loads(shell(connect, "get", "/brokers/topics/orders").stdout)
    assert data["partitions"] == {"0": [1], "1": [1]}
    assert data["version"] == 3
    config = json.loads(shell(connect, "get", "/config/topics/orders").stdout)
    assert config == {"version": 1, "config": {"retention.ms": "1000"}}


def test_stat_and_get_s(cluster: tuple[str, uuid.UUID, int]) -> None:
    connect, _, epoch = cluster
    stat = shell(connect, "stat", "/brokers/ids/1").stdout.splitlines()
    assert stat[0] == f"cZxid = 0x{epoch:x}"
    assert "dataVersion = 0" in stat and "numChildren = 0" in stat
    assert any(line.startswith("ephemeralOwner = 0x") and line != "ephemeralOwner = 0x0" for line in stat)
    got = shell(connect, "get", "-s", "/brokers/ids/1").stdout.splitlines()
    assert json.loads(got[0])["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    assert got[1] == f"cZxid = 0x{epoch:x}"


def test_commands_from_stdin(cluster: tuple[str, uuid.UUID, int]) -> None:
    connect, _, _ = cluster
    result = shell(connect, stdin="ls /brokers/ids\nls /admin\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[1]", "[delete_topics]"]


def test_errors_are_one_readable_line(cluster: tuple[str, uuid.UUID, int]) -> None:
    connect, _, _ = cluster
    missing = shell(connect, "get", "/no/such/node")
    assert missing.returncode == 1
    assert "Node does not exist: /no/such/node" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = shell(connect, "rmr", "/")
    assert bad.returncode == 1 and "unknown command 'rmr'" in bad.stderr


def test_unreachable_zookeeper() -> None:
    result = shell(f"127.0.0.1:{free_port()}", "--timeout", "1", "ls", "/")
    assert result.returncode == 1
    assert "Could not connect to ZooKeeper" in result.stderr
    assert "Traceback" not in result.stderr
