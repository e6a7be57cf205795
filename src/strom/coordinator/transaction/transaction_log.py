"""Key and value schemas of the records in ``__transaction_state``.

Byte-compatible with Kafka's TransactionLogKey v0 {transactional_id} and
TransactionLogValue v0/v1 {producer_id, producer_epoch, transaction_timeout_ms,
transaction_status, transaction_partitions [(topic, partition_ids)],
transaction_last_update_timestamp_ms, transaction_start_timestamp_ms}. Like Kafka 3.x
before transactions v2 we write value v0 (v1 is the same fields in the flexible encoding)
and read both. One key per transactional id, so compaction keeps the latest state; a null
value (tombstone) is an expired id. The last producer id/epoch are not in v0 and load as
unknown, as in Kafka.
"""

from __future__ import annotations

import struct

from strom.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionState,
    TxnTransitMetadata,
)
from strom.protocol.field_codec import FieldReader, FieldWriter

KEY_VERSION = 0
VALUE_VERSION = 0
_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")  # last update, start


class SchemaError(ValueError):
    """A record of ``__transaction_state`` that follows no known schema version."""


def key_to_bytes(transactional_id: str) -> bytes:
    return FieldWriter(error=SchemaError).i16(KEY_VERSION).string(transactional_id).done()


def value_to_bytes(t: TxnTransitMetadata) -> bytes:
    if t.state == TransactionState.EMPTY and t.topic_partitions:
        raise SchemaError("an Empty transaction holds no partitions")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(t.topic_partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = FieldWriter(error=SchemaError).i16(VALUE_VERSION)
    out.pack(_HEAD, t.producer_id, t.producer_epoch, t.txn_timeout_ms, int(t.state)).array_length(len(by_topic))
    for topic, partitions in by_topic.items():
        out.string(topic).array_length(len(partitions)).pack(struct.Struct(f">{len(partitions)}i"), *partitions)
    return out.pack(_TAIL, t.txn_last_update_timestamp, t.txn_start_timestamp).done()


def read_key(data: bytes) -> str:
    r = FieldReader(data, error=SchemaError)
    version = r.i16()
    if version != KEY_VERSION:
        raise SchemaError(f"unknown transaction log key version {version}")
    return r.string()


def read_value(data: bytes) -> TxnTransitMetadata:
    r = FieldReader(data, error=SchemaError)
    version = r.i16()
    if version not in (0, 1):
        raise SchemaError(f"unknown transaction log value version {version}")
    r.flexible = version >= 1
    pid, epoch, timeout, status = r.unpack(_HEAD)
    try:
        state = TransactionState(status)
    except ValueError:
        raise SchemaError(f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    n_topics = r.array_length()
    for _ in range(max(n_topics, 0)):
        topic = r.string()
        n = r.array_length()
        if n < 0 or r.pos + 4 * n > len(r.buf):
            raise SchemaError("bad partition array")
        partitions.update((topic, p) for p in r.unpack(struct.Struct(f">{n}i")))
        r.tagged_fields()
    last_update, start = r.unpack(_TAIL)
    r.tagged_fields()
    return TxnTransitMetadata(pid, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, timeout, state, frozenset(partitions),
                              start, last_update)
