"""Fetch: long polling through the purgatory, whole batches, zero-copy file regions.

The response is encoded by hand (not through the generic codec) because its
record sets are file regions written with sendfile; everything around them is
a few fixed-width fields.

Consumers over their consumer_byte_rate quota get what Kafka answers (KIP-219): an empty response
carrying throttle_time_ms, the bytes read not counted; a fetch never asks for more than the quota
allows in one window. Followers' fetches are never throttled.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import kafka.errors as Errors

from strom.broker.fetch_session import CachedPartition, PartitionKey
from strom.broker.partition import NO_LEADER_EPOCH, READ_UNCOMMITTED
from strom.broker.replica_manager import FetchParams, FetchPartitionRequest, FetchPartitionResult
from strom.broker.replica_selector import ClientMetadata
from strom.broker.request import FileRegion, LazyRecords, RawResponse, RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.primitives import array_len, string, uvarint
from strom.security.acl import AclOperation, ResourceType
from strom.storage.lazy_down_conversion import LazyDownConversion

API_KEY = ApiKey.FETCH
CURRENT_LEADER_EPOCH_FROM = 9
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13
RACK_ID_FROM = 11  # KIP-392: the consumer's rack; followers serve consumers from this version
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
TOPIC_AUTHORIZATION_FAILED = Errors.TopicAuthorizationFailedError.errno
UNSUPPORTED_VERSION = Errors.UnsupportedVersionError.errno
UNSUPPORTED_COMPRESSION_TYPE = Errors.UnsupportedCompressionTypeError.errno
ZSTD_FROM = 10  # the first Fetch version whose clients read zstd (KIP-110)
DOWN_CONVERT_BELOW = 4  # Fetch v0-v3 predate message format v2 (KIP-98)


async def handle(ctx: RequestContext, request: Any) -> RawResponse:
    version = ctx.version
    params = FetchParams(max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes,
                         max_bytes=request.max_bytes if version >= 3 else 0x7FFFFFFF,
                         isolation_level=request.isolation_level if version >= 4 else READ_UNCOMMITTED,
                         replica_id=replica_id_of(version, request))
    if version >= RACK_ID_FROM and params.replica_id < 0:
        params.client_metadata = ClientMetadata(getattr(request, "rack_id", None) or "", ctx.client_id,
                                                ctx.client_host, ctx.listener_name)
    fetch_manager = ctx.replica_manager.fetch_manager
    context = fetch_manager.new_context(
        version, request.session_id if version >= 7 else 0, request.session_epoch if version >= 7 else -1,
        params.is_from_follower, _fetch_data(ctx, version, request), _forgotten(version, request))
    if context.error_code:  # an unknown session or a wrong epoch: the fetcher starts over with a full fetch
        return _encode(version, context.error_code, 0, [])
    quotas = ctx.services.quotas
    fetch_quota = quotas.fetch if quotas is not None and quotas.fetch.enabled and params.replica_id < 0 else None
    if fetch_quota is not None:
        user, client_id = quotas.client_of(ctx)  # type: ignore[union-attr]
        window_bytes = fetch_quota.max_value_in_window(user, client_id)
        if window_bytes is not None:
            params.max_bytes = min(params.max_bytes, max(int(window_bytes), 1))
    # One result per partition of the context: an error settled here, or what the replica manager reads.
    slots: list[FetchPartitionResult | None] = []
    authorizer = ctx.services.authorizer
    # A follower needs ClusterAction on the cluster; a consumer Read on each topic (Kafka's KafkaApis).
    replica_denied = authorizer is not None and params.replica_id >= 0 and \
        not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    allowed: dict[str, bool] = {}
    for cp in context.partitions:
        if cp.topic is None and cp.topic_id is not None:  # an id unknown when it was sent may be known now
            meta = ctx.metadata.topic_by_id(cp.topic_id)
            cp.topic = meta.name if meta else None
        name = cp.topic
        if name is None:
            slots.append(FetchPartitionResult(error_code=Errors.UnknownTopicIdError.errno))
            continue
        if authorizer is not None:
            ok = allowed.get(name)
            if ok is None:
                ok = allowed[name] = not replica_denied and (params.replica_id >= 0 or ctx.authorize(
                    AclOperation.READ, ResourceType.TOPIC, name))
            if not ok:
                slots.append(FetchPartitionResult(error_code=TOPIC_AUTHORIZATION_FAILED))
                continue
        params.partitions.append(FetchPartitionRequest(name, cp.partition, cp.fetch_offset, cp.max_bytes,
                                                       cp.current_leader_epoch, cp.log_start_offset))
        slots.append(None)
    results = await ctx.replica_manager.fetch_messages(params) if params.partitions else []
    if version < ZSTD_FROM and results:
        _refuse_zstd_topics(ctx, params, results)
    if version < DOWN_CONVERT_BELOW and results:
        await _down_convert(ctx, version, params, results)
    it = iter(results)
    merged = [slot if slot is not None else next(it) for slot in slots]
    response = None
    if fetch_quota is not None:
        size = sum(r.size for r in results if r.records is not None)
        throttle = fetch_quota.record_and_get_throttle_time_ms(user, client_id, size)
        if throttle:
            fetch_quota.unrecord(user, client_id, size)
            ctx.throttle_time_ms = throttle
            response = _encode(version, 0, fetch_manager.throttled_session_id(context), [])
    if response is None:
        session_id, answered = fetch_manager.answer(context, merged)
        response = _encode(version, 0, session_id,
                           [(cp.topic_id if context.uses_topic_ids else cp.topic, cp.partition, r)
                            for cp, r in answered])
    response.remote_time_s = params.waited_s  # the long poll's wait is remote time, not local work
    response.from_follower = params.is_from_follower  # metrics: FetchFollower or FetchConsumer
    return response


def _refuse_zstd_topics(ctx: RequestContext, params: FetchParams, results: list[FetchPartitionResult]) -> None:
    """Fetch v0-v9 of a topic whose compression.type is zstd: UNSUPPORTED_COMPRESSION_TYPE, as Kafka answers
    (such a client cannot read zstd, KIP-110); a dictionary look-up per partition, for old fetches only."""
    partitions = ctx.replica_manager.partitions
    for req, r in zip(params.partitions, results, strict=True):
        part = partitions.get((req.topic, req.partition))
        if not r.error_code and part is not None and part.log_config.compression_type == "zstd":
            r.error_code, r.records, r.size = UNSUPPORTED_COMPRESSION_TYPE, None, 0


async def _down_convert(ctx: RequestContext, version: int, params: FetchParams,
                        results: list[FetchPartitionResult]) -> None:
    """Fetch v0-v3 read message format v0 (v0-v1) or v1 (v2-v3), converted lazily (KIP-283): the first chunk
    of each partition's read is converted here, in a worker thread, to fix the partition's size; the rest
    as the response is written (``LazyDownConversion``), so memory holds a chunk, not the whole read twice.
    Modern fetches never come here. A topic with message.downconversion.enable=false answers
    UNSUPPORTED_VERSION, zstd UNSUPPORTED_COMPRESSION_TYPE (as Kafka)."""
    loop = asyncio.get_running_loop()
    magic = 0 if version <= 1 else 1
    partitions = ctx.replica_manager.partitions
    stats = ctx.replica_manager.topic_stats
    for req, r in zip(params.partitions, results, strict=True):
        if r.error_code or r.records is None or not r.size:
            continue
        part = partitions.get((req.topic, req.partition))
        if part is not None and not part.log_config.message_downconversion_enable:
            r.error_code, r.records, r.size = UNSUPPORTED_VERSION, None, 0
            continue
        conversion = LazyDownConversion(r.records.slices, r.size, magic, fetch_offset=req.fetch_offset)
        try:
            whole = await loop.run_in_executor(None, conversion.start)
        except Errors.UnsupportedCompressionTypeError:
            r.error_code, r.records, r.size = UNSUPPORTED_COMPRESSION_TYPE, None, 0
            continue
        if whole is not None:
            r.records, r.size = whole, len(whole)
            if stats is not None and conversion.converted_records:
                stats.record_conversions(req.topic, False, conversion.converted_records)
        else:
            r.records = LazyRecords(conversion.size, _pieces(conversion, req.topic, stats))
            r.size = conversion.size


def _pieces(conversion: LazyDownConversion, topic: str, stats: Any) -> Callable[[], Awaitable[bytes | None]]:
    """The lazy part's source: each piece converted in a worker thread; conversions counted at the end."""
    async def next_piece() -> bytes | None:
        piece = await asyncio.get_running_loop().run_in_executor(None, conversion.next_piece)
        if piece is None and stats is not None and conversion.converted_records:
            stats.record_conversions(topic, False, conversion.converted_records)
        return piece

    return next_piece


