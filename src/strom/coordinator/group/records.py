"""Key and value schemas of the records in ``__consumer_offsets``.

Byte-compatible with Kafka's own (OffsetCommitKey/Value, GroupMetadataKey/Value
from its message definitions), so ``kafka-console-consumer --formatter`` style
tools and Kafka's own coordinator could read a Strom log. Every key starts with
an int16 version that tells the record kind:

* versions 0 and 1 — OffsetCommitKey: group, topic, partition.
  Value (v0-v3; we write v3, or v1 when an expire timestamp is set):
  offset, [leader_epoch v3+], metadata, commit_timestamp, [expire_timestamp v1].
* version 2 — GroupMetadataKey: group.
  Value (v0-v3; we write v3): protocol_type, generation, protocol, leader,
  [current_state_timestamp v2+], members[member_id, [group_instance_id v3+],
  client_id, client_host, [rebalance_timeout v1+], session_timeout, subscription,
  assignment].

A null value is a tombstone: the offset or the group was deleted, and the log
cleaner eventually drops the key altogether.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_RECORD_TYPES,
    ConsumerGroupRecordKey,
    RecordError,
    parse_key,
)
from strom.coordinator.group.group_metadata import OffsetAndMetadata
from strom.protocol.field_codec import FieldReader, FieldWriter

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2


class SchemaError(ValueError):
    """A record of ``__consumer_offsets`` that does not follow any known schema version."""


def _writer() -> FieldWriter:
    return FieldWriter(error=SchemaError)


def _reader(data: bytes) -> FieldReader:
    return FieldReader(data, error=SchemaError)


# -- keys ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _writer().i16(OFFSET_COMMIT_KEY_VERSION).nullable_string(group).nullable_string(topic).i32(partition).done()


def group_metadata_key(group: str) -> bytes:
    return _writer().i16(GROUP_METADATA_KEY_VERSION).nullable_string(group).done()


def read_key(key: bytes) -> OffsetKey | GroupMetadataKey | ConsumerGroupRecordKey:
    r = _reader(key)
    version = r.i16()
    if version in CONSUMER_GROUP_RECORD_TYPES:  # KIP-848 consumer group records
        try:
            return parse_key(key)
        except RecordError as exc:
            raise SchemaError(f"unreadable consumer group key: {exc}") from exc
    if version in (0, 1):
        group, topic, partition = r.nullable_string(), r.nullable_string(), r.i32()
        if group is None or topic is None:
            raise SchemaError("null group or topic in offset commit key")
        return OffsetKey(group, topic, partition)
    if version == 2:
        group = r.nullable_string()
        if group is None:
            raise SchemaError("null group in group metadata key")
        return GroupMetadataKey(group)
    raise SchemaError(f"unknown key version {version} in __consumer_offsets")


# -- offset values -------------------------------------------------------------
def offset_commit_value(off: OffsetAndMetadata) -> bytes:
    if off.expire_timestamp >= 0:
        return (_writer().i16(1).i64(off.offset).nullable_string(off.metadata).i64(off.commit_timestamp)
                .i64(off.expire_timestamp).done())
    return (_writer().i16(3).i64(off.offset).i32(off.leader_epoch).nullable_string(off.metadata)
            .i64(off.commit_timestamp).done())


def read_offset_commit_value(value: bytes) -> OffsetAndMetadata:
    r = _reader(value)
    version = r.i16()
    if not 0 <= version <= 4:
        raise SchemaError(f"unknown offset commit value version {version}")
    if version >= 4:
        raise SchemaError("flexible offset commit values (v4) are not supported")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.nullable_string() or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts)


# -- group metadata values -----------------------------------------------------
@dataclass(slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)


def group_metadata_value(rec: GroupMetadataRecord) -> bytes:
    w = (_writer().i16(3).nullable_string(rec.protocol_type).i32(rec.generation).nullable_string(rec.protocol)
         .nullable_string(rec.leader).i64(rec.current_state_timestamp).i32(len(rec.members)))
    for m in rec.members:
        (w.nullable_string(m.member_id).nullable_string(m.group_instance_id).nullable_string(m.client_id).nullable_string(m.client_host)
         .i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms).nullable_bytes(m.subscription).nullable_bytes(m.assignment))
    return w.done()


def read_group_metadata_value(value: bytes) -> GroupMetadataRecord:
    r = _reader(value)
    version = r.i16()
    if not 0 <= version <= 3:
        raise SchemaError(f"unsupported group metadata value version {version}")
    protocol_type = r.nullable_string() or ""
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    count = r.i32()
    if count < 0 or count > len(value):
        raise SchemaError(f"invalid member count {count}")
    members = []
    for _ in range(count):
        member_id = r.nullable_string() or ""
        instance = r.nullable_string() if version >= 3 else None
        client_id = r.nullable_string() or ""
        client_host = r.nullable_string() or ""
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        if rebalance < 0:
            rebalance = session
        members.append(MemberRecord(member_id, instance, client_id, client_host, rebalance, session,
                                    r.nullable_bytes() or b"", r.nullable_bytes() or b""))
    return GroupMetadataRecord(protocol_type, generation, protocol, leader, state_ts, members)
