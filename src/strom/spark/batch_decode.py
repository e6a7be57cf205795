"""Fetched record batches straight to Arrow, with no Python object per record.

A Fetch answer's records are v2 batches. Python walks the batch headers (a few per megabyte):
it skips batches outside the wanted offsets, control batches and, under read_committed,
aborted transactions, and decompresses compressed batches with cramjam. The records themselves
are decoded by the C kernels of ``strom/native/decode.c`` into Arrow buffers (keys and values
gathered into one data buffer each, as Spark's ``binary`` type needs contiguous values), or,
without a compiler, by ``decode_python``, which gives the same columns.
"""

from __future__ import annotations

import ctypes
import heapq
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom import native
from strom.protocol.compression import decompress
from strom.protocol.record_batch import (
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    read_control_marker,
    read_varint,
)

_TS_TYPE = pa.timestamp("us", tz="UTC")
_LENGTH_PREFIX = struct.Struct(">qi")


class CorruptFetchError(RuntimeError):
    """The fetched bytes are not valid v2 record batches (a broker or network fault)."""


@dataclass
class Columns:
    """Decoded records of one buffer, as Arrow arrays (headers None unless asked for)."""

    offsets: pa.Array
    timestamps: pa.Array
    timestamp_types: pa.Array
    keys: pa.Array
    values: pa.Array
    headers: pa.Array | None

    def __len__(self) -> int:
        return len(self.offsets)


# ---------------------------------------------------------------------------------------
# Record decoding: native kernels, and the pure-Python equivalent
# ---------------------------------------------------------------------------------------

_P = ctypes.c_void_p
_I64 = ctypes.c_int64


def _kernels() -> Any:
    lib = native.load("decode")
    if lib is not None and not getattr(lib, "_strom_typed", False):
        lib.strom_scan.argtypes = [_P, _P, _P, _I64, _I64, _I64, ctypes.c_int32, _P]
        lib.strom_scan.restype = _I64
        lib.strom_fill.argtypes = [_P, _P, _P, _I64, _I64, _I64, ctypes.c_int32] + [_P] * 15
        lib.strom_fill.restype = _I64
        lib._strom_typed = True
    return lib


def native_available() -> bool:
    return _kernels() is not None


def _alloc(size: int, zero: bool = False) -> pa.Buffer:
    buf = pa.allocate_buffer(max(size, 1))
    if zero:
        ctypes.memset(buf.address, 0, buf.size)
    return buf


def _bitmap_bytes(n: int) -> int:
    return (n + 7) // 8


def decode_native(buf: pa.Buffer, header_pos: Sequence[int], records_end: Sequence[int], lo: int, hi: int,
                  with_headers: bool, header_type: pa.DataType | None = None) -> Columns:
    """Decode the given batches of ``buf`` with the C kernels (``native_available()`` must be true)."""
    lib = _kernels()
    batches = len(header_pos)
    pos_arr = (ctypes.c_int64 * batches)(*header_pos)
    end_arr = (ctypes.c_int64 * batches)(*records_end)
    sizes = (ctypes.c_int64 * 6)()
    rc = lib.strom_scan(buf.address, pos_arr, end_arr, batches, lo, hi, int(with_headers), sizes)
    if rc < 0:
        raise CorruptFetchError(f"malformed record at position {-rc - 1} of a fetched batch")
    n, kb, vb, h, hkb, hvb = sizes
    if max(kb, vb, hkb, hvb) >= 2**31:
        raise CorruptFetchError("a fetched batch holds more than 2 GiB of keys or values; lower max.partition.fetch.bytes")
    offsets, ts, ts_type = _alloc(8 * n), _alloc(8 * n), _alloc(4 * n)
    key_off, key_data, key_valid = _alloc(4 * (n + 1)), _alloc(kb), _alloc(_bitmap_bytes(n), zero=True)
    val_off, val_data, val_valid = _alloc(4 * (n + 1)), _alloc(vb), _alloc(_bitmap_bytes(n), zero=True)
    if with_headers:
        list_off, hk_off, hk_data = _alloc(4 * (n + 1)), _alloc(4 * (h + 1)), _alloc(hkb)
        hv_off, hv_data, hv_valid = _alloc(4 * (h + 1)), _alloc(hvb), _alloc(_bitmap_bytes(h), zero=True)
        header_ptrs = [list_off.address, hk_off.address, hk_data.address, hv_off.address, hv_data.address,
                       hv_valid.address]
    else:
        header_ptrs = [None] * 6
    rc = lib.strom_fill(buf.address, pos_arr, end_arr, batches, lo, hi, int(with_headers),
                        offsets.address, ts.address, ts_type.address,
                        key_off.address, key_data.address, key_valid.address,
                        val_off.address, val_data.address, val_valid.address, *header_ptrs)
    if rc < 0:
        raise CorruptFetchError(f"malformed record at position {-rc - 1} of a fetched batch")
    headers = None
    if with_headers:
        hkeys = _utf8(pa.Array.from_buffers(pa.binary(), h, [None, hk_off, hk_data]))
        hvals = pa.Array.from_buffers(pa.binary(), h, [hv_valid, hv_off, hv_data])
        headers = _header_lists(n, list_off, hkeys, hvals, header_type)
    return Columns(
        offsets=pa.Array.from_buffers(pa.int64(), n, [None, offsets]),
        timestamps=pa.Array.from_buffers(_TS_TYPE, n, [None, ts]),
        timestamp_types=pa.Array.from_buffers(pa.int32(), n, [None, ts_type]),
        keys=pa.Array.from_buffers(pa.binary(), n, [key_valid, key_off, key_data]),
        values=pa.Array.from_buffers(pa.binary(), n, [val_valid, val_off, val_data]),
        headers=headers,
    )


