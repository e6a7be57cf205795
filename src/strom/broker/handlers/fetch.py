"""Fetch: long polling through the purgatory, whole batches, zero-copy file regions.

The response is encoded by hand (not through the generic codec) because its
record sets are file regions written with sendfile; everything around them is
a few fixed-width fields.

Consumers over their consumer_byte_rate quota get what Kafka answers (KIP-219): an empty response
carrying throttle_time_ms, the bytes read not counted; a fetch never asks for more than the quota
allows in one window. Followers' fetches are never throttled.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import kafka.errors as Errors

from strom.broker.partition import NO_LEADER_EPOCH, READ_UNCOMMITTED
from strom.broker.replica_manager import FetchParams, FetchPartitionRequest, FetchPartitionResult
from strom.broker.request import FileRegion, RawResponse, RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.primitives import array_len, string, uvarint
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.FETCH
CURRENT_LEADER_EPOCH_FROM = 9
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
TOPIC_AUTHORIZATION_FAILED = Errors.TopicAuthorizationFailedError.errno


async def handle(ctx: RequestContext, request: Any) -> RawResponse:
    version = ctx.version
    top_error = 0
    if version >= 7 and request.session_id != 0:
        # We never hand out sessions (session_id 0 in every response), so any id is unknown.
        top_error = Errors.FetchSessionIdNotFoundError.errno
    params = FetchParams(max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes,
                         max_bytes=request.max_bytes if version >= 3 else 0x7FFFFFFF,
                         isolation_level=request.isolation_level if version >= 4 else READ_UNCOMMITTED,
                         replica_id=replica_id_of(version, request))
    quotas = ctx.services.quotas
    fetch_quota = quotas.fetch if quotas is not None and quotas.fetch.enabled and params.replica_id < 0 else None
    if fetch_quota is not None:
        user, client_id = quotas.client_of(ctx)  # type: ignore[union-attr]
        window_bytes = fetch_quota.max_value_in_window(user, client_id)
        if window_bytes is not None:
            params.max_bytes = min(params.max_bytes, max(int(window_bytes), 1))
    # (topic key as sent, name or None if unknown id, [partition indexes])
    layout: list[tuple[Any, str | None, list[int]]] = []
    failed: list[tuple[Any, list[int], int]] = []  # (topic key, partitions, error): unknown id or not authorized
    authorizer = ctx.services.authorizer
    # A follower needs ClusterAction on the cluster; a consumer Read on each topic (Kafka's KafkaApis).
    replica_denied = authorizer is not None and params.replica_id >= 0 and \
        not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    for t in request.topics if not top_error else []:
        if version >= TOPIC_IDS_FROM:
            meta = ctx.metadata.topic_by_id(t.topic_id)
            name = meta.name if meta else None
            key: Any = t.topic_id
        else:
            name = t.topic
            key = t.topic
        if name is None:
            failed.append((key, [p.partition for p in t.partitions], Errors.UnknownTopicIdError.errno))
            continue
        if authorizer is not None and (replica_denied or params.replica_id < 0 and not ctx.authorize(
                AclOperation.READ, ResourceType.TOPIC, name)):
            failed.append((key, [p.partition for p in t.partitions], TOPIC_AUTHORIZATION_FAILED))
            continue
        for p in t.partitions:
            params.partitions.append(FetchPartitionRequest(
                name, p.partition, p.fetch_offset, p.partition_max_bytes,
                p.current_leader_epoch if version >= CURRENT_LEADER_EPOCH_FROM else NO_LEADER_EPOCH))
        layout.append((key, name, [p.partition for p in t.partitions]))
    results = await ctx.replica_manager.fetch_messages(params) if params.partitions else []
    response = None
    if fetch_quota is not None:
        size = sum(r.size for r in results if r.records is not None)
        throttle = fetch_quota.record_and_get_throttle_time_ms(user, client_id, size)
        if throttle:
            fetch_quota.unrecord(user, client_id, size)
            ctx.throttle_time_ms = throttle
            response = _encode(version, top_error, [], [], [])
    if response is None:
        response = _encode(version, top_error, layout, failed, results)
    response.remote_time_s = params.waited_s  # the long poll's wait is remote time, not local work
    response.from_follower = params.is_from_follower  # metrics: FetchFollower or FetchConsumer
    return response


def with_throttle_time(response: RawResponse, ms: int) -> RawResponse:
    """The response with throttle_time_ms set: the first field of its first (always in-memory) part."""
    first = response.parts[0]
    assert isinstance(first, bytes)
    response.parts[0] = struct.pack(">i", ms) + first[4:]
    return response


def replica_id_of(version: int, request: Any) -> int:
    """The follower's broker id, -1 for a consumer (v15+ carry it in the ReplicaState tagged field)."""
    if version >= 15:
        state = getattr(request, "replica_state", None)
        return getattr(state, "replica_id", -1) if state is not None else -1
    return request.replica_id


def _encode(version: int, top_error: int, layout: list[tuple[Any, str | None, list[int]]],
            failed: list[tuple[Any, list[int], int]], results: list[FetchPartitionResult]) -> RawResponse:
    flexible = version >= FLEXIBLE_FROM
    parts: list[bytes | FileRegion] = []
    buf = bytearray()
    buf += struct.pack(">i", 0)  # throttle_time_ms (v1+; we start at v4)
    if version >= 7:
        buf += struct.pack(">hi", top_error, 0)  # error_code, session_id 0 = no session
    buf += array_len(len(layout) + len(failed), flexible)

    def topic_key(key: Any) -> bytes:
        if version >= TOPIC_IDS_FROM:
            return uuid.UUID(str(key)).bytes
        return string(key, flexible)

    def partition_head(index: int, err: int, r: FetchPartitionResult | None) -> None:
        hw = r.high_watermark if r else -1
        lso = r.last_stable_offset if r else -1
        lso_start = r.log_start_offset if r else -1
        buf.extend(struct.pack(">ihqq", index, err, hw, lso))
        if version >= 5:
            buf.extend(struct.pack(">q", lso_start))
        aborted = r.aborted_transactions if r else None
        if aborted is None:
            buf.extend(array_len(-1, flexible))  # null: not read_committed, or nothing read
        else:
            buf.extend(array_len(len(aborted), flexible))
            for txn in aborted:
                buf.extend(_ABORTED.pack(txn.producer_id, txn.first_offset))
                if flexible:
                    buf.extend(b"\x00")
        if version >= 11:
            buf.extend(struct.pack(">i", -1))  # preferred_read_replica

    it = iter(results)
    for key, _name, indexes in layout:
        buf += topic_key(key)
        buf += array_len(len(indexes), flexible)
        for index in indexes:
            r = next(it)
            partition_head(index, r.error_code, r)
            data = r.records
            size = r.size if data is not None else 0
            buf += uvarint(size + 1) if flexible else struct.pack(">i", size)
            if size:
                parts.append(bytes(buf))
                buf = bytearray()
                for sl in data.slices:
                    parts.append(FileRegion(sl.file, sl.position, sl.size))
            if flexible:
                buf += b"\x00"  # partition tagged fields
        if flexible:
            buf += b"\x00"  # topic tagged fields
    for key, indexes, error in failed:
        buf += topic_key(key)
        buf += array_len(len(indexes), flexible)
        for index in indexes:
            partition_head(index, error, None)
            buf += uvarint(1) if flexible else struct.pack(">i", 0)
            if flexible:
                buf += b"\x00"
        if flexible:
            buf += b"\x00"
    if flexible:
        buf += b"\x00"  # top-level tagged fields
    parts.append(bytes(buf))
    return RawResponse(parts)
