"""`strom transactions`: inspect transactions and abort hanging ones (like kafka-transactions.sh).

    strom transactions --bootstrap-server B list
    strom transactions --bootstrap-server B describe --transactional-id X
    strom transactions --bootstrap-server B describe-producers --topic T --partition P
    strom transactions --bootstrap-server B abort --topic T --partition P --start-offset O
    strom transactions --bootstrap-server B find-hanging --broker-id N

confluent-kafka's AdminClient has no transaction APIs, so this tool speaks the protocol
itself (ListTransactions, DescribeTransactions, DescribeProducers, FindCoordinator,
WriteTxnMarkers) with the broker client Strom's brokers use among themselves. Output
columns follow Kafka's tool so scripts written for it keep working.

A hanging transaction is one a partition still counts as open (it holds back the last
stable offset, so read_committed consumers stall) while its coordinator no longer knows it,
e.g. after a coordinator lost the marker. ``abort`` writes the ABORT marker straight to the
partition leader, as Kafka's tool does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import kafka.errors as Errors
import typer
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from strom.cli.common import (
    PLAIN_HELP,
    BootstrapOption,
    CommandConfigOption,
    cli_errors,
    client_security,
    connect_timeout,
    fail,
    write_out,
)
from strom.client.broker_client import BrokerClient
from strom.security.client_security import ClientSecurity

T = TypeVar("T")

METADATA_VERSION = 9
FIND_COORDINATOR_VERSION = 3  # one key per request; v4 batches keys
LIST_TRANSACTIONS_VERSION = 0
DESCRIBE_TRANSACTIONS_VERSION = 0
DESCRIBE_PRODUCERS_VERSION = 0
WRITE_TXN_MARKERS_VERSION = 1
TRANSACTION_KEY_TYPE = 1


def _error_name(code: int) -> str:
    return Errors.for_code(code).__name__.removesuffix("Error") if code else "NONE"


def _check(code: int, what: str) -> None:
    if code:
        fail(f"{what}: {_error_name(code)} (error code {code})")


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, as Kafka's tools print them."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["\t".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines) + "\n"


@dataclass(slots=True)
class Broker:
    node_id: int
    host: str
    port: int


@dataclass(slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int


class TransactionsAdmin:
    """The requests of kafka-transactions.sh, over one BrokerClient per broker."""

    def __init__(self, bootstrap: str, security: ClientSecurity | None = None) -> None:
        self.security = security
        self.bootstrap = [self._split(b) for b in bootstrap.split(",") if b.strip()]
        if not self.bootstrap:
            fail("No broker given: use --bootstrap-server host:port.")
        self._clients: dict[tuple[str, int], BrokerClient] = {}
        self.brokers: dict[int, Broker] = {}
        self.leaders: dict[tuple[str, int], int] = {}

    @staticmethod
    def _split(address: str) -> tuple[str, int]:
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            fail(f"Invalid broker address '{address}': expected host:port.")
        return host, int(port)

    def _client(self, host: str, port: int) -> BrokerClient:
        key = (host, port)
        if key not in self._clients:
            self._clients[key] = BrokerClient(host, port, client_id="strom-transactions",
                                              connect_timeout_s=connect_timeout(), security=self.security)
        return self._clients[key]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()

    async def _send(self, broker: Broker | None, request: Any, version: int) -> Any:
        targets = [(broker.host, broker.port)] if broker is not None else self.bootstrap
        last: Exception | None = None
        for host, port in targets:
            try:
                return await self._client(host, port).send(request, version)
            except (ConnectionError, TimeoutError) as exc:
                last = exc
        fail(f"Could not reach a broker at {','.join(f'{h}:{p}' for h, p in targets)}: {last}")

    async def load_metadata(self, topics: list[str] | None = None) -> None:
        req_topics = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        resp = await self._send(None, MetadataRequest(topics=req_topics, allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False,
                                                      include_cluster_authorized_operations=False),
                                METADATA_VERSION)
        self.brokers = {b.node_id: Broker(b.node_id, b.host, b.port) for b in resp.brokers}
        for t in resp.topics:
            if t.error_code:
                if topics is not None:
                    _check(t.error_code, f"Topic '{t.name}'")
                continue
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id

    def leader(self, topic: str, partition: int) -> Broker:
        leader_id = self.leaders.get((topic, partition))
        if leader_id is None:
            fail(f"Partition {topic}-{partition} does not exist.")
        broker = self.brokers.get(leader_id)
        if broker is None:
            fail(f"Partition {topic}-{partition} has no leader right now.")
        return broker

    # -- the requests --------------------------------------------------------------
    async def list_transactions(self) -> list[tuple[int, Any]]:
        """(coordinator id, transaction) for every transaction of every broker."""
        await self.load_metadata([])
        out = []
        for broker in sorted(self.brokers.values(), key=lambda b: b.node_id):
            resp = await self._send(broker, ListTransactionsRequest(state_filters=[], producer_id_filters=[]),
                                    LIST_TRANSACTIONS_VERSION)
            _check(resp.error_code, f"ListTransactions on broker {broker.node_id}")
            out.extend((broker.node_id, t) for t in resp.transaction_states)
        return out

    async def find_coordinator(self, transactional_id: str) -> Broker:
        resp = await self._send(None, FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY_TYPE),
                                FIND_COORDINATOR_VERSION)
        _check(resp.error_code, f"FindCoordinator for transactional id '{transactional_id}'")
        return Broker(resp.node_id, resp.host, resp.port)

    async def describe_transaction(self, transactional_id: str) -> tuple[int, Any]:
        coordinator = await self.find_coordinator(transactional_id)
        resp = await self._send(coordinator, DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                                DESCRIBE_TRANSACTIONS_VERSION)
        state = resp.transaction_states[0]
        _check(state.error_code, f"DescribeTransactions for '{transactional_id}'")
        return coordinator.node_id, state

    async def describe_producers(self, topic: str, partition: int, broker_id: int | None = None
                                 ) -> list[ProducerState]:
        if not self.leaders:
            await self.load_metadata([topic])
        if broker_id is not None:
            broker = self.brokers.get(broker_id)
            if broker is None:
                fail(f"Broker {broker_id} is not in the cluster.")
        else:
            broker = self.leader(topic, partition)
        req = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
            name=topic, partition_indexes=[partition])])
        resp = await self._send(broker, req, DESCRIBE_PRODUCERS_VERSION)
        part = resp.topics[0].partitions[0]
        _check(part.error_code, f"DescribeProducers for {topic}-{partition} on broker {broker.node_id}")
        return [ProducerState(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
                              p.last_timestamp, p.current_txn_start_offset) for p in part.active_producers]

    async def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                    coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's open transaction to the partition leader."""
        if not self.leaders:
            await self.load_metadata([topic])
        marker = WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch,
            topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                name=topic, partition_indexes=[partition])])
        resp = await self._send(self.leader(topic, partition), WriteTxnMarkersRequest(markers=[marker]),
                                WRITE_TXN_MARKERS_VERSION)
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    _check(p.error_code, f"Aborting the transaction of producer {producer_id} on {t.name}-"
                                         f"{p.partition_index}")

    async def find_hanging(self, broker_id: int | None, topic: str | None, partition: int | None,
                           max_transaction_timeout_ms: int) -> list[tuple[str, int, ProducerState]]:
        """Open transactions older than the longest allowed timeout that their coordinator
        does not know as ongoing with this partition (Kafka's find-hanging)."""
        await self.load_metadata(None if topic is None else [topic])
        if broker_id is not None and broker_id not in self.brokers:
            fail(f"Broker {broker_id} is not in the cluster.")
        partitions = sorted(tp for tp, leader in self.leaders.items()
                            if (broker_id is None or leader == broker_id)
                            and (topic is None or tp[0] == topic)
                            and (partition is None or tp[1] == partition))
        now = int(time.time() * 1000)
        candidates: list[tuple[str, int, ProducerState]] = []
        for t, p in partitions:
            for state in await self.describe_producers(t, p):
                if state.current_txn_start_offset >= 0 and now - state.last_timestamp > max_transaction_timeout_ms:
                    candidates.append((t, p, state))
        if not candidates:
            return []
        by_pid: dict[int, list[str]] = {}
        for _coordinator, txn in await self.list_transactions():
            by_pid.setdefault(txn.producer_id, []).append(txn.transactional_id)
        hanging = []
        for t, p, state in candidates:
            if not await self._known_ongoing(by_pid.get(state.producer_id, []), state, t, p):
                hanging.append((t, p, state))
        return hanging

    async def _known_ongoing(self, transactional_ids: list[str], state: ProducerState, topic: str,
                             partition: int) -> bool:
        for transactional_id in transactional_ids:
            _coordinator, txn = await self.describe_transaction(transactional_id)
            if txn.producer_epoch != state.producer_epoch or txn.transaction_state not in (
                    "Ongoing", "PrepareCommit", "PrepareAbort"):
                continue
            if any(td.topic == topic and partition in td.partitions for td in txn.topics):
                return True
        return False


