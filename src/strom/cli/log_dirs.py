"""`strom log-dirs`: each broker's log dirs and the replicas in them (like kafka-log-dirs.sh --describe).

``alter_replica_log_dirs`` moves replicas between the log dirs of their brokers (AlterReplicaLogDirs):
what the "log_dirs" of a reassignment JSON ask for, for ``strom reassign-partitions`` to call.
DescribeLogDirs and AlterReplicaLogDirs go to each broker itself, over the Kafka protocol.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Annotated, Any

import kafka.errors as Errors
import typer
from kafka.protocol.admin import AlterReplicaLogDirsRequest, DescribeLogDirsRequest
from kafka.protocol.metadata import MetadataRequest

from strom.cli.common import (
    BootstrapOption,
    CommandConfigOption,
    cli_errors,
    client_security,
    connect_timeout,
    fail,
    write_out,
)
from strom.client.broker_client import BrokerClient

METADATA_VERSION = 1
DESCRIBE_LOG_DIRS_VERSION = 1
ALTER_REPLICA_LOG_DIRS_VERSION = 1

# (topic, partition, broker id) -> absolute log dir on that broker
ReplicaLogDirs = Mapping[tuple[str, int, int], str]


class _Brokers:
    """One connection per broker, found through the metadata of the first bootstrap broker that answers."""

    def __init__(self, bootstrap: str, security: Any = None) -> None:
        self.bootstrap = [a.strip() for a in bootstrap.split(",") if a.strip()]
        if not self.bootstrap:
            fail("No broker given: use --bootstrap-server host:port.")
        self.security = security
        self.addresses: dict[int, tuple[str, int]] = {}
        self._clients: list[BrokerClient] = []

    def _client(self, host: str, port: int) -> BrokerClient:
        client = BrokerClient(host.strip("[]") or "127.0.0.1", port, client_id="strom-log-dirs",
                              connect_timeout_s=connect_timeout(), security=self.security,
                              request_timeout_ms=int(connect_timeout() * 1000))
        self._clients.append(client)
        return client

    async def load(self) -> None:
        problems = []
        for address in self.bootstrap:
            host, _, port = address.rpartition(":")
            if not port.isdigit():
                fail(f"Invalid broker address '{address}': expected host:port.")
            try:
                resp = await self._client(host, int(port)).send(MetadataRequest(topics=[]), METADATA_VERSION)
            except (ConnectionError, OSError, TimeoutError) as exc:
                problems.append(f"{address}: {exc}")
                continue
            self.addresses = {b.node_id: (b.host, b.port) for b in resp.brokers}
            return
        fail(f"Could not reach a broker at {','.join(self.bootstrap)}: {'; '.join(problems)}")

    async def send(self, broker: int, request: Any, version: int) -> Any:
        if broker not in self.addresses:
            fail(f"Broker {broker} is not in the cluster (brokers: {sorted(self.addresses)}).")
        host, port = self.addresses[broker]
        try:
            return await self._client(host, port).send(request, version)
        except (ConnectionError, OSError, TimeoutError) as exc:
            fail(f"Could not reach broker {broker} at {host}:{port}: {exc}")

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


async def _describe(bootstrap: str, brokers: list[int] | None, topics: list[str] | None,
                    security: Any) -> dict[str, Any]:
    cluster = _Brokers(bootstrap, security)
    try:
        await cluster.load()
        wanted = sorted(cluster.addresses) if brokers is None else brokers
        out = []
        for broker in wanted:
            resp = await cluster.send(broker, DescribeLogDirsRequest(topics=None), DESCRIBE_LOG_DIRS_VERSION)
            if resp.error_code:
                fail(f"DescribeLogDirs on broker {broker} failed: {Errors.for_code(resp.error_code).__name__}")
            dirs = []
            for result in resp.results:
                partitions = [
                    {"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                     "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                    for t in result.topics if topics is None or t.name in topics for p in t.partitions]
                error = None if not result.error_code else Errors.for_code(result.error_code).__name__
                dirs.append({"logDir": result.log_dir, "error": error, "partitions": partitions})
            out.append({"broker": broker, "logDirs": dirs})
        return {"version": 1, "brokers": out}
    finally:
        await cluster.close()


def describe_log_dirs(bootstrap: str, brokers: list[int] | None = None, topics: list[str] | None = None,
                      security: Any = None) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON: per broker, per log dir, the replicas with size, offset lag and isFuture."""
    return asyncio.run(_describe(bootstrap, brokers, topics, security))


async def _alter(bootstrap: str, moves: ReplicaLogDirs, security: Any) -> dict[tuple[str, int, int], int]:
    cluster = _Brokers(bootstrap, security)
    try:
        await cluster.load()
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (topic, partition, broker), path in moves.items():
            by_broker.setdefault(broker, {}).setdefault(path, {}).setdefault(topic, []).append(partition)
        codes: dict[tuple[str, int, int], int] = {}
        Dir = AlterReplicaLogDirsRequest.AlterReplicaLogDir
        for broker, dirs in sorted(by_broker.items()):
            request = AlterReplicaLogDirsRequest(dirs=[
                Dir(path=path, topics=[Dir.AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in ts.items()])
                for path, ts in dirs.items()])
            resp = await cluster.send(broker, request, ALTER_REPLICA_LOG_DIRS_VERSION)
            for result in resp.results:
                for p in result.partitions:
                    codes[(result.topic_name, p.partition_index, broker)] = p.error_code
        return codes
    finally:
        await cluster.close()


def alter_replica_log_dirs(bootstrap: str, moves: ReplicaLogDirs,
                           security: Any = None) -> dict[tuple[str, int, int], int]:
    """Ask each broker to move its replicas to the given log dirs; the error code per replica (0: moving or
    already there; REPLICA_NOT_AVAILABLE: the broker has no replica yet, and creates it in that dir)."""
    return asyncio.run(_alter(bootstrap, moves, security))


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"Invalid {what} '{text}': expected a comma-separated list of broker ids.")


def log_dirs(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    describe: Annotated[bool, typer.Option("--describe", help="Describe the log dirs of the brokers.")] = False,
    broker_list: Annotated[str | None, typer.Option(
        "--broker-list", help="Comma-separated broker ids to describe (default: every broker).")] = None,
    topic_list: Annotated[str | None, typer.Option(
        "--topic-list", help="Comma-separated topics to list (default: every topic).")] = None,
    command_config: CommandConfigOption = None,
) -> None:
    """Describe each broker's log dirs and the replicas in them (like kafka-log-dirs.sh --describe)."""
    with cli_errors():
        if not describe:
            fail("Give --describe.")
        brokers = _ints(broker_list, "--broker-list")
        topics = [t.strip() for t in topic_list.split(",") if t.strip()] if topic_list is not None else None
        security = client_security(command_config)
        write_out("Querying brokers for log directories information\n")
        described = describe_log_dirs(bootstrap_server, brokers, topics, security)
        ids = ",".join(str(b["broker"]) for b in described["brokers"])
        write_out(f"Received log directory information from brokers {ids}\n")
        write_out(json.dumps(described) + "\n")
