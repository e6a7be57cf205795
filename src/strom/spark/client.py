"""TaskClient: a blocking Kafka-protocol client for code running inside a Spark task.

The source's read tasks want raw record batches (Fetch) and the sink's write tasks want to send
batches they built themselves (Produce); librdkafka offers neither, only one Python object per
record. This client speaks the protocol through Strom's own pieces: one pipelined
``BrokerClient`` per broker (TLS and SASL included) driven by a private asyncio loop, and
metadata kept per topic-partition. The loop runs in a daemon thread, so a request can be in
flight (``submit``) while the task decodes the previous answer: ctypes releases the GIL around
the native kernels. It is cached per Python worker (Spark reuses workers across
tasks), so connections and metadata outlive a task.

Leader changes are the caller's to retry (see ``RETRIABLE``): refresh metadata, look the leader
up again, resend, bounded like Kafka's clients (strom.spark.retry).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import socket
import threading
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from kafka.errors import for_code
from kafka.protocol.metadata import MetadataRequest

from strom.client.broker_client import BrokerClient
from strom.security.client_security import ClientSecurity
from strom.spark.errors import StromBrokerUnreachableError

T = TypeVar("T")

METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7
LIST_OFFSETS_RETRY_S = 30.0  # how long list_offset rides out a leader change

# Error codes a leader change or a broker restart explains: refresh metadata and try again.
NOT_LEADER_OR_FOLLOWER = 6
RETRIABLE = frozenset({
    3,   # UNKNOWN_TOPIC_OR_PARTITION (metadata not yet propagated; callers bound it)
    5,   # LEADER_NOT_AVAILABLE
    6,   # NOT_LEADER_OR_FOLLOWER
    7,   # REQUEST_TIMED_OUT
    9,   # REPLICA_NOT_AVAILABLE
    13,  # NETWORK_EXCEPTION
    19,  # NOT_ENOUGH_REPLICAS
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE
})


class KafkaProtocolError(RuntimeError):
    """A broker answered with an error code; ``code`` is Kafka's number, the message names it."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: {error_name(code)} (error {code})")
        self.code = code

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


# Codes kafka-python still calls by their old names.
_RENAMED = {6: "NOT_LEADER_OR_FOLLOWER", 10: "MESSAGE_TOO_LARGE"}


def error_name(code: int) -> str:
    """Kafka's name for an error code (MESSAGE_TOO_LARGE, NOT_LEADER_OR_FOLLOWER, ...)."""
    if code in _RENAMED:
        return _RENAMED[code]
    return str(getattr(for_code(code), "message", code)) if code else "NONE"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"invalid broker address {address!r}: expected host:port")
    return host.strip("[]"), int(port)


# How long check_reachable keeps trying addresses that refuse connections (a broker still starting).
REACHABLE_WAIT_S = 1.0


def check_reachable(servers: str, *, wait_s: float = REACHABLE_WAIT_S, option: str = "kafka.bootstrap.servers") -> None:
    """Fail fast, with the address and the option in the message, when no bootstrap broker accepts TCP.

    Run on the driver before planning: otherwise the first metadata call spends its whole
    time-out (15 s and more) retrying, and the user gets a transport error code instead of
    the address they typed. Only reachability is checked; security and protocol errors come
    from the real requests.
    """
    addresses = [a.strip() for a in servers.split(",") if a.strip()]
    deadline = time.monotonic() + wait_s
    while True:
        reasons: dict[str, str] = {}
        for address in addresses:
            try:
                host, port = _split(address)
            except ValueError as exc:
                from strom.spark.options import StromOptionError

                raise StromOptionError(f"Option '{option}': {exc}.") from None
            try:
                with socket.create_connection((host, port), timeout=max(0.5, min(5.0, deadline - time.monotonic()))):
                    return
            except OSError as exc:
                reasons[address] = exc.strerror or type(exc).__name__
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    detail = "; ".join(f"{a}: {r}" for a, r in reasons.items())
    raise StromBrokerUnreachableError(
        f"could not reach a broker at {', '.join(addresses)} ({option}): {detail}. "
        "Is the broker running, and is this the address it listens on?"
    )


