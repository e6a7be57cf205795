"""__consumer_offsets key/value schemas and the coordinator partition of a group."""

from __future__ import annotations

import struct

import pytest

from strom.coordinator.common import java_string_hashcode, kafka_abs, partition_for
from strom.coordinator.group.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
    subscribed_topics,
)
from strom.coordinator.group.group_metadata import OffsetAndMetadata
from strom.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataRecord,
    MemberRecord,
    OffsetKey,
    SchemaError,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    read_group_metadata_value,
    read_key,
    read_offset_commit_value,
)


def test_java_string_hashcode_matches_java() -> None:
    # Values of String.hashCode() as computed by the JVM.
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("a") == 97
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -2147483648  # famous Integer.MIN_VALUE hash
    assert java_string_hashcode("日本") == 26085 * 31 + 26412  # UTF-16 code units


def test_partition_for_uses_kafka_abs() -> None:
    assert kafka_abs(-(1 << 31)) == 0
    assert kafka_abs(-5) == 5
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert 0 <= partition_for("my-group", 50) < 50


def test_offset_commit_key_layout() -> None:
    key = offset_commit_key("g", "t", 3)
    assert key == struct.pack(">hh1sh1si", 1, 1, b"g", 1, b"t", 3)
    assert read_key(key) == OffsetKey("g", "t", 3)
    assert read_key(group_metadata_key("g")) == GroupMetadataKey("g")


def test_offset_value_roundtrip_v3_and_v1() -> None:
    off = OffsetAndMetadata(42, 7, "meta", 1000)
    raw = offset_commit_value(off)
    assert raw[:2] == b"\x00\x03"
    assert read_offset_commit_value(raw) == off
    expiring = OffsetAndMetadata(42, -1, "", 1000, 5000)
    raw = offset_commit_value(expiring)
    assert raw[:2] == b"\x00\x01"
    assert read_offset_commit_value(raw) == expiring


def test_offset_value_v0_and_v2_are_readable() -> None:
    v0 = struct.pack(">hqh2sq", 0, 5, 2, b"md", 123)
    assert read_offset_commit_value(v0) == OffsetAndMetadata(5, -1, "md", 123, -1)
    v2 = struct.pack(">hqhq", 2, 9, 0, 456)
    assert read_offset_commit_value(v2) == OffsetAndMetadata(9, -1, "", 456, -1)


def test_group_metadata_roundtrip() -> None:
    rec = GroupMetadataRecord("consumer", 3, "range", "m1", 999, [
        MemberRecord("m1", "inst-1", "c1", "/127.0.0.1", 30000, 10000, b"sub", b"asg"),
        MemberRecord("m2", None, "c2", "/127.0.0.2", 30000, 10000, b"", b""),
    ])
    assert read_group_metadata_value(group_metadata_value(rec)) == rec


def test_corrupt_records_raise_schema_error() -> None:
    with pytest.raises(SchemaError):
        read_key(b"\x00\x09abc")
    with pytest.raises(SchemaError):
        read_key(b"\x00")
    with pytest.raises(SchemaError):
        read_offset_commit_value(b"\x00\x03\x00")
    with pytest.raises(SchemaError):
        read_group_metadata_value(b"\x00\x03\x00\x08consumer\x00\x00\x00\x01\xff\xff\xff\xff\x00\x00\x00\x00"
                                  b"\x00\x00\x00\x00\x7f\xff\xff\xff")


def test_consumer_protocol_parsing() -> None:
    sub = encode_subscription(["a", "b"], b"user")
    assert subscribed_topics(sub) == {"a", "b"}
    assert subscribed_topics(b"\x00") is None
    assert subscribed_topics(b"\x00\x00\x7f\xff\xff\xff") is None
    asg = encode_assignment({"a": [0, 2], "b": [1]})
    assert decode_assignment(asg) == {"a": [0, 2], "b": [1]}
    assert decode_assignment(b"") == {}
    assert decode_assignment(b"\x00\x00\x00\x00\x00\x05") is None
