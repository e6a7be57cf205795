"""TransactionManager: the producer side of Kafka transactions (KIP-98) for one Spark write task.

The exactly-once sink writes each task's rows in one transaction together with a marker offset
(docs/decisions/0012). Its batches are built by the native encoder and sent by the task's own
producer (strom.spark.producer), so the transaction requests are sent here too, over the same
TaskClient: FindCoordinator, InitProducerId (which fences an older attempt with the same
transactional.id and finishes its transaction), AddPartitionsToTxn before the first batch to a
partition, AddOffsetsToTxn + TxnOffsetCommit for the marker, and EndTxn.

Coordinator errors that mean "ask again" (loading, moved, a previous transaction still being
completed) are retried for up to the transaction timeout, as Kafka's producer does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from strom.spark.client import KafkaProtocolError, TaskClient
from strom.spark.retry import attempts

FIND_COORDINATOR_VERSION = 3
INIT_PRODUCER_ID_VERSION = 4
ADD_PARTITIONS_TO_TXN_VERSION = 3
ADD_OFFSETS_TO_TXN_VERSION = 3
TXN_OFFSET_COMMIT_VERSION = 3
END_TXN_VERSION = 3
OFFSET_FETCH_VERSION = 7  # one group, require_stable

GROUP_KEY, TRANSACTION_KEY = 0, 1

# Ask again: the coordinator is loading, moved, unknown yet, or still completing a transaction.
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
CONCURRENT_TRANSACTIONS = 51
GROUP_ID_NOT_FOUND = 69
UNSTABLE_OFFSET_COMMIT = 88
_RETRY = frozenset({7, 13, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                    CONCURRENT_TRANSACTIONS, UNSTABLE_OFFSET_COMMIT})
_REFIND = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})


class Coordinators:
    """Finds group and transaction coordinators (FindCoordinator) and retries what Kafka's clients retry."""

    def __init__(self, client: TaskClient, timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = timeout_ms
        self._found: dict[tuple[int, str], int] = {}

    def _coordinator(self, key_type: int, key: str) -> int:
        found = self._found.get((key_type, key))
        if found is not None:
            return found
        if not self.client.nodes:
            self.client.refresh_metadata([])
        node = next(iter(self.client.nodes))
        resp = self.client.send(node, FindCoordinatorRequest(key=key, key_type=key_type), FIND_COORDINATOR_VERSION)
        if resp.error_code:
            raise KafkaProtocolError(resp.error_code, f"FindCoordinator for {key!r}")
        self.client.nodes[resp.node_id] = (resp.host, resp.port)
        self._found[(key_type, key)] = resp.node_id
        return resp.node_id

    def call(self, what: str, key_type: int, key: str, request: Any, version: int,
             error_of: Callable[[Any], int]) -> Any:
        """Send to the coordinator of ``key``; retry coordinator moves, loading and concurrent transactions."""
        last: BaseException | None = None
        for _ in attempts(self.timeout_ms / 1000):
            try:
                resp = self.client.send(self._coordinator(key_type, key), request, version)
                code = error_of(resp)
                if not code:
                    return resp
                raise KafkaProtocolError(code, f"{what} for {key!r}")
            except KafkaProtocolError as exc:
                if exc.code not in _RETRY:
                    raise
                if exc.code in _REFIND:
                    self._found.pop((key_type, key), None)
                last = exc
            except (ConnectionError, TimeoutError, OSError) as exc:
                self._found.pop((key_type, key), None)
                last = exc
        raise TimeoutError(f"{what} for {key!r} did not succeed within {self.timeout_ms} ms: {last}")


def fetch_committed(client: TaskClient, group_id: str, timeout_ms: int) -> dict[tuple[str, int], tuple[int, str]]:
    """The group's committed ``{(topic, partition): (offset, metadata)}``, read with require_stable
    (KIP-447): an offset still pending in an unfinished transaction is waited for, never hidden.
    An unknown group has none."""
    req = OffsetFetchRequest(group_id=group_id, topics=None, require_stable=True)

    def error_of(resp: Any) -> int:
        code = resp.error_code or next((p.error_code for t in resp.topics for p in t.partitions if p.error_code), 0)
        return 0 if code == GROUP_ID_NOT_FOUND else code

    resp = Coordinators(client, timeout_ms).call("OffsetFetch", GROUP_KEY, group_id, req, OFFSET_FETCH_VERSION,
                                                 error_of)
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata or "")
            for t in resp.topics for p in t.partitions if p.committed_offset >= 0}


class TransactionManager:
    """One transactional.id's producer id, epoch and open transaction, for one task."""

    def __init__(self, client: TaskClient, transactional_id: str, timeout_ms: int) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self._coordinators = Coordinators(client, timeout_ms)
        self._partitions: set[tuple[str, int]] = set()
        self._offsets_added = False

    def _txn(self, what: str, request: Any, version: int, error_of: Callable[[Any], int]) -> Any:
        return self._coordinators.call(what, TRANSACTION_KEY, self.transactional_id, request, version, error_of)

    # -- the protocol --------------------------------------------------------------------
    def init_producer_id(self) -> tuple[int, int]:
        """Get (producer id, epoch), fencing every older producer of this transactional.id."""
        req = InitProducerIdRequest(transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms,
                                    producer_id=-1, producer_epoch=-1)
        resp = self._txn("InitProducerId", req, INIT_PRODUCER_ID_VERSION, lambda r: r.error_code)
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self._partitions.clear()
        self._offsets_added = False
        return self.producer_id, self.producer_epoch

    def add_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for the partitions not yet in the transaction (before writing to them)."""
        new = sorted(set(partitions) - self._partitions)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, part in new:
            by_topic.setdefault(topic, []).append(part)
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=p)
                                 for t, p in by_topic.items()])

        def first_error(resp: Any) -> int:
            codes = [p.partition_error_code for t in resp.results_by_topic_v3_and_below
                     for p in t.results_by_partition]
            return next((c for c in codes if c), resp.error_code)

        self._txn("AddPartitionsToTxn", req, ADD_PARTITIONS_TO_TXN_VERSION, first_error)
        self._partitions.update(new)

    def send_offsets(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Commit ``{(topic, partition): (offset, metadata)}`` for ``group_id`` inside the transaction."""
        if not self._offsets_added:
            req = AddOffsetsToTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                         producer_epoch=self.producer_epoch, group_id=group_id)
            self._txn("AddOffsetsToTxn", req, ADD_OFFSETS_TO_TXN_VERSION, lambda r: r.error_code)
            self._offsets_added = True
        by_topic: dict[str, list[Any]] = {}
        for (topic, part), (offset, metadata) in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=part, committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata=metadata))
        req = TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=p)
                    for t, p in by_topic.items()])

        def first_error(resp: Any) -> int:
            return next((p.error_code for t in resp.topics for p in t.partitions if p.error_code), 0)

        self._coordinators.call("TxnOffsetCommit", GROUP_KEY, group_id, req, TXN_OFFSET_COMMIT_VERSION, first_error)

    def end(self, commit: bool) -> None:
        """EndTxn: the coordinator writes COMMIT or ABORT markers to every partition of the transaction."""
        if not self._partitions and not self._offsets_added:
            return  # nothing was added: the coordinator has no transaction to end
        req = EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                            producer_epoch=self.producer_epoch, committed=commit)
        self._txn("EndTxn", req, END_TXN_VERSION, lambda r: r.error_code)
        self._partitions.clear()
        self._offsets_added = False

