"""The shared field reader/writer of the internal topics' records, and what a damaged record gives each reader."""

from __future__ import annotations

import struct
import uuid

import pytest

from strom.coordinator.group.consumer_group import ConsumerGroupMember
from strom.coordinator.group.consumer_group_records import (
    MEMBER_METADATA,
    TARGET_MEMBER,
    ConsumerGroupLoad,
    ConsumerGroupRecordKey,
    RecordError,
    group_key,
    member_metadata_value,
    parse_key,
    target_member_value,
)
from strom.coordinator.group.records import SchemaError as OffsetsSchemaError
from strom.coordinator.group.records import read_key as read_offsets_key
from strom.coordinator.group.records import read_offset_commit_value
from strom.coordinator.transaction.transaction_log import SchemaError as TxnSchemaError
from strom.coordinator.transaction.transaction_log import read_key as read_txn_key
from strom.protocol.field_codec import FieldError, FieldReader, FieldWriter

NOT_UTF8 = b"\xff\xfe"


@pytest.mark.parametrize("flexible", [False, True])
def test_every_field_reads_back_as_written(flexible: bool) -> None:
    tagged = {0: b"\x01\x02", 3: b""}
    data = (FieldWriter(flexible).i8(-3).i16(-300).i32(70_000).i64(-(2**40)).uvarint(300).string("grüße")
            .nullable_string(None).nullable_bytes(b"\x00\x01").nullable_bytes(None).array_length(2)
            .tagged_fields(tagged).done())
    r = FieldReader(data, flexible)
    assert (r.i8(), r.i16(), r.i32(), r.i64(), r.uvarint()) == (-3, -300, 70_000, -(2**40), 300)
    assert (r.string(), r.nullable_string(), r.nullable_bytes(), r.nullable_bytes()) == ("grüße", None, b"\x00\x01",
                                                                                          None)
    assert r.array_length() == 2
    assert r.tagged_fields() == (tagged if flexible else {})
    assert r.pos == len(data)


def test_compact_and_classic_layouts_are_kafkas() -> None:
    assert FieldWriter(flexible=True).string("ab").nullable_string(None).array_length(0).done() == b"\x03ab\x00\x01"
    assert FieldWriter().string("ab").nullable_string(None).array_length(0).done() == (
        b"\x00\x02ab\xff\xff\x00\x00\x00\x00")


@pytest.mark.parametrize("data, flexible", [
    (b"\x00", False),  # an int16 cut short
    (b"\x00\x05ab", False),  # a string longer than the record
    (b"\xff\xff\xff\xff\xff\xff", True),  # a varint of more than 5 bytes
    (b"\x00\x02" + NOT_UTF8, False),  # a string that is not UTF-8
    (b"\xff\xff", False),  # null where a string is required
])
def test_a_damaged_field_raises_the_callers_error(data: bytes, flexible: bool) -> None:
    class Mine(ValueError):
        pass

    with pytest.raises(FieldError):
        FieldReader(data, flexible).string()
    with pytest.raises(Mine):
        FieldReader(data, flexible, error=Mine).string()


def test_a_string_too_long_for_an_int16_length_is_refused() -> None:
    with pytest.raises(FieldError):
        FieldWriter().string("x" * 32768)
    assert len(FieldWriter(flexible=True).string("x" * 32768).done()) == 32768 + 3


def test_a_consumer_group_record_that_is_not_utf8_is_a_record_error() -> None:
    """The coordinator skips unreadable records while loading; a bad string used to escape as UnicodeDecodeError."""
    member = ConsumerGroupMember("m1")
    member.client_id = "c"
    good = member_metadata_value(member)
    bad = good.replace(b"\x02c", b"\x03" + NOT_UTF8, 1)
    load = ConsumerGroupLoad("g")
    with pytest.raises(RecordError):
        load.apply(ConsumerGroupRecordKey(MEMBER_METADATA, "g", "m1"), bad)
    with pytest.raises(RecordError):
        parse_key(struct.pack(">hh", MEMBER_METADATA, 2) + NOT_UTF8)
    load.apply(parse_key(group_key(MEMBER_METADATA, "g", "m1")), good)
    topic_id = uuid.uuid4()
    load.apply(parse_key(group_key(TARGET_MEMBER, "g", "m1")), target_member_value({topic_id: [2, 0]}))
    assert load.members["m1"].member.client_id == "c" and load.members["m1"].target == {topic_id: [0, 2]}


def test_offsets_and_transaction_records_that_are_not_utf8_are_schema_errors() -> None:
    with pytest.raises(OffsetsSchemaError):
        read_offsets_key(struct.pack(">hh", 2, 2) + NOT_UTF8)
    with pytest.raises(OffsetsSchemaError):
        read_offset_commit_value(struct.pack(">hqih", 3, 5, 0, 2) + NOT_UTF8 + struct.pack(">q", 0))
    with pytest.raises(TxnSchemaError):
        read_txn_key(struct.pack(">hh", 0, 2) + NOT_UTF8)
