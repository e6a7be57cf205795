"""Records of KIP-848 consumer groups in ``__consumer_offsets``, laid out as Kafka 4.x writes them.

Every key is an int16 record type followed by a non-flexible struct; every value an int16
version (0) followed by a flexible struct (compact strings and arrays, tagged fields):

* 3 — ConsumerGroupMetadata (group) -> group epoch (tag 0: a hash of the subscribed topics'
  partition counts, so a restart knows whether they changed meanwhile);
* 5 — ConsumerGroupMemberMetadata (group, member) -> instance id, rack, client id and host,
  subscribed topic names and regex, rebalance timeout, server assignor (tag 0: a classic
  member's session timeout and JoinGroup protocols, for members served through the classic APIs);
* 6 — ConsumerGroupTargetAssignmentMetadata (group) -> assignment epoch;
* 7 — ConsumerGroupTargetAssignmentMember (group, member) -> target partitions by topic id;
* 8 — ConsumerGroupCurrentMemberAssignment (group, member) -> member epoch, previous epoch,
  state, assigned partitions and partitions pending revocation.

A null value is a tombstone. ``ConsumerGroupLoad`` replays them (latest per key wins) into a
``ConsumerGroup``; partitions stay keyed by topic id until the loop resolves them to names.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.coordinator.group.consumer_group import (
    STATIC_LEAVE_EPOCH,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from strom.protocol.field_codec import FieldReader, FieldWriter

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = range(3, 9)
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(3, 9))
_GROUP_KEYS = (GROUP_METADATA, PARTITION_METADATA, TARGET_METADATA)

# Kafka's MemberState bytes in the current-assignment record.
_STATE_BYTES = {MemberState.STABLE: 1, MemberState.UNREVOKED_PARTITIONS: 2, MemberState.UNRELEASED_PARTITIONS: 3}
_STATES = {v: k for k, v in _STATE_BYTES.items()}

IdAssignment = dict[uuid.UUID, list[int]]


class RecordError(ValueError):
    """A consumer group record that cannot be read."""


# -- fields ---------------------------------------------------------------------------
def _key_writer() -> FieldWriter:
    return FieldWriter(error=RecordError)


def _value_writer() -> FieldWriter:
    return FieldWriter(flexible=True, error=RecordError)


def _value_reader(value: bytes) -> FieldReader:
    """A value's fields, after its int16 version (always 0 so far)."""
    r = FieldReader(value, flexible=True, error=RecordError)
    r.i16()
    return r


def _write_assignment(out: FieldWriter, partitions: IdAssignment) -> FieldWriter:
    out.array_length(len(partitions))
    for topic_id, parts in sorted(partitions.items()):
        out.raw(topic_id.bytes).array_length(len(parts))
        for p in sorted(parts):
            out.i32(p)
        out.tagged_fields()
    return out


def _read_assignment(r: FieldReader) -> IdAssignment:
    out: IdAssignment = {}
    for _ in range(max(r.array_length(), 0)):
        topic_id = uuid.UUID(bytes=r.take(16))
        out[topic_id] = [r.i32() for _ in range(max(r.array_length(), 0))]
        r.tagged_fields()
    return out


# -- keys ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupRecordKey:
    record_type: int
    group: str
    member_id: str | None = None


def group_key(record_type: int, group: str, member_id: str | None = None) -> bytes:
    out = _key_writer().i16(record_type).string(group)
    if record_type not in _GROUP_KEYS:
        out.string(member_id or "")
    return out.done()


def read_consumer_group_key(record_type: int, key_body: FieldReader | bytes) -> ConsumerGroupRecordKey:
    r = key_body if isinstance(key_body, FieldReader) else FieldReader(key_body, error=RecordError)
    group = r.string()
    member = None if record_type in _GROUP_KEYS else r.string()
    return ConsumerGroupRecordKey(record_type, group, member)


def parse_key(key: bytes) -> ConsumerGroupRecordKey:
    r = FieldReader(key, error=RecordError)
    return read_consumer_group_key(r.i16(), r)


def consumer_group_member_tombstones(group: str, member_id: str) -> list[tuple[bytes, bytes | None]]:
    """What removing one member writes."""
    return [(group_key(t, group, member_id), None) for t in (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)]


def consumer_group_tombstones(group: str) -> list[tuple[bytes, bytes | None]]:
    """What deleting an empty consumer group writes (its members are gone already)."""
    return [(group_key(t, group), None) for t in (TARGET_METADATA, PARTITION_METADATA, GROUP_METADATA)]


# -- values ----------------------------------------------------------------------------
def subscription_hash(partitions: Mapping[str, int]) -> int:
    """A stable 63-bit digest of the subscribed topics and their partition counts."""
    text = "\n".join(f"{t}:{n}" for t, n in sorted(partitions.items())).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def group_metadata_value(epoch: int, metadata_hash: int) -> bytes:
    return _value_writer().i16(0).i32(epoch).tagged_fields({0: struct.pack(">q", metadata_hash)}).done()


def member_metadata_value(m: ConsumerGroupMember) -> bytes:
    out = (_value_writer().i16(0).nullable_string(m.instance_id).nullable_string(m.rack_id)
           .nullable_string(m.client_id).nullable_string(m.client_host).array_length(len(m.subscribed_topic_names)))
    for name in m.subscribed_topic_names:
        out.string(name)
    out.nullable_string(m.subscribed_topic_regex).i32(m.rebalance_timeout_ms).nullable_string(m.server_assignor)
    if m.classic is None:
        return out.tagged_fields().done()
    return out.tagged_fields({0: _classic_member_metadata(m.classic)}).done()