def _utf8(raw: pa.Array) -> pa.Array:
    """Header keys as strings; invalid UTF-8 becomes U+FFFD, as Java's consumer decodes them."""
    try:
        return raw.cast(pa.string())  # validates, no copy
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in raw.to_pylist()], pa.string())


def _header_lists(n: int, list_offsets: pa.Buffer | pa.Array, keys: pa.Array, values: pa.Array,
                  header_type: pa.DataType | None) -> pa.Array:
    struct_type = header_type.value_type if header_type is not None else pa.struct(
        [("key", pa.string()), ("value", pa.binary())])
    items = pa.StructArray.from_arrays([keys, values], fields=list(struct_type))
    if isinstance(list_offsets, pa.Buffer):
        list_offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, list_offsets])
    list_type = header_type if header_type is not None else pa.list_(struct_type)
    return pa.ListArray.from_arrays(list_offsets, items, type=list_type)


def decode_python(buf: bytes | bytearray | memoryview, header_pos: Sequence[int], records_end: Sequence[int],
                  lo: int, hi: int, with_headers: bool, header_type: pa.DataType | None = None) -> Columns:
    """The same columns as ``decode_native``, one record at a time in Python (no compiler needed)."""
    view = memoryview(buf)
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    list_offsets = [0]
    hkeys: list[str] = []
    hvals: list[bytes | None] = []
    for start, end in zip(header_pos, records_end, strict=True):
        (base_offset, _, _, _, _, attributes, _, base_ts, max_ts, _, _, _, count) = HEADER.unpack_from(view, start)
        log_append = bool(attributes & TIMESTAMP_TYPE_MASK)
        pos = start + HEADER_SIZE
        for _ in range(count):
            if pos >= end:
                break
            at = pos
            try:
                length, pos = read_varint(view, pos)
                rec_end = pos + length
                if length < 0 or rec_end > end:
                    raise ValueError("record runs past its batch")
                rec = view[:rec_end]  # every field is bounded by its record
                if pos >= rec_end:
                    raise ValueError("empty record")
                pos += 1  # attributes
                ts_delta, pos = read_varint(rec, pos)
                offset_delta, pos = read_varint(rec, pos)
                key, pos = _read_bytes(rec, pos, rec_end)
                value, pos = _read_bytes(rec, pos, rec_end)
                header_count, pos = read_varint(rec, pos)
                if header_count < 0:
                    raise ValueError("negative header count")
            except ValueError as exc:
                raise CorruptFetchError(f"malformed record at position {at} of a fetched batch: {exc}") from None
            offset = _wrap64(base_offset + offset_delta)
            if offset < lo:
                pos = rec_end
                continue
            if offset >= hi:
                break
            ts = max_ts if log_append else _wrap64(base_ts + ts_delta)
            if ts > MAX_TIMESTAMP_MS:
                raise CorruptFetchError(f"record at position {at} has timestamp {ts} ms, past what microseconds hold")
            offsets.append(offset)
            timestamps.append(max(ts, 0) * 1000)
            types.append(1 if log_append else 0)
            keys.append(key)
            values.append(value)
            if with_headers:
                try:
                    for _ in range(header_count):
                        hkey, pos = _read_bytes(rec, pos, rec_end)
                        hval, pos = _read_bytes(rec, pos, rec_end)
                        if hkey is None:
                            raise ValueError("negative header key length")
                        hkeys.append(hkey.decode("utf-8", "replace"))
                        hvals.append(hval)
                except ValueError as exc:
                    raise CorruptFetchError(f"malformed header at position {at} of a fetched batch: {exc}") from None
                list_offsets.append(len(hkeys))
            pos = rec_end
    n = len(offsets)
    headers = None
    if with_headers:
        headers = _header_lists(n, pa.array(list_offsets, pa.int32()), pa.array(hkeys, pa.string()),
                                pa.array(hvals, pa.binary()), header_type)
    return Columns(
        offsets=pa.array(offsets, pa.int64()),
        timestamps=pa.array(timestamps, pa.int64()).view(_TS_TYPE),
        timestamp_types=pa.array(types, pa.int32()),
        keys=pa.array(keys, pa.binary()),
        values=pa.array(values, pa.binary()),
        headers=headers,
    )


MAX_TIMESTAMP_MS = (2**63 - 1) // 1000  # larger ones do not fit Spark's microseconds


