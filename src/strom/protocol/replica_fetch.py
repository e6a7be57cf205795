"""Fetch v12 as a follower (or the Spark source) speaks it, encoded and decoded by hand.

Every acks=all produce waits for a follower round trip, so the replica fetcher's request and
response sit on the replication latency path of every record. The generic codec builds one
object per field (and copies the records out of the frame); here the request is packed straight
into bytes and the response is read into plain tuples whose records are views into the frame.
The tagged fields (diverging epoch, current leader, snapshot id) are skipped; a follower learns
about divergence through OffsetForLeaderEpoch and about leaders from the controller. The last
stable offset and aborted transactions matter only to read_committed consumers, so the aborted
list is kept only when asked for.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from strom.protocol.codec import MalformedRequest, read_uvarint, skip_tagged_fields
from strom.protocol.primitives import uvarint

FETCH_VERSION = 12  # topics by name, flexible, LastFetchedEpoch

_REQUEST_HEAD = struct.Struct(">iiiibii")  # replica_id .. session_epoch
_REQUEST_PARTITION = struct.Struct(">iiqiqi")  # partition .. partition_max_bytes
_RESPONSE_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_RESPONSE_PARTITION = struct.Struct(">ihqqq")  # partition, error, high watermark, last stable, log start
_INT32 = struct.Struct(">i")
_ABORTED_TXN = struct.Struct(">qq")  # producer_id, first_offset (plus its own tagged fields)


class FetchPartition(NamedTuple):
    """One partition of a follower's Fetch request."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


class FetchedPartition(NamedTuple):
    """One partition of the leader's answer; ``records`` is a view into the response frame."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | None
    last_stable_offset: int = -1
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset), with keep_aborted


def encode_request(replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                   topics: dict[str, list[FetchPartition]], isolation_level: int = 0,
                   session_id: int = 0, session_epoch: int = -1,
                   forgotten: dict[str, list[int]] | None = None) -> bytes:
    """A Fetch v12 request body; replica_id -1 for a consumer. Without session fields it is a full,
    sessionless fetch; with them (KIP-227) ``topics`` holds only what changed and ``forgotten`` what
    leaves the session."""
    out = bytearray(_REQUEST_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level,
                                       session_id, session_epoch))
    out += uvarint(len(topics) + 1)
    for topic, partitions in topics.items():
        name = topic.encode()
        out += uvarint(len(name) + 1)
        out += name
        out += uvarint(len(partitions) + 1)
        for p in partitions:
            out += _REQUEST_PARTITION.pack(*p)
            out += b"\x00"  # partition tagged fields
        out += b"\x00"  # topic tagged fields
    out += uvarint(len(forgotten) + 1 if forgotten else 1)  # forgotten_topics_data
    for topic, indexes in (forgotten or {}).items():
        name = topic.encode()
        out += uvarint(len(name) + 1)
        out += name
        out += uvarint(len(indexes) + 1)
        for index in indexes:
            out += _INT32.pack(index)
        out += b"\x00"  # forgotten topic tagged fields
    out += b"\x01"  # rack_id: ""
    out += b"\x00"  # tagged fields
    return bytes(out)


def decode_response(body: bytes | bytearray | memoryview,
                    keep_aborted: bool = False) -> tuple[int, list[FetchedPartition]]:
    """(top-level error code, partitions) of a Fetch v12 response body (after the response header)."""
    error_code, _, partitions = decode_session_response(body, keep_aborted)
    return error_code, partitions


def decode_session_response(body: bytes | bytearray | memoryview,
                            keep_aborted: bool = False) -> tuple[int, int, list[FetchedPartition]]:
    """(top-level error code, session id, partitions) of a Fetch v12 response body."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    try:
        return _decode(view, keep_aborted)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"cannot decode a Fetch v12 response: {exc!r}") from exc


def _decode(view: memoryview, keep_aborted: bool) -> tuple[int, int, list[FetchedPartition]]:
    _, error_code, session_id = _RESPONSE_HEAD.unpack_from(view, 0)
    pos = _RESPONSE_HEAD.size
    out: list[FetchedPartition] = []
    n_topics, pos = read_uvarint(view, pos)
    for _ in range(n_topics - 1):
        n, pos = read_uvarint(view, pos)
        topic = str(view[pos : pos + n - 1], "utf-8")
        pos += n - 1
        n_parts, pos = read_uvarint(view, pos)
        for _ in range(n_parts - 1):
            partition, err, hw, lso, log_start = _RESPONSE_PARTITION.unpack_from(view, pos)
            pos += _RESPONSE_PARTITION.size
            n_aborted, pos = read_uvarint(view, pos)  # 0 = null
            aborted = [] if keep_aborted else None
            for _ in range(n_aborted - 1):
                if aborted is not None:
                    aborted.append(_ABORTED_TXN.unpack_from(view, pos))
                pos = skip_tagged_fields(view, pos + _ABORTED_TXN.size)
            pos += _INT32.size  # preferred_read_replica
            size, pos = read_uvarint(view, pos)  # 0 = null, else length + 1
            records = None
            if size:
                end = pos + size - 1
                if end > len(view):
                    raise MalformedRequest("records run past the end of the Fetch response")
                records = view[pos:end]
                pos = end
            pos = skip_tagged_fields(view, pos)
            out.append(FetchedPartition(topic, partition, err, hw, log_start, records, lso, aborted))
        pos = skip_tagged_fields(view, pos)
    return error_code, session_id, out
