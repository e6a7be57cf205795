"""Kafka wire primitives used by the hand-written hot-path encoders."""

from __future__ import annotations

import struct


def uvarint(n: int) -> bytes:
    """Unsigned varint (compact lengths and tagged-field counts of flexible versions)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def array_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else struct.pack(">i", n)


def string(s: str, flexible: bool) -> bytes:
    b = s.encode()
    return (uvarint(len(b) + 1) if flexible else struct.pack(">h", len(b))) + b


def nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    return string(s, flexible)
