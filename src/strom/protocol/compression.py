"""Record batch (de)compression, for the code that looks inside batches: the log cleaner, the
coordinators' log loaders, ListOffsets by timestamp, recompression to a topic's
``compression.type``, dump-log and the Spark source and sink.

The produce and fetch paths never decompress a batch that is stored as sent. Everything else
that reads records out of a compressed batch goes through ``DecompressedStream``: the codec
libraries' streaming interfaces, asked for at most one chunk at a time, so a small batch that
inflates to gigabytes (a compression bomb) never sits in memory whole. ``IN_FLIGHT`` bounds the
decompressed bytes all streams of the process hold at once.

Snappy comes two ways: raw blocks (librdkafka) or xerial-framed chunks (Kafka's Java client).
A raw snappy block cannot be decoded in parts, but its size is in its preamble and snappy
expands at most ~21x, so a block is checked against ``MAX_SNAPPY_BLOCK`` before it is decoded.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
from backports import zstd

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_SIZE = 16  # magic (8) + version (4) + compatible version (4)
XERIAL_BLOCK_SIZE = 32 * 1024  # what Kafka's Java client writes

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {"uncompressed": CODEC_NONE, "none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY,
               "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}

STREAM_CHUNK = 64 * 1024  # decompressed bytes handed out per step
INPUT_SLICE = 16 * 1024  # compressed bytes handed to a decoder at a time
MAX_SNAPPY_BLOCK = 32 * 1024 * 1024
IN_FLIGHT_LIMIT = 128 * 1024 * 1024
IN_FLIGHT_WAIT_S = 60.0

_I32 = struct.Struct(">i")


class CorruptCompressedDataError(ValueError):
    """A compressed records section that cannot be decoded: truncated, corrupt or over a limit."""


class InFlightBudget:
    """Bytes of decompressed data held by every stream of the process, bounded.

    A reservation that does not fit waits (the callers are worker threads) for others to
    release; one larger than the whole budget can never fit and fails at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0
        self.peak = 0
        self._cond = threading.Condition()

    def reserve(self, n: int, timeout_s: float = IN_FLIGHT_WAIT_S) -> None:
        if n > self.limit:
            raise CorruptCompressedDataError(
                f"{n} decompressed bytes needed at once, over the limit of {self.limit}")
        with self._cond:
            if not self._cond.wait_for(lambda: self.in_use + n <= self.limit, timeout_s):
                raise CorruptCompressedDataError(
                    f"waited {timeout_s:.0f} s for {n} bytes of the decompression budget")
            self.in_use += n
            self.peak = max(self.peak, self.in_use)

    def release(self, n: int) -> None:
        with self._cond:
            self.in_use -= n
            self._cond.notify_all()


IN_FLIGHT = InFlightBudget(IN_FLIGHT_LIMIT)


# -- inflaters: one codec each, ``step(max_length)`` gives at most that many bytes, b"" at the end --

class _Identity:
    def __init__(self, payload: memoryview) -> None:
        self._payload = payload
        self._pos = 0

    def step(self, max_length: int) -> bytes | memoryview:
        out = self._payload[self._pos:self._pos + max_length]
        self._pos += len(out)
        return out


class _Input:
    """Compressed input handed to a decoder a slice at a time, so the decoders' copies of what
    they have not consumed yet stay small."""

    def __init__(self, payload: memoryview) -> None:
        self._payload = payload
        self._pos = 0

    def take(self) -> memoryview:
        out = self._payload[self._pos:self._pos + INPUT_SLICE]
        self._pos += len(out)
        return out

    def give_back(self, rest: bytes) -> None:
        """Bytes a finished decoder did not use: they come next (a following gzip member or frame)."""
        self._payload = memoryview(bytes(rest) + bytes(self._payload[self._pos:]))
        self._pos = 0

    def exhausted(self) -> bool:
        return self._pos >= len(self._payload)


class _Gzip:
    """zlib with max_length; concatenated gzip members are read one after another."""

    def __init__(self, payload: memoryview) -> None:
        self._input = _Input(payload)
        self._tail: bytes | memoryview = b""
        self._d = zlib.decompressobj(wbits=31)

    def step(self, max_length: int) -> bytes:
        while True:
            if not self._tail:
                self._tail = self._input.take()
            try:
                out = self._d.decompress(self._tail, max_length)
            except zlib.error as e:
                raise CorruptCompressedDataError(f"gzip: {e}") from e
            self._tail = self._d.unconsumed_tail
            if out:
                return out
            if self._d.eof:
                self._input.give_back(self._d.unused_data)  # the rest of the input, tail included
                self._tail = b""
                head = self._input.take()
                if len(head) >= 2 and head[:2] == b"\x1f\x8b":
                    self._tail, self._d = head, zlib.decompressobj(wbits=31)
                    continue
                return b""
            if not self._tail and self._input.exhausted():
                raise CorruptCompressedDataError("gzip: data is truncated")


