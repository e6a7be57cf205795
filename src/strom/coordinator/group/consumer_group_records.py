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

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = range(3, 9)
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(3, 9))
_GROUP_KEYS = (GROUP_METADATA, PARTITION_METADATA, TARGET_METADATA)

# Kafka's MemberState bytes in the current-assignment record.
_STATE_BYTES = {MemberState.STABLE: 1, MemberState.UNREVOKED_PARTITIONS: 2, MemberState.UNRELEASED_PARTITIONS: 3}
_STATES = {v: k for k, v in _STATE_BYTES.items()}

IdAssignment = dict[uuid.UUID, list[int]]


class RecordError(ValueError):
    """A consumer group record that cannot be read."""


# -- encoding -----------------------------------------------------------------------
class _Out:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> _Out:
        self.buf += struct.pack(">b", v)
        return self

    def i16(self, v: int) -> _Out:
        self.buf += struct.pack(">h", v)
        return self

    def i32(self, v: int) -> _Out:
        self.buf += struct.pack(">i", v)
        return self

    def uvarint(self, v: int) -> _Out:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)
        return self

    def string(self, v: str) -> _Out:  # non-flexible (keys)
        raw = v.encode()
        return self.i16(len(raw)).raw(raw)

    def cbytes(self, v: bytes) -> _Out:  # compact
        return self.uvarint(len(v) + 1).raw(v)

    def cstring(self, v: str | None) -> _Out:  # compact, nullable
        if v is None:
            return self.uvarint(0)
        raw = v.encode()
        return self.uvarint(len(raw) + 1).raw(raw)

    def raw(self, b: bytes) -> _Out:
        self.buf += b
        return self

    def assignment(self, partitions: IdAssignment) -> _Out:
        self.uvarint(len(partitions) + 1)
        for topic_id, parts in sorted(partitions.items()):
            self.raw(topic_id.bytes).uvarint(len(parts) + 1)
            for p in sorted(parts):
                self.i32(p)
            self.uvarint(0)  # tagged fields
        return self

    def done(self) -> bytes:
        return bytes(self.buf)


