"""__consumer_offsets key/value schemas and the coordinator partition of a group."""

from __future__ import annotations

import struct

import pytest

from strom.coordinator.common import java_string_hashcode, kafka_abs, partition_for
from strom.coordinator.group.consumer_group import ClassicMemberMetadata, ConsumerGroupMember
from strom.coordinator.group.consumer_group_records import (
    MEMBER_METADATA,
    ConsumerGroupLoad,
    group_key,
    member_metadata_value,
    parse_key,
)
from strom.coordinator.group.consumer_protocol import (
    decode_assignment,
    decode_subscription,
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


def test_subscription_with_owned_partitions_and_rack() -> None:
    """What a classic member of a consumer group reports at JoinGroup (v0 to v3 subscriptions)."""
    v0 = encode_subscription(["a", "b"], b"ud")
    sub = decode_subscription(v0)
    assert sub is not None and (sub.topics, sub.owned_partitions, sub.rack_id) == (["a", "b"], set(), None)
    owned = struct.pack(">i", 1) + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 3)
    v3 = b"\x00\x03" + v0[2:] + owned + struct.pack(">i", 7) + struct.pack(">h", 2) + b"r1"
    sub = decode_subscription(v3)
    assert sub is not None and (sub.owned_partitions, sub.rack_id) == ({("a", 0), ("a", 3)}, "r1")
    assert decode_subscription(b"\x00\x01\x00\x00\x00\x09") is None  # more topics than bytes
    assert decode_subscription(b"") is None


def test_classic_member_metadata_roundtrip() -> None:
    """Tag 0 of the member record keeps a classic member's session timeout and protocols."""
    m = ConsumerGroupMember("m1", client_id="c", subscribed_topic_names=("a",),
                            classic=ClassicMemberMetadata(10000, (("range", b"\x00\x01"), ("roundrobin", b""))))
    load = ConsumerGroupLoad("g")
    load.apply(parse_key(group_key(MEMBER_METADATA, "g", "m1")), member_metadata_value(m))
    assert load.members["m1"].member.classic == m.classic
    plain = ConsumerGroupMember("m2", subscribed_topic_names=("a",))
    load.apply(parse_key(group_key(MEMBER_METADATA, "g", "m2")), member_metadata_value(plain))
    assert load.members["m2"].member.classic is None