class _Frames:
    """lz4 frame or zstd: decompressors with max_length / needs_input / eof / unused_data."""

    def __init__(self, payload: memoryview, factory: Callable[[], object], name: str) -> None:
        self._factory = factory
        self._name = name
        self._d = factory()
        self._input = _Input(payload)
        self._errors = (RuntimeError, ValueError, zstd.ZstdError)

    def step(self, max_length: int) -> bytes:
        d = self._d
        while True:
            if d.eof:  # type: ignore[attr-defined]
                self._input.give_back(d.unused_data or b"")  # type: ignore[attr-defined]
                if self._input.exhausted():
                    return b""
                d = self._d = self._factory()
            data: bytes | memoryview = b""
            if d.needs_input:  # type: ignore[attr-defined]
                data = self._input.take()
                if not data:
                    raise CorruptCompressedDataError(f"{self._name}: data is truncated")
            try:
                out = d.decompress(data, max_length)  # type: ignore[attr-defined]
            except EOFError:
                return b""
            except self._errors as e:
                raise CorruptCompressedDataError(f"{self._name}: {e}") from e
            if out:
                return out


class _Snappy:
    """Raw snappy (one block) or xerial framing (a block per chunk); a block decoded at a time."""

    def __init__(self, payload: memoryview, budget: InFlightBudget) -> None:
        self._payload = payload
        self._budget = budget
        self._xerial = bytes(payload[:8]) == XERIAL_MAGIC
        self._pos = XERIAL_HEADER_SIZE if self._xerial else 0
        self._block: memoryview = memoryview(b"")
        self._block_pos = 0
        self._reserved = 0
        self._raw_done = False

    def _next_block(self) -> bool:
        if self._xerial:
            if self._pos >= len(self._payload):
                return False
            if self._pos + 4 > len(self._payload):
                raise CorruptCompressedDataError("snappy: xerial chunk length is truncated")
            (size,) = _I32.unpack_from(self._payload, self._pos)
            start, end = self._pos + 4, self._pos + 4 + size
            if size < 0 or end > len(self._payload):
                raise CorruptCompressedDataError("snappy: xerial chunk is truncated")
            self._pos = end
            data = self._payload[start:end]
        else:
            if self._raw_done:
                return False
            self._raw_done = True
            data = self._payload
        try:
            n = cramjam.snappy.decompress_raw_len(data)
        except Exception as e:  # noqa: BLE001 - cramjam raises its own error types
            raise CorruptCompressedDataError(f"snappy: {e}") from e
        if n > MAX_SNAPPY_BLOCK:
            raise CorruptCompressedDataError(f"snappy: a block of {n} bytes is over {MAX_SNAPPY_BLOCK}")
        self._release()
        self._budget.reserve(n)
        self._reserved = n
        try:
            self._block = memoryview(bytes(cramjam.snappy.decompress_raw(data)))
        except Exception as e:  # noqa: BLE001
            raise CorruptCompressedDataError(f"snappy: {e}") from e
        self._block_pos = 0
        return True

    def _release(self) -> None:
        if self._reserved:
            self._budget.release(self._reserved)
            self._reserved = 0
            self._block = memoryview(b"")

    def step(self, max_length: int) -> bytes | memoryview:
        while self._block_pos >= len(self._block):
            if not self._next_block():
                self._release()
                return b""
        out = self._block[self._block_pos:self._block_pos + max_length]
        self._block_pos += len(out)
        return out

    def close(self) -> None:
        self._release()