class _In:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _unpack(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.buf):
            raise RecordError("record truncated")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def i8(self) -> int:
        return self._unpack(">b", 1)

    def i16(self) -> int:
        return self._unpack(">h", 2)

    def i32(self) -> int:
        return self._unpack(">i", 4)

    def i64(self) -> int:
        return self._unpack(">q", 8)

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise RecordError("bad varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordError("field runs past the record")
        v = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(v)

    def string(self) -> str:
        return self.take(self.i16()).decode()

    def cbytes(self) -> bytes:
        return self.take(self.uvarint() - 1)

    def cstring(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out

    def assignment(self) -> IdAssignment:
        out: IdAssignment = {}
        for _ in range(max(self.uvarint() - 1, 0)):
            topic_id = uuid.UUID(bytes=self.take(16))
            out[topic_id] = [self.i32() for _ in range(max(self.uvarint() - 1, 0))]
            self.tags()
        return out


# -- keys ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupRecordKey:
    record_type: int
    group: str
    member_id: str | None = None


def group_key(record_type: int, group: str, member_id: str | None = None) -> bytes:
    out = _Out().i16(record_type).string(group)
    if record_type not in _GROUP_KEYS:
        out.string(member_id or "")
    return out.done()


def read_consumer_group_key(record_type: int, key_body: _In | bytes) -> ConsumerGroupRecordKey:
    r = key_body if isinstance(key_body, _In) else _In(key_body)
    group = r.string()
    member = None if record_type in _GROUP_KEYS else r.string()
    return ConsumerGroupRecordKey(record_type, group, member)


def parse_key(key: bytes) -> ConsumerGroupRecordKey:
    r = _In(key)
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
    tag = struct.pack(">q", metadata_hash)
    return _Out().i16(0).i32(epoch).uvarint(1).uvarint(0).uvarint(len(tag)).raw(tag).done()


def member_metadata_value(m: ConsumerGroupMember) -> bytes:
    out = (_Out().i16(0).cstring(m.instance_id).cstring(m.rack_id).cstring(m.client_id).cstring(m.client_host)
           .uvarint(len(m.subscribed_topic_names) + 1))
    for name in m.subscribed_topic_names:
        out.cstring(name)
    out.cstring(m.subscribed_topic_regex).i32(m.rebalance_timeout_ms).cstring(m.server_assignor)
    if m.classic is None:
        return out.uvarint(0).done()
    tag = _classic_member_metadata(m.classic)
    return out.uvarint(1).uvarint(0).uvarint(len(tag)).raw(tag).done()


def _classic_member_metadata(classic: ClassicMemberMetadata) -> bytes:
    """Tagged field 0 of the member record: a classic member's session timeout and protocols."""
    out = _Out().i32(classic.session_timeout_ms).uvarint(len(classic.protocols) + 1)
    for name, metadata in classic.protocols:
        out.cstring(name).cbytes(metadata).uvarint(0)
    return out.uvarint(0).done()


def _read_classic_member_metadata(raw: bytes) -> ClassicMemberMetadata:
    r = _In(raw)
    session_timeout_ms = r.i32()
    protocols = []
    for _ in range(max(r.uvarint() - 1, 0)):
        name, metadata = r.cstring() or "", r.cbytes()
        r.tags()
        protocols.append((name, metadata))
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def target_metadata_value(epoch: int) -> bytes:
    return _Out().i16(0).i32(epoch).uvarint(0).done()


def target_member_value(partitions: IdAssignment) -> bytes:
    return _Out().i16(0).assignment(partitions).uvarint(0).done()


def current_assignment_value(m: ConsumerGroupMember, assigned: IdAssignment, pending: IdAssignment) -> bytes:
    """A static member that left with epoch -2 is written at epoch -2 (as Kafka), its real epoch in
    the previous-epoch field, so a restarted coordinator still holds its partitions for it."""
    epoch, previous = (STATIC_LEAVE_EPOCH, m.member_epoch) if m.left_static else (m.member_epoch,
                                                                                   m.previous_member_epoch)
    return (_Out().i16(0).i32(epoch).i32(previous).i8(_STATE_BYTES[m.state])
            .assignment(assigned).assignment(pending).uvarint(0).done())


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
            r = _In(value)
            r.i16()
            self.epoch = r.i32()
            tags = r.tags()
            self.metadata_hash = struct.unpack(">q", tags[0])[0] if len(tags.get(0, b"")) == 8 else 0
        elif t == TARGET_METADATA:
            if value is not None:
                r = _In(value)
                r.i16()
                self.target_epoch = r.i32()
        elif t == MEMBER_METADATA:
            if value is None:
                self.members.pop(mid, None)
                return
            r = _In(value)
            r.i16()
            m = ConsumerGroupMember(mid)
            m.instance_id, m.rack_id = r.cstring(), r.cstring()
            m.client_id, m.client_host = r.cstring() or "", r.cstring() or ""
            names = [r.cstring() or "" for _ in range(max(r.uvarint() - 1, 0))]
            m.subscribed_topic_names = tuple(names)
            m.subscribed_topic_regex = r.cstring()
            m.rebalance_timeout_ms = r.i32()
            m.server_assignor = r.cstring()
            classic = r.tags().get(0)
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
                loaded.target = {} if value is None else _read_assignment_value(value)
        elif t == CURRENT_ASSIGNMENT:
            loaded = self.members.get(mid)
            if loaded is None or value is None:
                return
            r = _In(value)
            r.i16()
            loaded.member.member_epoch, loaded.member.previous_member_epoch = r.i32(), r.i32()
            if loaded.member.member_epoch == STATIC_LEAVE_EPOCH:  # a static member away for now
                loaded.member.left_static = True
                loaded.member.member_epoch, loaded.member.previous_member_epoch = \
                    loaded.member.previous_member_epoch, -1
            loaded.member.state = _STATES.get(r.i8(), MemberState.STABLE)
            loaded.assigned, loaded.pending = r.assignment(), r.assignment()

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


def _read_assignment_value(value: bytes) -> IdAssignment:
    r = _In(value)
    r.i16()
    return r.assignment()
