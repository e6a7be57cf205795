"""CoordinatorRuntime: what the group and transaction coordinators share about their internal topic.

A coordinator's state is a view of the records in the partitions of its internal topic
(``__consumer_offsets``, ``__transaction_state``); the records are the source of truth.
The runtime gives every coordinator the same three guarantees, as Kafka's KIP-848
runtime does:

- **Write, then apply.** A state change is a batch of records. ``write`` appends it to the
  partition's log and only once the append is committed (acks=all: the high watermark
  has passed it) runs the caller's ``apply``. A failed or uncommitted append never runs
  ``apply``, so the in-memory state is left as it was and the caller answers with an error.
- **Replies at the high watermark.** ``write`` returns (and so the request's reply is
  released) only after the commit and the apply, in that order.
- **One event queue per partition.** Operations on one partition run in the order they
  arrive: appends are made in arrival order and their ``apply`` steps run in the same
  (log) order, even though several writes may wait for replication at once. A load holds
  the partition's queue, so nothing is appended to a partition while it is replayed.
  Different partitions are independent.

Loads read and decode the whole partition on a worker thread (never on the loop) in
chunks of ``LOAD_CHUNK_BYTES``; the coordinator rebuilds its state there too and the loop
only installs the result, in steps of ``INSTALL_CHUNK`` items (``in_chunks``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import kafka.errors as Errors

from strom.coordinator.clock import SYSTEM_CLOCK, Clock
from strom.protocol.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    build_batch,
    iter_batches,
    transaction_marker_type,
)
from strom.protocol.record_stream import iter_records
from strom.storage.validator import AppendOrigin

log = logging.getLogger(__name__)

T = TypeVar("T")

LOAD_CHUNK_BYTES = 1024 * 1024  # bytes read from the log per step of a load
INSTALL_CHUNK = 500  # items installed on the loop between two yields

RECORD, TXN_RECORD, COMMIT_MARKER, ABORT_MARKER = range(4)
_MARKER_KINDS = {CONTROL_ABORT: ABORT_MARKER, CONTROL_COMMIT: COMMIT_MARKER}


class LogRecord(NamedTuple):
    """One record of a coordinator partition as a load sees it (a marker has no key or value)."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    kind: int  # RECORD, TXN_RECORD, COMMIT_MARKER or ABORT_MARKER


class _PartitionQueue:
    """The event queue of one coordinator partition.

    A load holds ``lock`` for its whole run; a write takes it only while something is queued
    (``queued`` counts the load and the writes waiting behind it), so an uncontended write goes
    straight to its append and writes keep their arrival order either way.
    """

    __slots__ = ("lock", "queued", "last_apply")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()  # FIFO: waiters acquire in arrival order
        self.queued = 0
        # Set once the latest write appended so far has applied (or failed): the next write's
        # apply waits for it, so applies follow log order.
        self.last_apply: asyncio.Future[None] | None = None


