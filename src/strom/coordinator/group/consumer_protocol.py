"""Just enough of the consumer's embedded protocol to know which topics a group reads.

Members of ``protocolType=consumer`` groups put a ConsumerProtocolSubscription
(version int16, topics [string], user_data bytes, then version-dependent fields)
in their JoinGroup metadata. The coordinator reads only the topic list: it decides
whether a committed offset still belongs to a subscribed topic (offset expiry,
OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC). Anything unparsable yields ``None``,
meaning "unknown", which keeps offsets rather than deleting them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONSUMER_PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription, or None if it cannot be parsed."""
    try:
        pos = 0
        (version,) = _I16.unpack_from(metadata, pos)
        pos += 2
        if version < 0:
            return None
        (count,) = _I32.unpack_from(metadata, pos)
        pos += 4
        if count < 0 or count > len(metadata):
            return None
        topics: set[str] = set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(bytes(metadata[pos:pos + length]).decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def encode_subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    """A version-0 ConsumerProtocolSubscription; used by tests and tools."""
    out = bytearray(_I16.pack(0) + _I32.pack(len(topics)))
    for t in topics:
        raw = t.encode()
        out += _I16.pack(len(raw)) + raw
    out += _I32.pack(len(user_data)) + user_data
    return bytes(out)


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes = b"") -> bytes:
    """A version-0 ConsumerProtocolAssignment; used by tests and tools."""
    out = bytearray(_I16.pack(0) + _I32.pack(len(partitions)))
    for topic, parts in partitions.items():
        raw = topic.encode()
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    out += _I32.pack(len(user_data)) + user_data
    return bytes(out)


def decode_assignment(data: bytes) -> dict[str, list[int]] | None:
    """Topic partitions of a ConsumerProtocolAssignment (for describe tools), None if unparsable."""
    if not data:
        return {}
    try:
        pos = 2
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        if count < 0 or count > len(data):
            return None
        result: dict[str, list[int]] = {}
        for _ in range(count):
            (length,) = _I16.unpack_from(data, pos)
            pos += 2
            topic = bytes(data[pos:pos + length]).decode("utf-8")
            pos += length
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            if n < 0 or n > len(data):
                return None
            parts = list(struct.unpack_from(f">{n}i", data, pos))
            pos += 4 * n
            result[topic] = parts
        return result
    except (struct.error, UnicodeDecodeError):
        return None


@dataclass(frozen=True, slots=True)
class Subscription:
    """A ConsumerProtocolSubscription as a coordinator serving a classic member itself reads it."""

    topics: list[str]
    owned_partitions: set[tuple[str, int]]  # v1+; empty before (eager members own nothing at JoinGroup)
    rack_id: str | None = None  # v3+


def decode_subscription(metadata: bytes) -> Subscription | None:
    """Topics, owned partitions and rack of a JoinGroup subscription; None if it cannot be parsed."""
    try:
        pos = 0

        def i16() -> int:
            nonlocal pos
            (v,) = _I16.unpack_from(metadata, pos)
            pos += 2
            return v

        def i32() -> int:
            nonlocal pos
            (v,) = _I32.unpack_from(metadata, pos)
            pos += 4
            return v

        def string() -> str | None:
            nonlocal pos
            n = i16()
            if n < 0:
                return None
            if pos + n > len(metadata):
                raise struct.error("string runs past the metadata")
            v = bytes(metadata[pos:pos + n]).decode("utf-8")
            pos += n
            return v

        def count() -> int:
            n = i32()
            if n > len(metadata):
                raise struct.error("array longer than the metadata")
            return max(n, 0)

        version = i16()
        if version < 0:
            return None
        topics = [string() or "" for _ in range(count())]
        user_data = i32()
        pos += max(user_data, 0)
        owned: set[tuple[str, int]] = set()
        rack = None
        if version >= 1 and pos < len(metadata):
            for _ in range(count()):
                topic = string() or ""
                owned.update((topic, i32()) for _ in range(count()))
            if version >= 2 and pos < len(metadata):
                i32()  # generation id
            if version >= 3 and pos < len(metadata):
                rack = string()
        return Subscription(topics, owned, rack)
    except (struct.error, UnicodeDecodeError):
        return None