def _run(fn: Callable[[TransactionsAdmin], Awaitable[T]], options: _Options) -> T:
    async def main() -> T:
        admin = TransactionsAdmin(options.bootstrap, options.security)
        try:
            return await fn(admin)
        finally:
            await admin.close()

    return asyncio.run(main())


transactions_app = typer.Typer(
    help="List and describe transactions, show a partition's producers, abort hanging transactions "
         "(like kafka-transactions.sh).",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, **PLAIN_HELP)


@dataclass(slots=True)
class _Options:
    bootstrap: str
    security: ClientSecurity | None = None


@transactions_app.callback()
def transactions(ctx: typer.Context, bootstrap_server: BootstrapOption = "127.0.0.1:9092",
                 command_config: CommandConfigOption = None) -> None:
    """Options shared by every sub-command come before it, as in Kafka's tool."""
    ctx.obj = _Options(bootstrap_server, client_security(command_config))


def _options(ctx: typer.Context) -> _Options:
    return ctx.find_object(_Options)  # type: ignore[return-value]


@transactions_app.command("list")
def list_cmd(ctx: typer.Context) -> None:
    """List the transactions every coordinator knows."""
    with cli_errors():
        found = _run(lambda a: a.list_transactions(), _options(ctx))
        rows = [[t.transactional_id, str(c), str(t.producer_id), t.transaction_state] for c, t in found]
        write_out(table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows))


