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

KEY_VERSION = 0
VALUE_VERSION = 0
_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")  # last update, start


class SchemaError(ValueError):
    """A record of ``__transaction_state`` that follows no known schema version."""


def _string(v: str) -> bytes:
    raw = v.encode("utf-8")
    if len(raw) > 32767:
        raise SchemaError("string longer than 32767 bytes")
    return struct.pack(">h", len(raw)) + raw


def key_to_bytes(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(transactional_id)


def value_to_bytes(t: TxnTransitMetadata) -> bytes:
    if t.state == TransactionState.EMPTY and t.topic_partitions:
        raise SchemaError("an Empty transaction holds no partitions")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(t.topic_partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(struct.pack(">h", VALUE_VERSION))
    out += _HEAD.pack(t.producer_id, t.producer_epoch, t.txn_timeout_ms, int(t.state))
    out += struct.pack(">i", len(by_topic))
    for topic, partitions in by_topic.items():
        out += _string(topic)
        out += struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    out += _TAIL.pack(t.txn_last_update_timestamp, t.txn_start_timestamp)
    return bytes(out)


class _Reader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes, flexible: bool = False) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.flexible = flexible

    def take(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.pos + fmt.size > len(self.buf):
            raise SchemaError("record ends early")
        v = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return v

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise SchemaError("bad varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def length(self) -> int:
        """An array or string length: int32/int16 (-1 null) or compact uvarint - 1."""
        if self.flexible:
            return self.uvarint() - 1
        return self.take(struct.Struct(">i"))[0]

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.take(struct.Struct(">h"))[0]
        if n < 0 or self.pos + n > len(self.buf):
            raise SchemaError("bad string length")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.pos += self.uvarint()


def read_key(data: bytes) -> str:
    r = _Reader(data)
    (version,) = r.take(struct.Struct(">h"))
    if version != KEY_VERSION:
        raise SchemaError(f"unknown transaction log key version {version}")
    return r.string()


def read_value(data: bytes) -> TxnTransitMetadata:
    r = _Reader(data)
    (version,) = r.take(struct.Struct(">h"))
    if version not in (0, 1):
        raise SchemaError(f"unknown transaction log value version {version}")
    r.flexible = version >= 1
    pid, epoch, timeout, status = r.take(_HEAD)
    try:
        state = TransactionState(status)
    except ValueError:
        raise SchemaError(f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    n_topics = r.length()
    for _ in range(max(n_topics, 0)):
        topic = r.string()
        n = r.length()
        if n < 0 or r.pos + 4 * n > len(r.buf):
            raise SchemaError("bad partition array")
        partitions.update((topic, p) for p in r.take(struct.Struct(f">{n}i")))
        r.skip_tags()
    last_update, start = r.take(_TAIL)
    r.skip_tags()
    return TxnTransitMetadata(pid, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, timeout, state, frozenset(partitions),
                              start, last_update)