class CoordinatorRuntime:
    """Appends, commit waits, ordered applies and loads for the partitions of one internal topic.

    ``replica_manager`` needs ``append_records({tp: bytes}, acks, origin=...)`` (results, and None
    or an awaitable of them while acks=all waits for the ISR) and ``get_partition(topic, partition)``
    (a broker Partition) — the broker's ReplicaManager, or a small stand-in in unit tests.
    """

    def __init__(self, topic_name: str, replica_manager: Any, clock: Clock = SYSTEM_CLOCK) -> None:
        self.topic_name = topic_name
        self.replica_manager = replica_manager
        self.clock = clock
        self._queues: dict[int, _PartitionQueue] = {}

    def _queue(self, partition: int) -> _PartitionQueue:
        queue = self._queues.get(partition)
        if queue is None:
            queue = self._queues[partition] = _PartitionQueue()
        return queue

    # -- writing -------------------------------------------------------------------
    async def write(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
                    apply: Callable[[int], T] | None = None, *, timestamp: int | None = None,
                    producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                    transactional: bool = False) -> T | int:
        """Append ``records`` as one batch (acks=all), wait for the commit, then ``apply(base_offset)``.

        Returns what ``apply`` returns (the batch's base offset without one). A failed append
        raises the log's Kafka error and ``apply`` is not run. A transactional batch carries the
        producer's id and epoch but no sequence numbers: the log skips the sequence and
        duplicate checks for a coordinator append, while the epoch still fences zombies.
        """
        queue = self._queue(partition)
        if queue.queued:
            queue.queued += 1
            try:
                async with queue.lock:
                    results, replicated, previous, mine = self._enqueue(
                        queue, partition, records, timestamp, producer_id, producer_epoch, transactional)
            finally:
                queue.queued -= 1
        else:
            results, replicated, previous, mine = self._enqueue(
                queue, partition, records, timestamp, producer_id, producer_epoch, transactional)
        try:
            if replicated is not None:
                results = await replicated
            res = results[(self.topic_name, partition)]
            if res.error_code:
                raise Errors.for_code(res.error_code)(res.error_message or "")
            base_offset = int(res.base_offset)
        except BaseException:
            _chain(previous, mine)
            raise
        try:
            if previous is not None and not previous.done():
                await asyncio.shield(previous)
            return base_offset if apply is None else apply(base_offset)
        finally:
            if not mine.done():
                mine.set_result(None)

    def _enqueue(self, queue: _PartitionQueue, partition: int, records: Sequence[tuple[bytes, bytes | None]],
                 timestamp: int | None, producer_id: int, producer_epoch: int, transactional: bool
                 ) -> tuple[Any, Awaitable[Any] | None, asyncio.Future[None] | None, asyncio.Future[None]]:
        """Append to the local log now and take the write's place in the apply order.

        Returns the append's results, the awaitable of the committed results (None if already
        committed), the previous write's apply future and this write's."""
        previous = queue.last_apply
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.last_apply = mine
        ts = self.clock.wall_ms() if timestamp is None else timestamp
        try:
            batch = build_batch(((k, v, (), ts) for k, v in records), producer_id=producer_id,
                                producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
                                is_transactional=transactional)
            results, replicated = self.replica_manager.append_records(
                {(self.topic_name, partition): batch}, -1, origin=AppendOrigin.COORDINATOR)
        except BaseException:
            _chain(previous, mine)
            raise
        return results, replicated, previous, mine

    # -- loading -------------------------------------------------------------------
    def read_records(self, partition: int) -> Iterator[LogRecord]:
        """Every record and transaction marker of a partition in offset order; blocking file I/O
        in steps of ``LOAD_CHUNK_BYTES``, for a worker thread (or tools and tests)."""
        part = self.replica_manager.get_partition(self.topic_name, partition)
        offset = part.log_start_offset
        end = part.log_end_offset
        while offset < end:
            data = part.read_records_up_to(offset, LOAD_CHUNK_BYTES, end).to_bytes()
            if not data:
                break
            next_offset = offset
            for header in iter_batches(data):
                next_offset = header.next_offset
                if header.next_offset <= offset:
                    continue
                pid = header.producer_id
                if header.is_control:
                    for rec in iter_records(data, header.position):
                        marker = transaction_marker_type(rec.key)
                        if marker is not None:
                            yield LogRecord(rec.offset, None, None, pid, _MARKER_KINDS[marker])
                    continue
                kind = TXN_RECORD if header.is_transactional else RECORD
                for rec in iter_records(data, header.position):
                    if rec.offset >= offset:
                        yield LogRecord(rec.offset, rec.key, rec.value, pid, kind)
            if next_offset <= offset:
                break
            offset = next_offset

    async def load(self, partition: int, rebuild: Callable[[int], T]) -> T:
        """Run ``rebuild(partition)`` (read and decode the partition, build the state, install
        nothing) on a worker thread, holding the partition's queue; the caller installs the result
        on the loop. Exceptions propagate so the caller can retry."""
        queue = self._queue(partition)
        queue.queued += 1
        try:
            async with queue.lock:
                return await asyncio.get_running_loop().run_in_executor(None, rebuild, partition)
        finally:
            queue.queued -= 1

    def forget(self, partition: int) -> None:
        """The partition is no longer coordinated here; writes still waiting keep their own order."""
        queue = self._queues.get(partition)
        if queue is not None and not queue.queued and (queue.last_apply is None or queue.last_apply.done()):
            del self._queues[partition]


def _chain(previous: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
    """A write that will never apply still releases the writes behind it, after its predecessor."""
    if previous is None or previous.done():
        if not mine.done():
            mine.set_result(None)
    else:
        previous.add_done_callback(functools.partial(_release, mine))


def _release(mine: asyncio.Future[None], _previous: asyncio.Future[None]) -> None:
    if not mine.done():
        mine.set_result(None)


async def in_chunks(items: Iterable[T], fn: Callable[[T], object], every: int = INSTALL_CHUNK) -> None:
    """Call ``fn`` on every item, yielding to the loop every ``every`` items so requests get in
    between the steps of a large install."""
    for i, item in enumerate(items):
        if i and i % every == 0:
            await asyncio.sleep(0)
        fn(item)
