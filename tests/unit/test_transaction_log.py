"""``__transaction_state`` records: Kafka's TransactionLogKey v0 and TransactionLogValue v0/v1 bytes."""

from __future__ import annotations

import struct

import pytest

from strom.coordinator.transaction.transaction_log import (
    SchemaError,
    key_to_bytes,
    read_key,
    read_value,
    value_to_bytes,
)
from strom.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionState,
    TxnTransitMetadata,
)


def transit(state: TransactionState = TransactionState.ONGOING,
            partitions: frozenset[tuple[str, int]] = frozenset({("b", 2), ("a", 1), ("a", 0)})) -> TxnTransitMetadata:
    return TxnTransitMetadata(4242, NO_PRODUCER_ID, 7, NO_PRODUCER_EPOCH, 60000, state, partitions, 1000, 2000)


def test_key_bytes() -> None:
    assert key_to_bytes("my-txn") == b"\x00\x00\x00\x06my-txn"
    assert read_key(key_to_bytes("ü-id")) == "ü-id"


def test_value_v0_bytes_are_kafkas_layout() -> None:
    expected = (struct.pack(">hqhib", 0, 4242, 7, 60000, 1) + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 1)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 2)
                + struct.pack(">qq", 2000, 1000))
    assert value_to_bytes(transit()) == expected


@pytest.mark.parametrize("state", list(TransactionState))
def test_value_round_trip(state: TransactionState) -> None:
    parts = frozenset() if state in (TransactionState.EMPTY, TransactionState.DEAD) else transit().topic_partitions
    assert read_value(value_to_bytes(transit(state, parts))) == transit(state, parts)


def test_value_v1_flexible_decodes() -> None:
    def uvarint(n: int) -> bytes:
        out = b""
        while True:
            b, n = n & 0x7F, n >> 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out

    data = (struct.pack(">hqhib", 1, 4242, 7, 60000, 2) + uvarint(2)  # one topic (compact: n + 1)
            + uvarint(2) + b"a" + uvarint(3) + struct.pack(">ii", 0, 1) + b"\x00"  # tags of the topic
            + struct.pack(">qq", 2000, 1000) + uvarint(1) + uvarint(5) + uvarint(2) + b"xx")  # one unknown tag
    got = read_value(data)
    assert got == transit(TransactionState.PREPARE_COMMIT, frozenset({("a", 0), ("a", 1)}))


def test_bad_records_raise_schema_error() -> None:
    with pytest.raises(SchemaError):
        read_key(b"\x00\x01\x00\x01a")
    with pytest.raises(SchemaError):
        read_value(value_to_bytes(transit())[:-3])
    with pytest.raises(SchemaError):
        read_value(struct.pack(">hqhib", 0, 1, 0, 1, 9) + struct.pack(">i", 0) + struct.pack(">qq", 0, 0))
    with pytest.raises(SchemaError):
        value_to_bytes(transit(TransactionState.EMPTY))