def _classic_member_metadata(classic: ClassicMemberMetadata) -> bytes:
    """Tagged field 0 of the member record: a classic member's session timeout and protocols."""
    out = _value_writer().i32(classic.session_timeout_ms).array_length(len(classic.protocols))
    for name, metadata in classic.protocols:
        out.string(name).nullable_bytes(metadata).tagged_fields()
    return out.tagged_fields().done()


def _read_classic_member_metadata(raw: bytes) -> ClassicMemberMetadata:
    r = FieldReader(raw, flexible=True, error=RecordError)
    session_timeout_ms = r.i32()
    protocols = []
    for _ in range(max(r.array_length(), 0)):
        name, metadata = r.nullable_string() or "", r.nullable_bytes() or b""
        r.tagged_fields()
        protocols.append((name, metadata))
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def target_metadata_value(epoch: int) -> bytes:
    return _value_writer().i16(0).i32(epoch).tagged_fields().done()


def target_member_value(partitions: IdAssignment) -> bytes:
    return _write_assignment(_value_writer().i16(0), partitions).tagged_fields().done()


def current_assignment_value(m: ConsumerGroupMember, assigned: IdAssignment, pending: IdAssignment) -> bytes:
    """A static member that left with epoch -2 is written at epoch -2 (as Kafka), its real epoch in
    the previous-epoch field, so a restarted coordinator still holds its partitions for it."""
    epoch, previous = (STATIC_LEAVE_EPOCH, m.member_epoch) if m.left_static else (m.member_epoch,
                                                                                   m.previous_member_epoch)
    out = _value_writer().i16(0).i32(epoch).i32(previous).i8(_STATE_BYTES[m.state])
    return _write_assignment(_write_assignment(out, assigned), pending).tagged_fields().done()


# -- replay ----------------------------------------------------------------------------
@dataclass(slots=True)
class LoadedMember:
    member: ConsumerGroupMember
    target: IdAssignment = field(default_factory=dict)
    assigned: IdAssignment = field(default_factory=dict)
    pending: IdAssignment = field(default_factory=dict)


@dataclass(slots=True)
class ConsumerGroupLoad:
    """The consumer-group records of one group, replayed in log order (latest per key wins)."""

    group_id: str
    epoch: int | None = None  # None: no group record (never written, or tombstoned)
    metadata_hash: int = 0
    target_epoch: int = 0
    members: dict[str, LoadedMember] = field(default_factory=dict)

    def apply(self, key: ConsumerGroupRecordKey, value: bytes | None) -> None:
        t, mid = key.record_type, key.member_id or ""
        if t == GROUP_METADATA:
            if value is None:
                self.epoch = None
                return
            r = _value_reader(value)
            self.epoch = r.i32()
            tags = r.tagged_fields()
            self.metadata_hash = struct.unpack(">q", tags[0])[0] if len(tags.get(0, b"")) == 8 else 0
        elif t == TARGET_METADATA:
            if value is not None:
                self.target_epoch = _value_reader(value).i32()
        elif t == MEMBER_METADATA:
            if value is None:
                self.members.pop(mid, None)
                return
            r = _value_reader(value)
            m = ConsumerGroupMember(mid)
            m.instance_id, m.rack_id = r.nullable_string(), r.nullable_string()
            m.client_id, m.client_host = r.nullable_string() or "", r.nullable_string() or ""
            names = [r.nullable_string() or "" for _ in range(max(r.array_length(), 0))]
            m.subscribed_topic_names = tuple(names)
            m.subscribed_topic_regex = r.nullable_string()
            m.rebalance_timeout_ms = r.i32()
            m.server_assignor = r.nullable_string()
            classic = r.tagged_fields().get(0)
            if classic is not None:
                m.classic = _read_classic_member_metadata(classic)
            loaded = self.members.get(mid)
            if loaded is None:
                self.members[mid] = LoadedMember(m)
            else:
                m.member_epoch, m.previous_member_epoch, m.state = (loaded.member.member_epoch,
                                                                     loaded.member.previous_member_epoch,
                                                                     loaded.member.state)
                loaded.member = m
        elif t == TARGET_MEMBER:
            loaded = self.members.get(mid)
            if loaded is not None:
                loaded.target = {} if value is None else _read_assignment(_value_reader(value))
        elif t == CURRENT_ASSIGNMENT:
            loaded = self.members.get(mid)
            if loaded is None or value is None:
                return
            r = _value_reader(value)
            loaded.member.member_epoch, loaded.member.previous_member_epoch = r.i32(), r.i32()
            if loaded.member.member_epoch == STATIC_LEAVE_EPOCH:  # a static member away for now
                loaded.member.left_static = True
                loaded.member.member_epoch, loaded.member.previous_member_epoch = \
                    loaded.member.previous_member_epoch, -1
            loaded.member.state = _STATES.get(r.i8(), MemberState.STABLE)
            loaded.assigned, loaded.pending = _read_assignment(r), _read_assignment(r)

    def build(self) -> ConsumerGroup | None:
        """The group (its partitions still by topic id in ``loaded``), or None if it was deleted."""
        if self.epoch is None:
            return None
        cg = ConsumerGroup(self.group_id)
        cg.group_epoch, cg.target_assignment_epoch = self.epoch, self.target_epoch
        cg.metadata_hash = self.metadata_hash
        for loaded in self.members.values():
            cg.add_member(loaded.member)
        cg.loaded = dict(self.members)
        return cg