def _fetch_data(ctx: RequestContext, version: int, request: Any) -> list[CachedPartition]:
    """The request's partitions: all of them (a full fetch) or those whose fetch state changed."""
    out: list[CachedPartition] = []
    for t in request.topics:
        if version >= TOPIC_IDS_FROM:
            topic_id = t.topic_id
            meta = ctx.metadata.topic_by_id(topic_id)
            name = meta.name if meta else None
        else:
            topic_id, name = None, t.topic
        for p in t.partitions:
            out.append(CachedPartition(
                name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes,
                p.current_leader_epoch if version >= CURRENT_LEADER_EPOCH_FROM else NO_LEADER_EPOCH,
                p.log_start_offset if version >= 5 else -1))
    return out


def _forgotten(version: int, request: Any) -> list[PartitionKey]:
    """Partitions an incremental fetch drops from its session (v7+; by topic id from v13)."""
    if version < 7:
        return []
    return [(t.topic_id if version >= TOPIC_IDS_FROM else t.topic, p)
            for t in request.forgotten_topics_data or [] for p in t.partitions]


def with_throttle_time(response: RawResponse, ms: int, version: int = DOWN_CONVERT_BELOW) -> RawResponse:
    """The response with throttle_time_ms set: the first field of its first (always in-memory) part."""
    first = response.parts[0]
    assert isinstance(first, bytes)
    if version == 0:
        return response  # Fetch v0 answers carry no throttle time
    response.parts[0] = struct.pack(">i", ms) + first[4:]
    return response


