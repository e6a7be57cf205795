"""Reading and writing the fields of Kafka's schema'd records (the internal topics' keys and values).

The records of ``__consumer_offsets`` and ``__transaction_state`` follow Kafka's message definitions:
int16/int32/int64 fields, strings and arrays with an int16/int32 length, or, in a flexible version,
a compact (unsigned varint, length + 1) length and tagged fields. These records are read from disk
and from followers' copies, so a bad length or a truncated record must raise the caller's own
schema error (a ValueError) rather than an IndexError, struct.error or UnicodeDecodeError.
"""

from __future__ import annotations

import struct

from strom.protocol.primitives import uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAX_VARINT_SHIFT = 28  # an unsigned varint of at most 5 bytes (32 bits)
_MAX_INT16_STRING = 32767


class FieldError(ValueError):
    """A record field that cannot be read or written (the default error of FieldReader/FieldWriter)."""


class FieldReader:
    """Reads fields in order from one record; `flexible` selects compact lengths and tagged fields."""

    __slots__ = ("buf", "pos", "flexible", "error")

    def __init__(self, buf: bytes | bytearray | memoryview, flexible: bool = False,
                 error: type[ValueError] = FieldError) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.flexible = flexible
        self.error = error

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        """Several fixed-size fields at once (`fmt` a big-endian struct)."""
        if self.pos + fmt.size > len(self.buf):
            raise self.error("record truncated")
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def i8(self) -> int:
        return self.unpack(_I8)[0]

    def i16(self) -> int:
        return self.unpack(_I16)[0]

    def i32(self) -> int:
        return self.unpack(_I32)[0]

    def i64(self) -> int:
        return self.unpack(_I64)[0]

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf) or shift > _MAX_VARINT_SHIFT:
                raise self.error("bad varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def take(self, n: int) -> bytes:
        """The next `n` raw bytes."""
        if n < 0 or self.pos + n > len(self.buf):
            raise self.error("field runs past the record")
        value = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return value

    def array_length(self) -> int:
        """An array's length: int32 or compact (uvarint - 1); -1 is a null array."""
        return self.uvarint() - 1 if self.flexible else self.i32()

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise self.error("null where a string is required")
        return value

    def nullable_bytes(self) -> bytes | None:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        return None if n < 0 else self.take(n)

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged fields (tag -> raw value) of a flexible struct; nothing in a non-flexible one."""
        fields: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                fields[tag] = self.take(self.uvarint())
        return fields


class FieldWriter:
    """Appends fields to one record; `flexible` selects compact lengths and tagged fields."""

    __slots__ = ("buf", "flexible", "error")

    def __init__(self, flexible: bool = False, error: type[ValueError] = FieldError) -> None:
        self.buf = bytearray()
        self.flexible = flexible
        self.error = error

    def pack(self, fmt: struct.Struct, *values: int) -> FieldWriter:
        self.buf += fmt.pack(*values)
        return self

    def i8(self, v: int) -> FieldWriter:
        return self.pack(_I8, v)

    def i16(self, v: int) -> FieldWriter:
        return self.pack(_I16, v)

    def i32(self, v: int) -> FieldWriter:
        return self.pack(_I32, v)

    def i64(self, v: int) -> FieldWriter:
        return self.pack(_I64, v)

    def uvarint(self, v: int) -> FieldWriter:
        self.buf += uvarint(v)
        return self

    def raw(self, b: bytes) -> FieldWriter:
        self.buf += b
        return self

    def array_length(self, n: int) -> FieldWriter:
        return self.uvarint(n + 1) if self.flexible else self.i32(n)

    def _length(self, n: int, wide: bool) -> FieldWriter:
        if self.flexible:
            return self.uvarint(n + 1)
        return self.i32(n) if wide else self.i16(n)

    def nullable_string(self, v: str | None) -> FieldWriter:
        if v is None:
            return self._length(-1, wide=False)
        raw = v.encode("utf-8")
        if not self.flexible and len(raw) > _MAX_INT16_STRING:
            raise self.error(f"string longer than {_MAX_INT16_STRING} bytes")
        return self._length(len(raw), wide=False).raw(raw)

    def string(self, v: str) -> FieldWriter:
        return self.nullable_string(v)

    def nullable_bytes(self, v: bytes | None) -> FieldWriter:
        if v is None:
            return self._length(-1, wide=True)
        return self._length(len(v), wide=True).raw(v)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> FieldWriter:
        """The tagged fields of a flexible struct (none by default), in tag order."""
        if self.flexible:
            items = sorted((fields or {}).items())
            self.uvarint(len(items))
            for tag, value in items:
                self.uvarint(tag).uvarint(len(value)).raw(value)
        return self

    def done(self) -> bytes:
        return bytes(self.buf)
