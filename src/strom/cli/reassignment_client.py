"""The requests partition reassignment needs, spoken over Strom's own broker client.

confluent-kafka's AdminClient has no reassignment calls, so `strom reassign-partitions` and
`strom cluster retire-broker` send Kafka's requests themselves with kafka-python's message
classes: Metadata (brokers, racks, the controller, replica sets), AlterPartitionReassignments
and ListPartitionReassignments (to the controller, following it when it moves),
IncrementalAlterConfigs (replication throttles; a broker's own configs go to that broker, as
Kafka's admin client routes them), DescribeConfigs (min.insync.replicas) and
AlterReplicaLogDirs (to the broker that holds the replica).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.admin.cluster import AlterReplicaLogDirsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from strom.cli.common import connect_timeout, fail
from strom.client.broker_client import BrokerClient
from strom.security.client_security import ClientSecurity

METADATA_VERSION = 9
API_VERSIONS_VERSION = 0
ALTER_REASSIGNMENTS_API = 45
LIST_REASSIGNMENTS_API = 46
ALTER_REPLICA_LOG_DIRS_API = 34
REASSIGNMENT_VERSION = 0
INCREMENTAL_ALTER_CONFIGS_VERSION = 0
DESCRIBE_CONFIGS_VERSION = 1
ALTER_REPLICA_LOG_DIRS_VERSION = 1
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
CONFIG_SET = 0
CONFIG_DELETE = 1
NOT_CONTROLLER = Errors.NotControllerError.errno
CONTROLLER_ATTEMPTS = 10

TopicPartition = tuple[str, int]


def error_name(code: int) -> str:
    """Kafka's name of an error code (NOT_CONTROLLER), as its tools print them."""
    if not code:
        return "NONE"
    return str(getattr(Errors.for_code(code), "message", code))


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int


@dataclass(slots=True)
class ClusterView:
    """One Metadata answer: live brokers, the controller and every partition's replica set."""

    brokers: dict[int, Broker]
    controller_id: int
    partitions: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    missing_topics: list[str] = field(default_factory=list)

    def topic_partitions(self, topic: str) -> dict[int, PartitionInfo]:
        return {p: info for (t, p), info in self.partitions.items() if t == topic}

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.partitions})


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A reassignment in progress, as ListPartitionReassignments reports it."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


