"""Produce: batch-level append of v2 RecordBatches; acks=0 gets no response at all.

A failed acks=0 produce closes the connection instead (as Kafka): the only way its client learns.

The response is encoded by hand: it is the hottest small message the broker
writes, and the generic codec costs ~15 µs per response where this costs ~2.
A client over its producer_byte_rate quota is throttled after its records are
appended (Kafka does the same): the answer carries throttle_time_ms.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING, Any

import kafka.errors as Errors

from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.replica_manager import ProducePartitionResult, ProduceResults, TopicPartition
from strom.broker.request import CloseConnection, DeferredResponse, RequestContext
from strom.protocol import codec
from strom.protocol.api_keys import ApiKey
from strom.protocol.primitives import array_len, nullable_string, string
from strom.protocol.record_batch import ATTRIBUTES_POS, COMPRESSION_MASK, COMPRESSION_ZSTD, MAGIC_POS
from strom.security.acl import AclOperation, ResourceType
from strom.storage.message_conversion import legacy_magic, up_convert
from strom.storage.recompression import convert_for_append, needs_recompression

if TYPE_CHECKING:
    from strom.broker.partition import Partition
    from strom.storage.log_config import LogConfig

log = logging.getLogger(__name__)

API_KEY = ApiKey.PRODUCE
# Answers at once, or (acks=all) with a DeferredResponse, never after a long wait: a connection may gather
# the answers of pipelined produces into one write, which roughly halves an unbatched producer's cost.
GATHER_RESPONSES = True
FLEXIBLE_FROM = 9
_PARTITION = struct.Struct(">ihqq")
_PARTITION_V0 = struct.Struct(">ihq")  # v0-v1: no log_append_time_ms
TOPIC_AUTHORIZATION_FAILED = Errors.TopicAuthorizationFailedError.errno
LEGACY_MAX_VERSION = 2  # the last Produce version that may carry message format v0/v1
ZSTD_FROM = 7  # Produce versions before it may not carry zstd batches (KIP-110)


# The per-partition answer, as the ReplicaManager fills it in.
PartitionResult = ProducePartitionResult


async def handle(ctx: RequestContext, request: Any) -> bytes | DeferredResponse | None:
    acks = request.acks
    err = 0
    if acks not in (0, 1, -1):
        err = Errors.InvalidRequiredAcksError.errno
    entries: dict[TopicPartition, Any] = {}
    denied: list[TopicPartition] = []
    if ctx.services.authorizer is not None and not err:  # no authorizer: this one test is all it costs
        err, denied = _authorize(ctx, request)
    if not err:
        for topic in request.topic_data:
            name = topic.name
            for pd in topic.partition_data:
                entries[(name, pd.index)] = pd.records
        for tp in denied:
            del entries[tp]
    replica_manager = ctx.replica_manager
    refused = None
    if ctx.version <= LEGACY_MAX_VERSION:  # only old clients send v0/v1 message sets: modern ones never look
        legacy = [tp for tp, records in entries.items() if legacy_magic(records) is not None]
        refused = await _up_convert_off_loop(ctx, legacy, entries) if legacy else None
    elif ctx.version < ZSTD_FROM:
        refused = _refuse_zstd(entries)
    todo = _to_recompress(replica_manager.partitions, entries)
    if todo:
        recompress_refused = await _recompress_off_loop(todo, entries)
        refused = {**refused, **recompress_refused} if refused else recompress_refused
    results, done = replica_manager.append_records(entries, acks, request.timeout_ms)
    for tp in denied:
        results[tp] = PartitionResult(tp[1], TOPIC_AUTHORIZATION_FAILED)
    if refused:
        results.update(refused)
    quotas = ctx.services.quotas
    if quotas is not None and quotas.produce.enabled:
        user, client_id = quotas.client_of(ctx)
        size = sum(len(r) for r in entries.values() if r is not None)
        ctx.throttle_time_ms = quotas.produce.record_and_get_throttle_time_ms(user, client_id, size)
    if acks == 0:
        if err or any(r.error_code for r in results.values()):
            # No answer can carry the error: as Kafka, close the connection so the client notices
            # (it refreshes metadata and reconnects) instead of losing records silently.
            failed = sorted({(tp, r.error_code) for tp, r in results.items() if r.error_code})
            log.debug("closing the connection of %s after a failed acks=0 produce: %s", ctx.client_host,
                      failed or err)
            raise CloseConnection("acks=0 produce failed")
        return None
    if done is None:
        return codec.frame_response(ctx.header, encode_response(ctx.version, _layout(request, results, err)))
    ready: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    header, version = ctx.header, ctx.version

    def answer(_: Any) -> None:
        if not ready.done():
            ready.set_result(codec.frame_response(header, encode_response(version, _layout(request, results, err))))

    done.add_done_callback(answer)
    return DeferredResponse([], ready)


def _to_recompress(partitions: dict[TopicPartition, Partition], entries: dict[TopicPartition, Any]
                   ) -> list[tuple[TopicPartition, LogConfig]]:
    """Partitions led here whose topic's compression.type names a codec some batch is not in."""
    todo = []
    for tp, records in entries.items():
        part = partitions.get(tp)
        if part is None or records is None:
            continue
        config = part.log_config
        if config.compression_type != "producer" and part.is_leader and needs_recompression(records, config):
            todo.append((tp, config))
    return todo


