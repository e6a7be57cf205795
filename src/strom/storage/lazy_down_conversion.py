"""Lazy down-conversion (Kafka's KIP-283): a Fetch v0-v3 partition's v2 batches become a v0/v1 message set
a chunk at a time while the response is written, so a fetch holds one chunk of the log and its conversion
in memory, not its whole read and the whole converted copy.

A fetch response states each partition's size before its records, so the size is fixed once the first
chunk is converted, as Kafka fixes it: the size of the read, or of the first converted chunk when that is
larger (an old client must get at least one whole message to make progress). The converted stream is then
cut at that size (the client drops the partial message at the end and fetches again from it) or, when it
comes out shorter, completed with a message header that claims more bytes than remain, which clients read
as a partial message and skip. Every step reads and converts in the caller's worker thread.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kafka.errors import UnsupportedCompressionTypeError

from strom.protocol.record_batch import COMPRESSION_ZSTD, LOG_OVERHEAD, iter_batches
from strom.storage.local_log import FileSlice
from strom.storage.message_conversion import down_convert

# Log bytes converted per step (whole batches; one batch larger than this is converted on its own).
CHUNK_BYTES = 128 * 1024
_OFFSET_SIZE = struct.Struct(">qi")  # a batch's (or message's) offset and length: LOG_OVERHEAD bytes


class LazyDownConversion:
    """One partition's records for an old fetcher: ``start`` converts the first chunk and fixes ``size``;
    ``next_piece`` then returns the bytes to write next until exactly ``size`` bytes are out."""

    def __init__(self, slices: Sequence[FileSlice], read_size: int, magic: int,
                 chunk_bytes: int = CHUNK_BYTES, fetch_offset: int = 0) -> None:
        self._reader = _BatchChunks(slices, chunk_bytes)
        self._read_size = read_size
        self._magic = magic
        self._fetch_offset = fetch_offset  # records of an uncompressed batch below it are dropped
        self._chunk_bytes = chunk_bytes
        self._first: bytes | None = None
        self._written = 0
        self._padding = False
        self.size = 0
        self.converted_records = 0  # so far (FetchMessageConversionsPerSec)

    def start(self) -> bytes | None:
        """Convert the first chunk and fix ``size``. Returns the whole converted records when the read fitted
        in one chunk (nothing is left to convert lazily), else None. Raises UnsupportedCompressionTypeError
        when the first batch is zstd (which no old fetcher can read)."""
        converted = self._convert_next(first=True)
        while not converted and not self._reader.exhausted:  # only control batches so far
            converted = self._convert_next(first=False)
        if self._reader.exhausted:
            self.size = len(converted)
            return converted
        self._first = converted
        self.size = max(self._read_size, len(converted))
        return None

    def next_piece(self) -> bytes | None:
        """The next bytes of the partition's records, None once ``size`` bytes were returned."""
        remaining = self.size - self._written
        if remaining <= 0:
            return None
        if self._first is not None:
            piece, self._first = self._first, None
        else:
            piece = b""
            while not piece and not self._reader.exhausted:
                piece = self._convert_next(first=False)
            if not piece:
                piece = self._filler(remaining)
        piece = piece[:remaining]
        self._written += len(piece)
        return piece

    def _convert_next(self, first: bool) -> bytes:
        data = self._reader.next()
        if not data:
            return b""
        for h in iter_batches(data):
            if h.compression == COMPRESSION_ZSTD:
                if first and h.position == 0:
                    raise UnsupportedCompressionTypeError("zstd batches cannot be read with Fetch v0-v3")
                data = data[:h.position]  # the next fetch starts at this batch and gets the error
                self._reader.stop()
                break
        converted, count = down_convert(data, self._magic, self._fetch_offset)
        self.converted_records += count
        return converted

    def _filler(self, remaining: int) -> bytes:
        """After the last converted message: a message header claiming one byte more than remains (a client
        reads it as a partial message), then zeros; at most one chunk per call."""
        n = min(remaining, self._chunk_bytes)
        if self._padding:
            return bytes(n)
        self._padding = True
        return (_OFFSET_SIZE.pack(-1, remaining + 1) + bytes(max(n - LOG_OVERHEAD, 0)))[:n]


class _BatchChunks:
    """Whole batches of a read's file slices, about ``chunk_bytes`` at a time."""

    def __init__(self, slices: Sequence[FileSlice], chunk_bytes: int) -> None:
        self._slices = list(slices)
        self._chunk_bytes = chunk_bytes
        self._index = 0
        self._pos = self._slices[0].position if self._slices else 0

    @property
    def exhausted(self) -> bool:
        return self._index >= len(self._slices)

    def stop(self) -> None:
        self._index = len(self._slices)

    def next(self) -> bytes:
        if self.exhausted:
            return b""
        sl = self._slices[self._index]
        end = sl.position + sl.size
        data = _pread(sl, min(self._chunk_bytes, end - self._pos), self._pos)
        whole = _whole_prefix(data)
        if whole == 0 and len(data) >= LOG_OVERHEAD:  # one batch larger than a chunk: read it whole
            need = LOG_OVERHEAD + _OFFSET_SIZE.unpack_from(data, 0)[1]
            data = _pread(sl, min(need, end - self._pos), self._pos)
            whole = len(data)
        elif whole == 0:
            whole = len(data)  # a few stray bytes: down_convert leaves a partial batch out
        self._pos += whole
        if self._pos >= end:
            self._index += 1
            if not self.exhausted:
                self._pos = self._slices[self._index].position
        return data[:whole]


def _whole_prefix(data: bytes) -> int:
    """Bytes of the whole batches at the start of ``data``."""
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        nxt = pos + LOG_OVERHEAD + _OFFSET_SIZE.unpack_from(data, pos)[1]
        if nxt > len(data):
            break
        pos = nxt
    return pos


def _pread(sl: FileSlice, size: int, position: int) -> bytes:
    """Read from the slice's segment; a segment deleted since the fetch read it ends the connection (its
    answer's size is already on the wire)."""
    try:
        data = sl.file.pread(size, position)
    except ValueError:
        raise ConnectionError("segment deleted during a down-converted fetch") from None
    if len(data) != size:
        raise ConnectionError("segment truncated during a down-converted fetch")
    return data