def replica_id_of(version: int, request: Any) -> int:
    """The follower's broker id, -1 for a consumer (v15+ carry it in the ReplicaState tagged field)."""
    if version >= 15:
        state = getattr(request, "replica_state", None)
        return getattr(state, "replica_id", -1) if state is not None else -1
    return request.replica_id


def _encode(version: int, top_error: int, session_id: int,
            answered: list[tuple[Any, int, FetchPartitionResult]]) -> RawResponse:
    """The response body; ``answered`` is (topic key as sent, partition, result), a topic's partitions
    adjacent (a topic that comes back after another is written again, as Kafka does)."""
    flexible = version >= FLEXIBLE_FROM
    parts: list[bytes | FileRegion | LazyRecords] = []
    buf = bytearray()
    if version >= 1:
        buf += struct.pack(">i", 0)  # throttle_time_ms
    if version >= 7:
        buf += struct.pack(">hi", top_error, session_id)
    groups: list[tuple[Any, list[tuple[int, FetchPartitionResult]]]] = []
    for key, index, r in answered:
        if not groups or groups[-1][0] != key:
            groups.append((key, []))
        groups[-1][1].append((index, r))
    buf += array_len(len(groups), flexible)

    def topic_key(key: Any) -> bytes:
        if version >= TOPIC_IDS_FROM:
            return uuid.UUID(str(key)).bytes
        return string(key, flexible)

    for key, entries in groups:
        buf += topic_key(key)
        buf += array_len(len(entries), flexible)
        for index, r in entries:
            if version < DOWN_CONVERT_BELOW:  # v0-v3: no last stable offset, no aborted transactions
                buf += struct.pack(">ihq", index, r.error_code, r.high_watermark)
            else:
                buf += struct.pack(">ihqq", index, r.error_code, r.high_watermark, r.last_stable_offset)
            if version >= 5:
                buf += struct.pack(">q", r.log_start_offset)
            aborted = r.aborted_transactions
            if aborted is not None:
                buf += array_len(len(aborted), flexible)
                for txn in aborted:
                    buf += _ABORTED.pack(txn.producer_id, txn.first_offset)
                    if flexible:
                        buf += b"\x00"
            elif version >= DOWN_CONVERT_BELOW:
                buf += array_len(-1, flexible)  # null: not read_committed, or nothing read
            if version >= 11:
                buf += struct.pack(">i", r.preferred_read_replica)
            data = r.records
            size = r.size if data is not None else 0
            buf += uvarint(size + 1) if flexible else struct.pack(">i", size)
            if size and isinstance(data, bytes):  # down-converted for Fetch v0-v3
                buf += data
            elif size and isinstance(data, LazyRecords):  # the rest of a Fetch v0-v3 down-conversion
                parts.append(bytes(buf))
                buf = bytearray()
                parts.append(data)
            elif size:
                parts.append(bytes(buf))
                buf = bytearray()
                for sl in data.slices:
                    parts.append(FileRegion(sl.file, sl.position, sl.size))
            if flexible:
                buf += b"\x00"  # partition tagged fields
        if flexible:
            buf += b"\x00"  # topic tagged fields
    if flexible:
        buf += b"\x00"  # top-level tagged fields
    parts.append(bytes(buf))
    return RawResponse(parts)