async def _recompress_off_loop(todo: list[tuple[TopicPartition, LogConfig]], entries: dict[TopicPartition, Any]
                               ) -> ProduceResults:
    """Convert those batches in a worker thread (inflating and recompressing can take seconds); the
    log then finds them in its codec. Partitions whose conversion fails are taken out of
    ``entries`` and answered here, as the log would have answered them."""
    refused: ProduceResults = {}
    loop = asyncio.get_running_loop()
    for tp, config in todo:
        try:
            converted = await loop.run_in_executor(None, convert_for_append, entries[tp], config,
                                                   int(time.time() * 1000))
        except Exception as exc:  # noqa: BLE001 - every failure maps to a Kafka error code
            del entries[tp]
            refused[tp] = PartitionResult(tp[1], error_code_of(exc), error_message=error_message_of(exc))
            continue
        if converted is not None:
            entries[tp] = converted
    return refused


async def _up_convert_off_loop(ctx: RequestContext, legacy: list[TopicPartition], entries: dict[TopicPartition, Any]
                               ) -> ProduceResults:
    """Message sets in format v0/v1 (clients before Kafka 0.11) in Produce v0-v2 become v2 batches before the
    append, in a worker thread. A partition not led here keeps its bytes: the replica manager answers it as
    usual. (From v3 on, the log's validator refuses them with INVALID_RECORD, as Kafka, while it walks the
    batch headers anyway: modern produces pay nothing for the check.)"""
    refused: ProduceResults = {}
    loop = asyncio.get_running_loop()
    partitions = ctx.replica_manager.partitions
    for tp in legacy:
        part = partitions.get(tp)
        if part is None or not part.is_leader:
            continue
        try:
            converted = await loop.run_in_executor(None, up_convert, entries[tp], part.log_config,
                                                   int(time.time() * 1000))
        except Exception as exc:  # noqa: BLE001 - every failure maps to a Kafka error code
            del entries[tp]
            refused[tp] = PartitionResult(tp[1], error_code_of(exc), error_message=error_message_of(exc))
            continue
        entries[tp] = converted.records
        stats = ctx.replica_manager.topic_stats
        if stats is not None:
            stats.record_conversions(tp[0], True, converted.messages)
    return refused


def _refuse_zstd(entries: dict[TopicPartition, Any]) -> ProduceResults | None:
    """Produce v3-v6 with a zstd batch: UNSUPPORTED_COMPRESSION_TYPE for that partition, as Kafka answers
    (a client that old cannot have negotiated zstd; v7+ pays nothing for this)."""
    refused: ProduceResults = {}
    for tp, records in list(entries.items()):
        if (records is not None and len(records) > ATTRIBUTES_POS + 1 and records[MAGIC_POS] == 2
                and records[ATTRIBUTES_POS + 1] & COMPRESSION_MASK == COMPRESSION_ZSTD):
            del entries[tp]
            refused[tp] = PartitionResult(tp[1], Errors.UnsupportedCompressionTypeError.errno,
                                          error_message="zstd needs Produce v7 or later")
    return refused or None


def _authorize(ctx: RequestContext, request: Any) -> tuple[int, list[TopicPartition]]:
    """Kafka's rules: a transactional producer needs Write on its transactional id (else the whole request
    fails), and every topic needs Write (else its partitions fail, the others are appended)."""
    tid = request.transactional_id
    if tid is not None and not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return Errors.TransactionalIdAuthorizationFailedError.errno, []
    return 0, [(t.name, pd.index) for t in request.topic_data
               if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, t.name) for pd in t.partition_data]


def _layout(request: Any, results: ProduceResults, err: int) -> list[tuple[str, list[PartitionResult]]]:
    """The per-partition results in the order of the request (a repeated partition answers twice)."""
    topics: list[tuple[str, list[PartitionResult]]] = []
    for topic in request.topic_data:
        name = topic.name
        if err:
            topics.append((name, [PartitionResult(pd.index, err) for pd in topic.partition_data]))
        else:
            topics.append((name, [results[(name, pd.index)] for pd in topic.partition_data]))
    return topics


def encode_response(version: int, topics: list[tuple[str, list[PartitionResult]]]) -> bytes:
    """ProduceResponse v0-v10 body (v0 has no throttle time, v0-v1 no log append time)."""
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(array_len(len(topics), flexible))
    for name, parts in topics:
        out += string(name, flexible)
        out += array_len(len(parts), flexible)
        for p in parts:
            if version >= 2:
                out += _PARTITION.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            else:
                out += _PARTITION_V0.pack(p.index, p.error_code, p.base_offset)
            if version >= 5:
                out += struct.pack(">q", p.log_start_offset)
            if version >= 8:
                out += array_len(0, flexible)  # record_errors
                out += nullable_string(p.error_message, flexible)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    if version >= 1:
        out += b"\x00\x00\x00\x00"  # throttle_time_ms
    if flexible:
        out += b"\x00"
    return bytes(out)


def with_throttle_time(version: int, framed: bytes | bytearray, ms: int) -> bytes:
    """A framed response with throttle_time_ms set: the body's last field, before the (empty) tagged fields."""
    if version == 0:
        return bytes(framed)  # Produce v0 answers carry no throttle time
    out = bytearray(framed)
    struct.pack_into(">i", out, len(out) - (5 if version >= FLEXIBLE_FROM else 4), ms)
    return bytes(out)