class DecompressedStream:
    """The records section of a batch, decompressed a chunk at a time.

    Holds at most ``chunk`` decompressed bytes (plus one snappy block) and reserves them
    in ``budget``; ``close`` (or ``with``) gives them back."""

    def __init__(self, codec: int, payload: bytes | bytearray | memoryview,
                 budget: InFlightBudget = IN_FLIGHT, chunk: int = STREAM_CHUNK) -> None:
        view = payload if isinstance(payload, memoryview) else memoryview(payload)
        if codec not in (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD):
            raise CorruptCompressedDataError(f"unknown compression codec {codec}")
        self._budget = budget
        self._chunk = chunk
        budget.reserve(chunk)
        self._reserved = chunk
        self._inflater: _Identity | _Gzip | _Frames | _Snappy
        if codec == CODEC_NONE:
            self._inflater = _Identity(view)
        elif codec == CODEC_GZIP:
            self._inflater = _Gzip(view)
        elif codec == CODEC_SNAPPY:
            self._inflater = _Snappy(view, budget)
        elif codec == CODEC_LZ4:
            self._inflater = _Frames(view, lz4.frame.LZ4FrameDecompressor, "lz4")
        else:
            self._inflater = _Frames(view, zstd.ZstdDecompressor, "zstd")
        self._buf: bytes | memoryview = b""
        self._pos = 0
        self.total = 0  # decompressed bytes handed out so far

    def __enter__(self) -> DecompressedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if isinstance(self._inflater, _Snappy):
            self._inflater.close()
        if self._reserved:
            self._budget.release(self._reserved)
            self._reserved = 0
        self._buf = b""

    def _fill(self) -> bool:
        if self._pos < len(self._buf):
            return True
        self._buf = self._inflater.step(self._chunk)
        self._pos = 0
        return len(self._buf) > 0

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes (n is at most a few chunks: callers read field by field)."""
        parts = []
        want = n
        while want:
            if not self._fill():
                raise CorruptCompressedDataError(f"records end {want} bytes early")
            piece = self._buf[self._pos:self._pos + want]
            self._pos += len(piece)
            want -= len(piece)
            parts.append(piece)
        self.total += n
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def read_byte(self) -> int:
        if not self._fill():
            raise CorruptCompressedDataError("records end inside a field")
        b = self._buf[self._pos]
        self._pos += 1
        self.total += 1
        return b

    def pipe(self, n: int, sink: Callable[[bytes | memoryview], object] | None) -> None:
        """Pass the next ``n`` bytes to ``sink`` a chunk at a time (or drop them: sink None)."""
        while n:
            if not self._fill():
                raise CorruptCompressedDataError(f"records end {n} bytes early")
            piece = self._buf[self._pos:self._pos + n]
            self._pos += len(piece)
            n -= len(piece)
            self.total += len(piece)
            if sink is not None:
                sink(piece)

    def at_end(self) -> bool:
        return not self._fill()

    def read_some(self, n: int) -> bytes:
        """Up to ``n`` of the next bytes (what is decompressed already, or the next chunk); b"" at the end."""
        if not self._fill():
            return b""
        piece = bytes(self._buf[self._pos:self._pos + n])
        self._pos += len(piece)
        self.total += len(piece)
        return piece


# -- streaming compressors: ``compress`` and ``flush`` return what is ready, never the whole input --

class StreamCompressor:
    """A records section compressed as it is written, as producers write v2 batches: gzip,
    snappy in xerial framing (Kafka's Java client; read by every client), lz4 frame with
    independent blocks, zstd frame."""

    def __init__(self, codec: int) -> None:
        self.codec = codec
        self._pending = bytearray()
        self._started = False
        if codec == CODEC_GZIP:
            self._z = zlib.compressobj(6, zlib.DEFLATED, 31)
        elif codec == CODEC_LZ4:
            self._lz4 = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                                     block_linked=False)
        elif codec == CODEC_ZSTD:
            self._zstd = zstd.ZstdCompressor()
        elif codec not in (CODEC_NONE, CODEC_SNAPPY):
            raise ValueError(f"unknown compression codec {codec}")

    def _snappy_blocks(self, final: bool) -> bytes:
        out = bytearray()
        if not self._started:
            out += XERIAL_MAGIC + struct.pack(">ii", 1, 1)
            self._started = True
        while len(self._pending) >= XERIAL_BLOCK_SIZE or (final and self._pending):
            block = bytes(cramjam.snappy.compress_raw(bytes(self._pending[:XERIAL_BLOCK_SIZE])))
            del self._pending[:XERIAL_BLOCK_SIZE]
            out += _I32.pack(len(block)) + block
        return bytes(out)

    def compress(self, data: bytes | memoryview) -> bytes | memoryview:
        if self.codec == CODEC_NONE:
            return data
        if self.codec == CODEC_GZIP:
            return self._z.compress(data)
        if self.codec == CODEC_SNAPPY:
            self._pending += data
            return self._snappy_blocks(False)
        if self.codec == CODEC_LZ4:
            head = b""
            if not self._started:
                head, self._started = self._lz4.begin(), True
            return head + self._lz4.compress(bytes(data))
        return self._zstd.compress(data)

    def flush(self) -> bytes:
        if self.codec == CODEC_NONE:
            return b""
        if self.codec == CODEC_GZIP:
            return self._z.flush()
        if self.codec == CODEC_SNAPPY:
            return self._snappy_blocks(True)
        if self.codec == CODEC_LZ4:
            head = b""
            if not self._started:
                head, self._started = self._lz4.begin(), True
            return head + self._lz4.flush()
        return self._zstd.flush()


# -- whole-buffer helpers, for tools and tests whose data is small by construction --

def decompress(codec: int, payload: bytes | bytearray | memoryview) -> bytes:
    """The records section of a batch compressed with ``codec`` (the attributes' low 3 bits)."""
    if codec == CODEC_NONE:
        return bytes(payload)
    if codec == CODEC_GZIP:
        return gzip.decompress(payload)
    if codec == CODEC_SNAPPY:
        if bytes(payload[:8]) == XERIAL_MAGIC:
            out = bytearray()
            pos = XERIAL_HEADER_SIZE
            while pos + 4 <= len(payload):
                (chunk,) = _I32.unpack_from(payload, pos)
                pos += 4
                out += bytes(cramjam.snappy.decompress_raw(bytes(payload[pos : pos + chunk])))
                pos += chunk
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(bytes(payload)))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.decompress(bytes(payload)))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.decompress(bytes(payload)))
    raise ValueError(f"unknown compression codec {codec}")


def compress(codec: int, records: bytes | bytearray | memoryview) -> bytes:
    """A records section compressed as producers do for v2 batches: gzip, snappy as raw blocks
    (as librdkafka writes it), lz4 frame, zstd frame."""
    if codec == CODEC_NONE:
        return bytes(records)
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(records))
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(records))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(records))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(records))
    raise ValueError(f"unknown compression codec {codec}")