@transactions_app.command("describe")
def describe_cmd(ctx: typer.Context, transactional_id: Annotated[
        str, typer.Option("--transactional-id", help="The transactional id to describe.")]) -> None:
    """Describe one transactional id as its coordinator sees it."""
    with cli_errors():
        coordinator, t = _run(lambda a: a.describe_transaction(transactional_id), _options(ctx))
        now = int(time.time() * 1000)
        start = t.transaction_start_time_ms
        partitions = ",".join(f"{td.topic}-{p}" for td in t.topics for p in td.partitions)
        write_out(table(
            ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
             "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
            [[str(coordinator), t.transactional_id, str(t.producer_id), str(t.producer_epoch), t.transaction_state,
              str(t.transaction_timeout_ms), str(start) if start >= 0 else "None",
              str(now - start) if start >= 0 else "None", partitions]]))


TopicOption = Annotated[str, typer.Option("--topic", help="Topic of the partition.")]
PartitionOption = Annotated[int, typer.Option("--partition", help="Partition index.")]


@transactions_app.command("describe-producers")
def describe_producers_cmd(ctx: typer.Context, topic: TopicOption, partition: PartitionOption,
                           broker_id: Annotated[int | None, typer.Option(
                               "--broker-id", help="Ask this replica instead of the leader.")] = None) -> None:
    """Show the active producers of a partition (open transactions have a start offset)."""
    with cli_errors():
        states = _run(lambda a: a.describe_producers(topic, partition, broker_id), _options(ctx))
        rows = [[str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence),
                 str(s.last_timestamp), str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0
                 else "None"] for s in states]
        write_out(table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                         "CurrentTransactionStartOffset"], rows))


@transactions_app.command("abort")
def abort_cmd(ctx: typer.Context, topic: TopicOption, partition: PartitionOption,
              start_offset: Annotated[int | None, typer.Option(
                  "--start-offset", help="First offset of the open transaction (finds the producer).")] = None,
              producer_id: Annotated[int | None, typer.Option("--producer-id")] = None,
              producer_epoch: Annotated[int | None, typer.Option("--producer-epoch")] = None,
              coordinator_epoch: Annotated[int | None, typer.Option("--coordinator-epoch")] = None) -> None:
    """Abort a hanging transaction by writing an ABORT marker to the partition leader."""
    with cli_errors():
        explicit = (producer_id, producer_epoch, coordinator_epoch)
        if start_offset is None and None in explicit:
            fail("Give --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch.")
        if start_offset is not None and any(v is not None for v in explicit):
            fail("--start-offset cannot be combined with --producer-id/--producer-epoch/--coordinator-epoch.")

        async def run(admin: TransactionsAdmin) -> None:
            pid, epoch, coord_epoch = producer_id, producer_epoch, coordinator_epoch
            if start_offset is not None:
                states = await admin.describe_producers(topic, partition)
                match = [s for s in states if s.current_txn_start_offset == start_offset]
                if not match:
                    fail(f"No open transaction starts at offset {start_offset} of {topic}-{partition}.")
                pid, epoch = match[0].producer_id, match[0].producer_epoch
                coord_epoch = max(match[0].coordinator_epoch, 0)
            assert pid is not None and epoch is not None and coord_epoch is not None
            await admin.abort(topic, partition, pid, epoch, coord_epoch)

        _run(run, _options(ctx))


@transactions_app.command("find-hanging")
def find_hanging_cmd(ctx: typer.Context,
                     broker_id: Annotated[int | None, typer.Option(
                         "--broker-id", help="Look at the partitions this broker leads.")] = None,
                     topic: Annotated[str | None, typer.Option("--topic")] = None,
                     partition: Annotated[int | None, typer.Option("--partition")] = None,
                     max_transaction_timeout: Annotated[int, typer.Option(
                         "--max-transaction-timeout",
                         help="Minutes; open transactions older than this are candidates.")] = 15) -> None:
    """Find open transactions that their coordinator no longer knows (hanging)."""
    with cli_errors():
        if broker_id is None and topic is None:
            fail("Give --broker-id or --topic.")
        if partition is not None and topic is None:
            fail("--partition needs --topic.")
        found = _run(lambda a: a.find_hanging(broker_id, topic, partition, max_transaction_timeout * 60_000),
                     _options(ctx))
        now = int(time.time() * 1000)
        rows = [[t, str(p), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
                 str(s.current_txn_start_offset), str(s.last_timestamp), str((now - s.last_timestamp) // 60_000)]
                for t, p, s in found]
        write_out(table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                         "LastTimestamp", "Duration(min)"], rows))