class TaskClient:
    """Connections to the brokers of one cluster and the metadata to route requests to leaders."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.bootstrap = [_split(a) for a in str(conf["bootstrap.servers"]).split(",") if a.strip()]
        if not self.bootstrap:
            raise ValueError("bootstrap.servers names no broker")
        props = {k: str(v) for k, v in conf.items()}
        self.security = ClientSecurity.from_client_properties(props)
        self.client_id = props.get("client.id", "strom-spark")
        self.request_timeout_ms = int(props.get("request.timeout.ms", 30000))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="strom-task-client", daemon=True)
        self._thread.start()
        self._clients: dict[tuple[str, int], BrokerClient] = {}
        self.nodes: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.partition_counts: dict[str, int] = {}

    # -- plumbing ----------------------------------------------------------------------
    def submit(self, awaitable: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Start a coroutine (or a gather of several) on the client's loop; its result comes later."""
        async def wrap() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop)

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run a coroutine (or a gather of several, for pipelining) on the client's loop and wait for it."""
        return self.submit(awaitable).result()

    def connection(self, node: int | tuple[str, int]) -> BrokerClient:
        """The BrokerClient for a node id (from metadata) or an address."""
        address = self.nodes[node] if isinstance(node, int) else node
        client = self._clients.get(address)
        if client is None:
            client = BrokerClient(address[0], address[1], client_id=self.client_id,
                                  request_timeout_ms=self.request_timeout_ms, security=self.security)
            self._clients[address] = client
        return client

    def send(self, node: int | tuple[str, int], request: Any, version: int) -> Any:
        return self.run(self.connection(node).send(request, version))

    def send_raw(self, node: int | tuple[str, int], api_key: int, version: int, body: bytes) -> memoryview:
        return self.run(self.connection(node).send_raw(api_key, version, body))

    def close(self) -> None:
        for client in self._clients.values():
            self.run(client.close())
        self._clients.clear()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # -- metadata ----------------------------------------------------------------------
    def refresh_metadata(self, topics: list[str], *, allow_auto_topic_creation: bool = False) -> dict[str, int]:
        """Ask a known broker (any, else a bootstrap one) for the topics' leaders; a producer lets the
        broker create a missing topic (auto.create.topics.enable), as librdkafka's does.

        Returns the error code of each topic the broker answered with an error (3: unknown,
        5: being created). Raises ConnectionError when no broker answers; callers retry within
        their deadline."""
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                  allow_auto_topic_creation=allow_auto_topic_creation, include_topic_authorized_operations=False,
                                  include_cluster_authorized_operations=False)
        candidates = list(self.nodes.values())
        random.shuffle(candidates)
        last: BaseException | None = None
        for address in [*candidates, *self.bootstrap]:
            try:
                resp = self.send(address, request, METADATA_VERSION)
                break
            except (ConnectionError, TimeoutError, OSError) as exc:
                last = exc
        else:
            raise ConnectionError(f"no broker answered a Metadata request: {last}")
        self.nodes.update({b.node_id: (b.host, b.port) for b in resp.brokers})
        errors: dict[str, int] = {}
        for t in resp.topics:
            if t.error_code:
                self.partition_counts.pop(t.name, None)
                errors[t.name] = t.error_code
                continue
            self.partition_counts[t.name] = len(t.partitions)
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id
        return errors

    def leader(self, topic: str, partition: int, *, refresh: bool = False) -> int:
        """The leader's node id; raises KafkaProtocolError(LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION)."""
        tp = (topic, partition)
        if refresh or tp not in self.leaders:
            self.refresh_metadata([topic])
        if topic not in self.partition_counts or partition >= self.partition_counts[topic]:
            raise KafkaProtocolError(3, f"{topic}-{partition}")
        node = self.leaders.get(tp, -1)
        if node < 0 or node not in self.nodes:
            raise KafkaProtocolError(5, f"{topic}-{partition}")
        return node

    # -- ListOffsets -------------------------------------------------------------------
    def list_offset(self, topic: str, partition: int, timestamp: int, *, read_committed: bool = False) -> int:
        """ListOffsets on the leader: -2 earliest, -1 latest (high watermark or LSO), else by time."""
        from kafka.protocol.consumer import ListOffsetsRequest

        req = ListOffsetsRequest(replica_id=-1, isolation_level=1 if read_committed else 0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
        # Only the leader answers, and a leader that just took over answers OFFSET_NOT_AVAILABLE until its
        # HW has caught up: a leader change is retried here on fresh metadata, within a bound.
        deadline = time.monotonic() + LIST_OFFSETS_RETRY_S
        refresh = False
        while True:
            try:
                node = self.leader(topic, partition, refresh=refresh)
                part = self.send(node, req, LIST_OFFSETS_VERSION).topics[0].partitions[0]
                if part.error_code:
                    raise KafkaProtocolError(part.error_code, f"ListOffsets {topic}-{partition}")
                return int(part.offset)
            except KafkaProtocolError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
            except (ConnectionError, TimeoutError, OSError):  # the leader this client knew is gone
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
            refresh = True


_CLIENTS: dict[tuple[tuple[str, str], ...], TaskClient] = {}


def task_client(conf: Mapping[str, Any]) -> TaskClient:
    """The worker's client for this configuration (Spark reuses Python workers across tasks)."""
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    client = _CLIENTS.get(key)
    if client is None:
        client = TaskClient(conf)
        _CLIENTS[key] = client
    return client