class ReassignmentAdmin:
    """One BrokerClient per broker, opened on demand; `close()` ends them all."""

    def __init__(self, bootstrap: str, security: ClientSecurity | None = None,
                 request_timeout_ms: int = 30000) -> None:
        self.security = security
        self.request_timeout_ms = request_timeout_ms
        self.bootstrap = [self._split(b) for b in bootstrap.split(",") if b.strip()]
        if not self.bootstrap:
            fail("No broker given: use --bootstrap-server host:port.")
        self._clients: dict[tuple[str, int], BrokerClient] = {}
        self._api_versions: dict[int, dict[int, tuple[int, int]]] = {}
        self.view: ClusterView | None = None

    @staticmethod
    def _split(address: str) -> tuple[str, int]:
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            fail(f"Invalid broker address '{address}': expected host:port.")
        return host.strip("[]"), int(port)

    def _client(self, host: str, port: int) -> BrokerClient:
        key = (host, port)
        if key not in self._clients:
            self._clients[key] = BrokerClient(host, port, client_id="strom-reassign-partitions",
                                              request_timeout_ms=self.request_timeout_ms,
                                              connect_timeout_s=connect_timeout(), security=self.security)
        return self._clients[key]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()

    async def _send(self, broker: Broker | None, request: Any, version: int) -> Any:
        """To `broker`, or to the first bootstrap broker (then the known brokers) that answers."""
        if broker is not None:
            targets = [(broker.host, broker.port)]
        else:
            known = [(b.host, b.port) for b in self.view.brokers.values()] if self.view else []
            targets = list(dict.fromkeys(self.bootstrap + known))
        problems = []
        for host, port in targets:
            try:
                return await self._client(host, port).send(request, version)
            except (ConnectionError, TimeoutError) as exc:
                problems.append(str(exc) or type(exc).__name__)
        where = f"broker {broker.node_id} ({broker.host}:{broker.port})" if broker else \
            ",".join(f"{h}:{p}" for h, p in targets)
        fail(f"Could not reach {where}: {'; '.join(problems)}")

    # -- metadata ----------------------------------------------------------------------------------------
    async def load_metadata(self, topics: Iterable[str] | None = None) -> ClusterView:
        """Brokers, controller and partitions of `topics` (every topic when None); unknown topics are
        listed in `missing_topics` rather than refused, so callers can say which ones."""
        names = None if topics is None else list(dict.fromkeys(topics))
        request = MetadataRequest(
            topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in names],
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        response = await self._send(None, request, METADATA_VERSION)
        view = ClusterView({b.node_id: Broker(b.node_id, b.host, b.port, b.rack or None) for b in response.brokers},
                           response.controller_id)
        for topic in response.topics:
            if topic.error_code == Errors.UnknownTopicOrPartitionError.errno:
                view.missing_topics.append(topic.name)
                continue
            if topic.error_code and not topic.partitions:
                fail(f"Topic '{topic.name}': {error_name(topic.error_code)}")
            for p in topic.partitions:
                view.partitions[(topic.name, p.partition_index)] = PartitionInfo(
                    tuple(p.replica_nodes), tuple(p.isr_nodes), p.leader_id)
        self.view = view
        return view

    async def controller(self) -> Broker:
        """The controller named by the latest metadata (loaded again if it names none we know)."""
        view = self.view or await self.load_metadata([])
        broker = view.brokers.get(view.controller_id)
        if broker is None:
            view = await self.load_metadata([])
            broker = view.brokers.get(view.controller_id)
        if broker is None:
            fail("The cluster has no controller right now; try again in a few seconds.")
        return broker

    async def supports(self, broker: Broker, api_key: int, version: int) -> bool:
        if broker.node_id not in self._api_versions:
            response = await self._send(broker, ApiVersionsRequest(), API_VERSIONS_VERSION)
            self._api_versions[broker.node_id] = {k.api_key: (k.min_version, k.max_version)
                                                  for k in response.api_keys}
        low, high = self._api_versions[broker.node_id].get(api_key, (1, 0))
        return low <= version <= high

    async def _to_controller(self, make_request: Any, api_key: int, what: str) -> Any:
        """Send to the controller; follow it (fresh metadata) while it answers NOT_CONTROLLER."""
        for attempt in range(CONTROLLER_ATTEMPTS):
            controller = await self.controller()
            if not await self.supports(controller, api_key, REASSIGNMENT_VERSION):
                fail(f"The controller (broker {controller.node_id}) does not support {what} "
                     f"(API key {api_key} v{REASSIGNMENT_VERSION}); this cluster cannot reassign partitions yet.")
            response = await self._send(controller, make_request(), REASSIGNMENT_VERSION)
            if response.error_code != NOT_CONTROLLER:
                return response
            await asyncio.sleep(min(0.2 * (attempt + 1), 1.0))
            await self.load_metadata([])
        fail(f"No broker accepted {what} as controller; try again once the controller election settles.")

    # -- reassignments --------------------------------------------------------------------------------
    async def alter_reassignments(self, targets: dict[TopicPartition, list[int] | None],
                                  timeout_ms: int = 60000) -> dict[TopicPartition, tuple[int, str | None]]:
        """Start (replicas) or cancel (None) reassignments; (error code, message) per partition."""
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), replicas in sorted(targets.items()):
            by_topic.setdefault(topic, []).append(
                AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(
                    partition_index=partition, replicas=None if replicas is None else list(replicas)))

        def make() -> Any:
            return AlterPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=[
                AlterPartitionReassignmentsRequest.ReassignableTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()])

        response = await self._to_controller(make, ALTER_REASSIGNMENTS_API, "AlterPartitionReassignments")
        if response.error_code:
            fail(f"The controller refused the reassignment: {response.error_message or error_name(response.error_code)}"
                 f" ({error_name(response.error_code)})")
        return {(t.name, p.partition_index): (p.error_code, p.error_message)
                for t in response.responses for p in t.partitions}

    async def list_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, OngoingReassignment]:
        """Reassignments in progress (of `partitions`, or all)."""
        topics = None
        if partitions is not None:
            grouped: dict[str, list[int]] = {}
            for topic, partition in partitions:
                grouped.setdefault(topic, []).append(partition)
            topics = [ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(
                name=t, partition_indexes=sorted(ps)) for t, ps in sorted(grouped.items())]

        def make() -> Any:
            return ListPartitionReassignmentsRequest(timeout_ms=30000, topics=topics)

        response = await self._to_controller(make, LIST_REASSIGNMENTS_API, "ListPartitionReassignments")
        if response.error_code:
            fail(f"Could not list partition reassignments: "
                 f"{response.error_message or error_name(response.error_code)} ({error_name(response.error_code)})")
        return {(t.name, p.partition_index): OngoingReassignment(tuple(p.replicas), tuple(p.adding_replicas),
                                                                 tuple(p.removing_replicas))
                for t in response.topics for p in t.partitions}

    # -- configs -------------------------------------------------------------------------------------------
    async def alter_configs(self, resource_type: int, name: str, set_: dict[str, str],
                            delete: Iterable[str] = ()) -> None:
        """IncrementalAlterConfigs SET/DELETE of one resource; a broker's configs go to that broker."""
        configs = [(k, CONFIG_SET, v) for k, v in set_.items()] + [(k, CONFIG_DELETE, None) for k in delete]
        if not configs:
            return
        request = IncrementalAlterConfigsRequest(resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type, resource_name=name,
                configs=[IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig(
                    name=k, config_operation=op, value=v) for k, op, v in configs])],
            validate_only=False)
        target = None
        if resource_type == BROKER_RESOURCE and self.view is not None:
            target = self.view.brokers.get(int(name))
        response = await self._send(target, request, INCREMENTAL_ALTER_CONFIGS_VERSION)
        for result in response.responses:
            if result.error_code:
                kind = "broker" if resource_type == BROKER_RESOURCE else "topic"
                fail(f"Could not change the configs of {kind} {name}: "
                     f"{result.error_message or error_name(result.error_code)} ({error_name(result.error_code)})")

    async def min_insync_replicas(self, topics: Iterable[str]) -> dict[str, int]:
        """min.insync.replicas of each topic (its own setting or the broker default)."""
        names = sorted(set(topics))
        if not names:
            return {}
        request = DescribeConfigsRequest(resources=[(TOPIC_RESOURCE, t, ["min.insync.replicas"]) for t in names],
                                         include_synonyms=False)
        response = await self._send(None, request, DESCRIBE_CONFIGS_VERSION)
        out: dict[str, int] = {}
        for result in response.results:
            if result.error_code:
                continue  # a topic deleted meanwhile: nothing to protect
            for config in result.configs:
                if config.name == "min.insync.replicas" and config.value is not None:
                    out[result.resource_name] = int(config.value)
        return out

    # -- log dirs ------------------------------------------------------------------------------------------
    async def check_log_dir_moves(self, broker: Broker) -> None:
        """Refuse explicit log dirs for a broker that cannot move replicas between its directories."""
        if not await self.supports(broker, ALTER_REPLICA_LOG_DIRS_API, ALTER_REPLICA_LOG_DIRS_VERSION):
            fail(f"Broker {broker.node_id} cannot move replicas between log directories (it does not "
                 "support AlterReplicaLogDirs); use \"any\" as the log dir, or leave \"log_dirs\" out.")

    async def alter_replica_log_dirs(self, broker: Broker, dirs: dict[TopicPartition, str]
                                     ) -> dict[TopicPartition, int]:
        """Ask `broker` to keep its replicas in the given log dirs (JBOD); error code per partition."""
        await self.check_log_dir_moves(broker)
        by_dir: dict[str, dict[str, list[int]]] = {}
        for (topic, partition), path in sorted(dirs.items()):
            by_dir.setdefault(path, {}).setdefault(topic, []).append(partition)
        request = AlterReplicaLogDirsRequest(dirs=[
            AlterReplicaLogDirsRequest.AlterReplicaLogDir(path=path, topics=[
                AlterReplicaLogDirsRequest.AlterReplicaLogDir.AlterReplicaLogDirTopic(name=t, partitions=ps)
                for t, ps in topics.items()])
            for path, topics in by_dir.items()])
        response = await self._send(broker, request, ALTER_REPLICA_LOG_DIRS_VERSION)
        return {(t.topic_name, p.partition_index): p.error_code for t in response.results for p in t.partitions}
