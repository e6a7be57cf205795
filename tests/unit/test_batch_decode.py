"""Property tests of the Spark source's record decoder (strom.spark.batch_decode), no broker.

Fetch answers are built from kafka-python's record batch builder: every codec, null and empty
keys and values, headers, LogAppendTime batches, offset gaps left by compaction, transaction
markers and aborted transactions, and a last batch cut at the fetch's byte limit. The C kernels
and the pure-Python decoder must give the same columns, and both must equal an oracle read with
kafka-python's own batch iterator. Malformed records must raise CorruptFetchError, and the C
kernels must never read past the buffer (it is placed right before an unreadable page).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from tests.support.record_batches import CODEC_IDS, CODECS, Record, compressed, fix_crc, producer_batch

from strom import native
from strom.protocol.record_batch import (
    ATTRIBUTES_POS,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    build_control_batch,
    set_base_offset,
    set_log_append_time,
)
from strom.spark import batch_decode
from strom.spark.batch_decode import (
    Columns,
    CorruptFetchError,
    decode_fetched,
    decode_native,
    decode_python,
    native_available,
    select_batches,
)

NATIVE = native_available()
needs_native = pytest.mark.skipif(
    not NATIVE, reason="native decode kernels unavailable (no C compiler, or STROM_NATIVE=0): Python path only")

EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PRODUCERS = (4000, 4001, 4002)
RECORDS_COUNT_POS = 57

_I32 = struct.Struct(">i")


# ---------------------------------------------------------------------------------------
# Building fetch answers
# ---------------------------------------------------------------------------------------


@dataclass
class Batch:
    raw: bytes  # uncompressed, as kafka-python reads it back (the oracle's input)
    data: bytes  # what the broker serves: possibly compressed
    base_offset: int
    last_offset: int
    control: bool = False
    aborted: bool = False  # belongs to a transaction that ends with an ABORT marker


@dataclass
class Fetched:
    """A Fetch answer's records, the batches it holds, and the answer's aborted transactions."""

    batches: list[Batch]
    data: bytes
    complete: int  # batches wholly inside data (the last may be cut at the byte limit)
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (producer id, first offset)


keys = st.one_of(st.none(), st.binary(max_size=12))
values = st.one_of(st.none(), st.just(b""), st.binary(max_size=40),
                   st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=4), st.integers(1, 200)))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)


@st.composite
def record_lists(draw: st.DrawFn) -> tuple[list[Record], list[int]]:
    """1..5 records with offset deltas that may skip (records removed by compaction)."""
    n = draw(st.integers(1, 5))
    first_ts = draw(st.one_of(st.integers(0, 2**42), st.integers(-3, 3)))
    records = [(draw(keys), draw(values), draw(header_lists), first_ts + draw(st.integers(-1000, 1000)) * (i > 0))
               for i in range(n)]
    deltas, d = [], 0
    for _ in range(n):
        deltas.append(d)
        d += 1 + draw(st.sampled_from([0, 0, 0, 1, 5]))
    return records, deltas


@st.composite
def fetched(draw: st.DrawFn, transactions: bool = False) -> Fetched:
    """A random Fetch answer: producer batches, transactions with their markers, gaps, a cut tail."""
    offset = draw(st.integers(0, 2**40))
    open_txns: dict[int, tuple[int, bool]] = {}  # producer id -> (first offset, will abort)
    txn_batches: dict[int, list[Batch]] = {}
    aborted: list[tuple[int, int, int]] = []  # (producer id, first offset, marker offset)
    batches: list[Batch] = []

    def end_txn(pid: int, coordinator_epoch: int, timestamp: int) -> None:
        """The producer's COMMIT or ABORT marker at ``offset``; its batches learn their fate."""
        first, abort = open_txns.pop(pid)
        raw = build_control_batch(pid, 0, coordinator_epoch, not abort, timestamp, offset)
        batches.append(Batch(raw, raw, offset, offset, control=True))
        for b in txn_batches.pop(pid):
            b.aborted = abort
        if abort:
            aborted.append((pid, first, offset))

    for _ in range(draw(st.integers(1, 7))):
        offset += draw(st.sampled_from([0, 0, 0, 1, 3, 1000]))  # gaps: compaction, deleted markers
        kinds = ["txn", "txn", "plain"] if transactions else ["plain", "idempotent", "txn", "txn", "emptied"]
        kind = draw(st.sampled_from([*kinds, "marker"] if open_txns else kinds))
        if kind == "marker":
            pid = draw(st.sampled_from(sorted(open_txns)))
            end_txn(pid, draw(st.integers(0, 5)), draw(st.integers(0, 2**42)))
            offset += 1
            continue
        if kind == "emptied":  # compaction removed every record but kept the batch (producer state)
            raw, _ = producer_batch([(None, None, [], 0)], [0], producer_id=3998)
            buf = bytearray(raw[:HEADER_SIZE])
            _I32.pack_into(buf, 8, HEADER_SIZE - LOG_OVERHEAD)
            last = offset + draw(st.integers(0, 3))
            _I32.pack_into(buf, LAST_OFFSET_DELTA_POS, last - offset)
            _I32.pack_into(buf, RECORDS_COUNT_POS, 0)
            set_base_offset(buf, 0, offset)
            fix_crc(buf)
            batches.append(Batch(bytes(buf), bytes(buf), offset, last))
            offset = last + 1
            continue
        records, deltas = draw(record_lists())
        pid = -1
        if kind == "idempotent":
            pid = 3999
        elif kind == "txn":
            pid = draw(st.sampled_from(PRODUCERS))
            if pid not in open_txns:
                open_txns[pid] = (offset, draw(st.booleans()))
                txn_batches[pid] = []
        raw, _ = producer_batch(records, deltas, producer_id=pid, transactional=kind == "txn")
        buf = bytearray(raw)
        set_base_offset(buf, 0, offset)
        tail = draw(st.sampled_from([0, 0, 0, 2]))  # compaction removed the last records, kept the offsets
        last = offset + deltas[-1] + tail
        if tail:
            _I32.pack_into(buf, LAST_OFFSET_DELTA_POS, deltas[-1] + tail)
            fix_crc(buf)
        if draw(st.integers(0, 4)) == 0:
            set_log_append_time(buf, 0, draw(st.integers(0, 2**42)))
        codec = draw(st.sampled_from(CODECS))
        batch = Batch(bytes(buf), compressed(bytes(buf), codec), offset, last)
        batches.append(batch)
        if kind == "txn":
            txn_batches[pid].append(batch)
        offset = last + 1
    for pid in sorted(open_txns):  # close every transaction, as a finished log would
        end_txn(pid, 0, 0)
        offset += 1
    # The answer may start after the first batches (the fetch offset was further on): the broker
    # then lists only the aborted transactions still open at or after the fetch's first batch.
    skip = draw(st.integers(0, len(batches) - 1))
    batches = batches[skip:]
    start = batches[0].base_offset
    data = b"".join(b.data for b in batches)
    complete = len(batches)
    if draw(st.booleans()):
        last = len(batches[-1].data)
        data = data[: len(data) - draw(st.integers(1, last - 1))]
        complete -= 1
    listed = [(pid, first) for pid, first, marker in aborted if marker >= start]
    return Fetched(batches, data, complete, draw(st.permutations(listed)))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class GuardedBuffer:
    """Bytes placed right before an unreadable page: reading one byte past them is a SIGSEGV."""

    def __init__(self, data: bytes) -> None:
        page = mmap.PAGESIZE
        pages = max(1, -(-len(data) // page))
        self.map = mmap.mmap(-1, (pages + 1) * page)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        if _libc.mprotect(base + pages * page, page, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect")
        start = pages * page - len(data)
        self.map[start : start + len(data)] = data
        self.buffer = pa.foreign_buffer(base + start, len(data), base=self.map)


# ---------------------------------------------------------------------------------------
# The oracle: kafka-python's own iteration over the uncompressed batches
# ---------------------------------------------------------------------------------------


def oracle(f: Fetched, lo: int, hi: int, read_committed: bool) -> tuple[list[tuple[Any, ...]], int]:
    rows = []
    nxt = lo
    for b in f.batches[: f.complete]:
        if b.base_offset >= hi:
            break
        nxt = max(nxt, b.last_offset + 1)
        batch = DefaultRecordBatch(bytearray(b.raw))
        if batch.is_control_batch or (read_committed and b.aborted):
            continue
        for r in batch:
            if lo <= r.offset < hi:
                rows.append((r.offset, max(r.timestamp, 0) * 1000, r.timestamp_type, r.key, r.value,
                             [{"key": k, "value": v} for k, v in r.headers]))
    return rows, nxt


def rows_of(cols: list[Columns]) -> list[tuple[Any, ...]]:
    """(offset, timestamp µs, timestamp type, key, value, headers) rows; headers None when not decoded."""
    out: list[tuple[Any, ...]] = []
    for c in cols:
        headers = c.headers.to_pylist() if c.headers is not None else [None] * len(c)
        out += zip(c.offsets.to_pylist(), c.timestamps.view(pa.int64()).to_pylist(),
                   c.timestamp_types.to_pylist(), c.keys.to_pylist(), c.values.to_pylist(), headers, strict=True)
    return [tuple(r) for r in out]


def assert_same_columns(a: Columns, b: Columns) -> None:
    for name in ("offsets", "timestamps", "timestamp_types", "keys", "values", "headers"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        x.validate(full=True)
        y.validate(full=True)
        assert x.type == y.type, name
        if name == "timestamps":  # as microseconds: a year past 9999 is valid Arrow (and Spark), not a datetime
            x, y = x.view(pa.int64()), y.view(pa.int64())
        assert x.to_pylist() == y.to_pylist(), name


def decode_both(buffer: Any, spans: list[tuple[int, int]], lo: int, hi: int, with_headers: bool,
                native: bool) -> Columns:
    """decode_python's columns, checked equal to decode_native's (reading right before an unreadable
    page) when native is set."""
    pos, ends = [p for p, _ in spans], [e for _, e in spans]
    py = decode_python(memoryview(buffer), pos, ends, lo, hi, with_headers)
    if native:
        nat = decode_native(GuardedBuffer(bytes(buffer)).buffer, pos, ends, lo, hi, with_headers)
        assert_same_columns(nat, py)
    return py


@st.composite
def fetch_cases(draw: st.DrawFn, transactions: bool = False) -> tuple[Fetched, int, int, bool]:
    f = draw(fetched(transactions))
    first, last = f.batches[0].base_offset, f.batches[-1].last_offset
    edges = sorted({b.base_offset + d for b in f.batches for d in (-1, 0, 1)}
                   | {b.last_offset + d for b in f.batches for d in (0, 1)})
    lo = draw(st.one_of(st.just(first), st.sampled_from(edges), st.integers(first - 2, last + 2)))
    hi = draw(st.one_of(st.just(2**63 - 1), st.sampled_from([e for e in edges if e >= lo] or [lo]),
                        st.integers(lo, last + 3)))
    return f, lo, hi, transactions or draw(st.booleans())


DECODERS = [pytest.param(True, id="native", marks=needs_native), pytest.param(False, id="python")]


@pytest.mark.parametrize("native", DECODERS)
@EXAMPLES
@given(case=fetch_cases())
def test_decoders_match_kafka_python(native: bool, case: tuple[Fetched, int, int, bool]) -> None:
    f, lo, hi, read_committed = case
    sel = select_batches(memoryview(f.data), lo, hi, f.aborted, read_committed)
    cols = [decode_both(run.buffer, run.spans, lo, hi, True, native) for run in sel.runs]
    expected, nxt = oracle(f, lo, hi, read_committed)
    assert rows_of(cols) == expected
    assert sel.next_offset == nxt
    # Without headers the other columns are the same and no header column is built.
    bare = [decode_both(run.buffer, run.spans, lo, hi, False, native) for run in sel.runs]
    assert all(c.headers is None for c in bare)
    assert rows_of(bare) == [(*r[:5], None) for r in expected]


@EXAMPLES
@given(case=fetch_cases(transactions=True))
def test_read_committed_fetches_match_kafka_python(case: tuple[Fetched, int, int, bool]) -> None:
    """Transaction-heavy answers under read_committed: several producers, aborts and commits, answers
    starting inside transactions."""
    f, lo, hi, read_committed = case
    cols, nxt = decode_fetched(f.data, lo, hi, with_headers=True, aborted=f.aborted, read_committed=read_committed)
    assert (rows_of(cols), nxt) == oracle(f, lo, hi, read_committed)


@EXAMPLES
@given(case=fetch_cases())
def test_decode_fetched_is_select_then_decode(case: tuple[Fetched, int, int, bool]) -> None:
    """The public entry point (whichever decoder this process uses) gives the oracle's rows."""
    f, lo, hi, read_committed = case
    cols, nxt = decode_fetched(f.data, lo, hi, with_headers=True, aborted=f.aborted, read_committed=read_committed)
    assert all(len(c) for c in cols)
    assert (rows_of(cols), nxt) == oracle(f, lo, hi, read_committed)


def test_every_codec_is_really_compressed() -> None:
    """The builder above really produces compressed batches (kafka-python falls back to none when
    compression does not pay; ours does not), and each reads back through select_batches."""
    records = [(b"k", b"abc" * 50, [("h", b"v")], 1_700_000_000_000 + i) for i in range(4)]
    raw, _ = producer_batch(records, [0, 1, 2, 3])
    for codec in CODECS[1:]:
        data = compressed(raw, codec)
        assert data[ATTRIBUTES_POS + 1] & 0x07 == CODEC_IDS[codec]
        assert len(data) < len(raw)
        cols, nxt = decode_fetched(data, 0, 10, with_headers=True)
        assert [c.values.to_pylist() for c in cols] == [[b"abc" * 50] * 4] and nxt == 4


def test_read_committed_drops_aborted_transactions_like_kafka() -> None:
    """A hand-built log: committed, aborted and non-transactional writes interleaved, with the
    same producer aborting one transaction and committing the next."""
    def txn(pid: int, base: int, value: bytes) -> bytes:
        raw, _ = producer_batch([(None, value, [], 1000)], [0], producer_id=pid, transactional=True)
        buf = bytearray(raw)
        set_base_offset(buf, 0, base)
        return bytes(buf)

    plain, _ = producer_batch([(None, b"plain", [], 1000)], [0])
    plain = bytearray(plain)
    set_base_offset(plain, 0, 3)
    data = b"".join([txn(7, 0, b"a1"), txn(8, 1, b"c1"), txn(7, 2, b"a2"), bytes(plain),
                     build_control_batch(7, 0, 0, False, 1000, 4), build_control_batch(8, 0, 0, True, 1000, 5),
                     txn(7, 6, b"c2"), build_control_batch(7, 0, 0, True, 1000, 7)])
    for read_committed, want in ((True, [b"c1", b"plain", b"c2"]), (False, [b"a1", b"c1", b"a2", b"plain", b"c2"])):
        cols, nxt = decode_fetched(data, 0, 100, with_headers=False, aborted=[(7, 0)], read_committed=read_committed)
        assert [v for c in cols for v in c.values.to_pylist()] == want
        assert nxt == 8


# ---------------------------------------------------------------------------------------
# Malformed input: CorruptFetchError from both decoders, no crash, no read past the buffer
# ---------------------------------------------------------------------------------------


def outcome(decoder: str, buf: GuardedBuffer, spans: list[tuple[int, int]], with_headers: bool) -> Any:
    """The decoded rows, or "corrupt"; any other exception fails the test."""
    pos, ends = [p for p, _ in spans], [e for _, e in spans]
    try:
        if decoder == "native":
            cols = decode_native(buf.buffer, pos, ends, 0, 2**63 - 1, with_headers)
        else:
            cols = decode_python(memoryview(buf.buffer), pos, ends, 0, 2**63 - 1, with_headers)
    except CorruptFetchError:
        return "corrupt"
    for name in ("offsets", "timestamps", "timestamp_types", "keys", "values", "headers"):
        arr = getattr(cols, name)
        if arr is not None:
            arr.validate(full=True)
    return rows_of([cols])


@st.composite
def plain_batches(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    records, deltas = draw(record_lists())
    raw, ends = producer_batch(records, deltas)
    if draw(st.booleans()):
        buf = bytearray(raw)
        set_log_append_time(buf, 0, draw(st.integers(0, 2**42)))
        raw = bytes(buf)
    return raw, ends


@st.composite
def flipped(draw: st.DrawFn) -> tuple[bytes, bool]:
    raw, _ = draw(plain_batches())
    buf = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(HEADER_SIZE, len(buf) - 1))
        buf[pos] = draw(st.one_of(st.integers(0, 255), st.just(buf[pos] ^ 0x80), st.just(buf[pos] ^ 0x01)))
    return bytes(buf), draw(st.booleans())


@needs_native
@EXAMPLES
@given(case=flipped())
def test_flipped_record_bytes_give_the_same_outcome_from_both_decoders(case: tuple[bytes, bool]) -> None:
    data, with_headers = case
    buf = GuardedBuffer(data)
    spans = [(0, len(data))]
    assert outcome("native", buf, spans, with_headers) == outcome("python", buf, spans, with_headers)


@needs_native
@EXAMPLES
@given(case=flipped())
def test_flipped_record_bytes_never_crash_the_native_kernels(case: tuple[bytes, bool]) -> None:
    """The C kernels stay inside the buffer (the page after it is unreadable) whatever the bytes say,
    and what they return is valid Arrow or a CorruptFetchError."""
    data, with_headers = case
    buf = GuardedBuffer(data)
    pos, ends = [0], [len(data)]
    try:
        cols = decode_native(buf.buffer, pos, ends, 0, 2**63 - 1, with_headers)
    except CorruptFetchError:
        return
    for arr in (cols.offsets, cols.timestamps, cols.timestamp_types, cols.keys, cols.values):
        arr.validate(full=True)
    assert len(cols) <= len(data) // 7  # every record takes at least 7 bytes


@st.composite
def truncated(draw: st.DrawFn) -> tuple[bytes, int, list[int], bool]:
    """A batch whose records section is cut at some byte, its length field saying so: the batch
    looks complete but its last record (often a varint) is cut."""
    raw, ends = draw(plain_batches())
    cut = draw(st.integers(HEADER_SIZE, len(raw) - 1))
    buf = bytearray(raw[:cut])
    _I32.pack_into(buf, 8, cut - LOG_OVERHEAD)
    whole = [e for e in ends if e <= cut]
    return bytes(buf), len(whole), [HEADER_SIZE, *ends], draw(st.booleans())


@pytest.mark.parametrize("decoder", [pytest.param("native", marks=needs_native), "python"])
@EXAMPLES
@given(case=truncated())
def test_a_cut_record_is_corrupt_unless_cut_between_records(decoder: str, case: tuple[bytes, int, list[int],
                                                                                      bool]) -> None:
    data, whole, boundaries, with_headers = case
    buf = GuardedBuffer(data)
    got = outcome(decoder, buf, [(0, len(data))], with_headers)
    if len(data) in boundaries:
        assert got != "corrupt" and len(got) == whole
    else:
        assert got == "corrupt"


def _one_record_batch(key: bytes | None = b"k", value: bytes | None = b"v",
                      headers: list[tuple[str, bytes | None]] | None = None, ts: int = 1000) -> bytearray:
    raw, _ = producer_batch([(key, value, headers or [], ts)], [0])
    return bytearray(raw)


def _both_outcomes(data: bytes | bytearray, with_headers: bool = True) -> tuple[Any, Any]:
    buf = GuardedBuffer(bytes(data))
    spans = [(0, len(data))]
    return outcome("native", buf, spans, with_headers), outcome("python", buf, spans, with_headers)


@needs_native
def test_key_length_below_minus_one_is_read_the_same_by_both() -> None:
    buf = _one_record_batch(key=None)
    # record: length, attributes, timestamp delta 0, offset delta 0, key length -1 (0x01)
    assert buf[HEADER_SIZE + 4] == 0x01
    buf[HEADER_SIZE + 4] = 0x03
    native, python = _both_outcomes(buf)
    assert native == python


@needs_native
def test_a_non_utf8_header_key_is_read_the_same_by_both() -> None:
    buf = _one_record_batch(headers=[("ab", b"x")])
    at = bytes(buf).index(b"ab")
    buf[at] = 0xFF
    native, python = _both_outcomes(buf)
    assert native == python


@needs_native
def test_a_record_shorter_than_its_fields_is_corrupt_for_both() -> None:
    raw, _ = producer_batch([(None, None, [], 1000), (None, None, [], 1000)], [0, 0])
    buf = bytearray(raw)
    # record: length 6 (0x0c), attributes, timestamp delta, offset delta, key -1, value -1, header count 0
    assert buf[HEADER_SIZE : HEADER_SIZE + 7] == bytes([0x0C, 0, 0, 0, 1, 1, 0])
    del buf[HEADER_SIZE + 6]  # the header count dropped and the length made 5: the next record's
    buf[HEADER_SIZE] = 0x0A  # length byte is where the first record's header count should be
    _I32.pack_into(buf, 8, len(buf) - LOG_OVERHEAD)
    native, python = _both_outcomes(buf, with_headers=False)
    assert native == "corrupt"
    assert python == "corrupt"


@needs_native
def test_an_overlong_length_varint_is_corrupt_for_both() -> None:
    buf = _one_record_batch(key=b"")
    # record: length 7 (0x0e), attributes, timestamp delta 0, offset delta 0, key length 0, value...
    assert buf[HEADER_SIZE : HEADER_SIZE + 5] == bytes([0x0E, 0, 0, 0, 0])
    buf[HEADER_SIZE + 4 : HEADER_SIZE + 5] = bytes([0x80] * 9 + [0x02])
    buf[HEADER_SIZE] = 0x0E + 2 * 9  # zig-zag length 7 + 9
    _I32.pack_into(buf, 8, len(buf) - LOG_OVERHEAD)
    native, python = _both_outcomes(buf)
    assert python == "corrupt"
    assert native == "corrupt"


@needs_native
def test_a_timestamp_out_of_the_microsecond_range_is_read_the_same_by_both() -> None:
    buf = _one_record_batch(ts=2**62)
    native, python = _both_outcomes(buf)
    assert native == python


@pytest.mark.parametrize("codec", [*CODECS[1:], "unknown"])
def test_a_corrupt_compressed_batch_raises_corrupt_fetch_error(codec: str) -> None:
    raw, _ = producer_batch([(b"k", b"abc" * 50, [], 1000 + i) for i in range(4)], [0, 1, 2, 3])
    if codec == "unknown":
        data = bytearray(raw)
        data[ATTRIBUTES_POS + 1] |= 0x07  # Kafka defines codecs 0-4
    else:
        data = bytearray(compressed(raw, codec))
        data[HEADER_SIZE:] = bytes(len(data) - HEADER_SIZE)  # the compressed payload zeroed
    with pytest.raises(CorruptFetchError):
        decode_fetched(bytes(data), 0, 10, with_headers=True)


@EXAMPLES
@given(case=fetch_cases(), data=st.data())
def test_flipped_bits_anywhere_in_a_fetch_give_columns_or_corrupt_fetch_error(
        case: tuple[Fetched, int, int, bool], data: st.DataObject) -> None:
    f, lo, hi, read_committed = case
    buf = bytearray(f.data)
    for _ in range(data.draw(st.integers(1, 2))):
        buf[data.draw(st.integers(0, len(buf) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    try:
        cols, _ = decode_fetched(bytes(buf), lo, hi, with_headers=True, aborted=f.aborted,
                                 read_committed=read_committed)
    except CorruptFetchError:
        return
    for c in cols:
        assert_same_columns(c, c)  # valid Arrow


# ---------------------------------------------------------------------------------------
# STROM_NATIVE=0 forces the Python path
# ---------------------------------------------------------------------------------------

_CHILD = """
import json, sys
from strom.spark import batch_decode
data = bytes.fromhex(sys.argv[1])
cols, nxt = batch_decode.decode_fetched(data, 0, 100, with_headers=True)
print(json.dumps({"native": batch_decode.native_available(), "next": nxt,
                  "values": [v.hex() for c in cols for v in c.values.to_pylist()],
                  "headers": [[h["key"] for h in hs] for c in cols for hs in c.headers.to_pylist()]}))
"""


def _child(env_native: str | None, data: bytes) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "STROM_NATIVE"}
    if env_native is not None:
        env["STROM_NATIVE"] = env_native
    src = str(Path(batch_decode.__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _CHILD, data.hex()], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(proc.stdout)


def test_strom_native_0_uses_the_python_decoder() -> None:
    raw, _ = producer_batch([(None, b"x" * i, [("h\u00e9", None)], 1000 + i) for i in range(3)], [0, 1, 2])
    forced = _child("0", raw)
    assert forced["native"] is False
    assert forced["values"] == [(b"x" * i).hex() for i in range(3)] and forced["next"] == 3
    assert forced["headers"] == [["h\u00e9"]] * 3
    default = _child(None, raw)
    assert default["native"] is (native.compiler() is not None)  # this process may itself run with STROM_NATIVE=0
    assert {k: v for k, v in default.items() if k != "native"} == {k: v for k, v in forced.items() if k != "native"}


def test_the_guard_page_really_stops_reads_past_the_buffer() -> None:
    """What makes the out-of-bounds checks above meaningful: one byte past a GuardedBuffer is a SIGSEGV."""
    child = ("import ctypes, sys; sys.path[:0] = sys.argv[1:]\n"
             "from tests.unit.test_batch_decode import GuardedBuffer\n"
             "g = GuardedBuffer(b'abc')\n"
             "assert ctypes.string_at(g.buffer.address, 3) == b'abc'\n"
             "print('read', flush=True)\n"
             "ctypes.string_at(g.buffer.address + 3, 1)\n")
    root = str(Path(__file__).resolve().parents[2])
    src = str(Path(batch_decode.__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", child, root, src], capture_output=True, text=True, timeout=120)
    assert proc.stdout == "read\n"
    assert proc.returncode == -11, proc.stderr