def _wrap64(value: int) -> int:
    """Java's long arithmetic, as the broker and Kafka's clients compute offsets and timestamps."""
    return (value + 2**63) % 2**64 - 2**63


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    size, pos = read_varint(view, pos)
    if size < 0:
        return None, pos
    if pos + size > end:
        raise ValueError("field runs past its record")
    return bytes(view[pos : pos + size]), pos + size


def decode(buf: pa.Buffer, header_pos: Sequence[int], records_end: Sequence[int], lo: int, hi: int,
           with_headers: bool, header_type: pa.DataType | None = None) -> Columns:
    """Native kernels when available, else the pure-Python decoder."""
    if native_available():
        return decode_native(buf, header_pos, records_end, lo, hi, with_headers, header_type)
    return decode_python(memoryview(buf), header_pos, records_end, lo, hi, with_headers, header_type)


# ---------------------------------------------------------------------------------------
# Batch selection: offsets, control batches, aborted transactions, compression
# ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """Consecutive batches to decode from one buffer: the fetched one, or decompressed copies."""

    buffer: memoryview | bytearray
    spans: list[tuple[int, int]]  # (header position, records end)


@dataclass
class Selection:
    """Which batches of a fetched buffer to decode, in offset order, and where the next fetch starts."""

    runs: list[Run]
    next_offset: int  # past the last complete batch seen (gaps and markers included)


def select_batches(records: memoryview, lo: int, hi: int,
                   aborted: Sequence[tuple[int, int]] | None = None, read_committed: bool = False) -> Selection:
    """Walk the batch headers of a Fetch answer and pick what holds records in [lo, hi).

    A trailing partial batch (a fetch is cut at its byte limit) is left for the next fetch.
    Under read_committed, ``aborted`` is the answer's (producer id, first offset) list and the
    batches of those transactions are dropped, as Kafka's consumer does it. Compressed batches
    are inflated into a separate buffer (header copied, then the records).
    """
    runs: list[Run] = []
    pending = [(first, pid) for pid, first in aborted or ()] if read_committed else []
    heapq.heapify(pending)
    aborting: set[int] = set()
    nxt = lo
    pos, size = 0, len(records)
    while size - pos >= LOG_OVERHEAD:
        base_offset, length = _LENGTH_PREFIX.unpack_from(records, pos)
        end = pos + LOG_OVERHEAD + length
        if end > size:
            break  # partial batch at the end of the answer
        if length < HEADER_SIZE - LOG_OVERHEAD or records[pos + MAGIC_POS] != MAGIC_V2:
            raise CorruptFetchError(f"not a v2 record batch at position {pos} (offset {base_offset})")
        fields = HEADER.unpack_from(records, pos)
        attributes, last_delta, producer_id = fields[5], fields[6], fields[9]
        last_offset = base_offset + last_delta
        header_at, pos = pos, end
        if base_offset >= hi:
            break
        nxt = max(nxt, last_offset + 1)
        if read_committed and producer_id >= 0:
            while pending and pending[0][0] <= last_offset:
                aborting.add(heapq.heappop(pending)[1])
            if attributes & CONTROL_MASK:
                marker = read_control_marker(records, header_at)
                if marker is not None and marker[0] == CONTROL_ABORT:
                    aborting.discard(producer_id)
                continue
            if attributes & TRANSACTIONAL_MASK and producer_id in aborting:
                continue
        if attributes & CONTROL_MASK or last_offset < lo:
            continue
        codec = attributes & COMPRESSION_MASK
        if codec == 0:
            if not runs or runs[-1].buffer is not records:
                runs.append(Run(records, []))
            runs[-1].spans.append((header_at, end))
        else:
            try:
                payload = decompress(codec, records[header_at + HEADER_SIZE : end])
            except Exception as exc:  # noqa: BLE001 - gzip, zlib, cramjam and unknown codecs each raise their own
                raise CorruptFetchError(f"cannot decompress the batch at offset {base_offset} (codec {codec}): "
                                        f"{exc}") from None
            if not runs or runs[-1].buffer is records:
                runs.append(Run(bytearray(), []))
            inflated = runs[-1].buffer
            assert isinstance(inflated, bytearray)
            start = len(inflated)
            inflated += records[header_at : header_at + HEADER_SIZE]
            inflated += payload
            runs[-1].spans.append((start, len(inflated)))
    return Selection(runs, nxt)


def decode_fetched(records: memoryview | bytes, lo: int, hi: int, *, with_headers: bool,
                   header_type: pa.DataType | None = None, aborted: Sequence[tuple[int, int]] | None = None,
                   read_committed: bool = False) -> tuple[list[Columns], int]:
    """Columns of the records with offsets in [lo, hi) in a Fetch answer, and the next fetch offset."""
    view = memoryview(records)
    sel = select_batches(view, lo, hi, aborted, read_committed)
    out: list[Columns] = []
    for run in sel.runs:
        cols = decode_run(run, lo, hi, with_headers, header_type)
        if len(cols):
            out.append(cols)
    return out, sel.next_offset


def decode_run(run: Run, lo: int, hi: int, with_headers: bool, header_type: pa.DataType | None = None) -> Columns:
    return decode(pa.py_buffer(run.buffer), [p for p, _ in run.spans], [e for _, e in run.spans], lo, hi,
                  with_headers, header_type)
