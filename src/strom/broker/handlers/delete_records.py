"""DeleteRecords: advance a partition's log start offset (offset -1 means the HW).

The answer waits (Kafka's DelayedDeleteRecords) until every in-sync replica's log start offset
passed the offset asked for: followers learn the leader's log start from their fetch answers,
move theirs and name it in their next fetch. A client told the records are gone can then no
longer read them from any in-sync copy. Partitions still waiting at the request's timeout answer
REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DeleteRecordsResponse

from strom.broker.handlers import error_code_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType
from strom.server_common.purgatory import DelayedOperation
from strom.server_common.types import TopicPartition

API_KEY = ApiKey.DELETE_RECORDS
TopicRes = DeleteRecordsResponse.DeleteRecordsTopicResult
PartRes = TopicRes.DeleteRecordsPartitionResult


class DelayedDeleteRecords(DelayedOperation):
    """Parked until each partition's low watermark reached its required offset, or timeout_ms."""

    def __init__(self, timeout_ms: int, required: dict[TopicPartition, tuple[int, Any]],
                 lookup: Callable[[TopicPartition], Any], future: asyncio.Future[None]) -> None:
        super().__init__(timeout_ms)
        self._pending = dict(required)  # tp -> (required offset, the partition's result)
        self._lookup = lookup
        self._future = future

    def try_complete(self) -> bool:
        for tp, (offset, res) in list(self._pending.items()):
            try:
                part = self._lookup(tp)
                if part is None:
                    raise Errors.UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} is not hosted here")
                low = part.low_watermark()
                if low < offset:
                    continue
                res.low_watermark = low
            except Errors.KafkaError as exc:
                res.error_code = exc.errno
            del self._pending[tp]
        return False if self._pending else self.force_complete()

    def on_complete(self) -> None:
        for _, res in self._pending.values():  # expired: some in-sync replica still has the records
            res.error_code = Errors.RequestTimedOutError.errno
        self._pending.clear()
        if not self._future.done():
            self._future.set_result(None)


async def handle(ctx: RequestContext, request: Any) -> DeleteRecordsResponse:
    rm = ctx.replica_manager
    topics = []
    waiting: dict[TopicPartition, tuple[int, Any]] = {}
    for t in request.topics:
        parts = []
        for p in t.partitions:
            res = PartRes(partition_index=p.partition_index, low_watermark=-1, error_code=0)
            try:
                if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, t.name):
                    raise Errors.TopicAuthorizationFailedError(f"Not authorized to delete records of {t.name}")
                part = rm.get_partition(t.name, p.partition_index)
                if not part.is_leader:
                    raise Errors.NotLeaderForPartitionError(f"broker {ctx.broker_id} is not the leader of "
                                                            f"{t.name}-{p.partition_index}")
                # Segment files go on the log dir's storage thread, not on the loop.
                start = await part.run_on_storage(part.delete_records_before, p.offset)
                res.low_watermark = start
                waiting[(t.name, p.partition_index)] = (start if p.offset < 0 else p.offset, res)
            except Exception as exc:
                res.error_code = error_code_of(exc)
            parts.append(res)
        topics.append(TopicRes(name=t.name, partitions=parts))
    if waiting:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        op = DelayedDeleteRecords(max(request.timeout_ms, 0), waiting, rm.partitions.get, future)
        rm.delete_records_purgatory.try_complete_else_watch(op, list(waiting))
        await future
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
