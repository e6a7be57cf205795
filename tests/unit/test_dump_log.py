"""dump-log over hand-made segment files: batches, codecs, corruption, index padding."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import cramjam
import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from typer.testing import CliRunner

from strom.cli.dump_log import Dumper, decode_records, scan_log
from strom.cli.main import app

HEADER_SIZE = 61
BASE_TS = 1_700_000_000_000


def make_batch(
    base_offset: int,
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]],
    producer_id: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """An uncompressed v2 batch built by kafka-python, moved to `base_offset`."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, timestamp=BASE_TS + i, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def _reseal(header: bytearray, body: bytes) -> bytes:
    """Fix batchLength and CRC after changing a batch's attributes or body."""
    struct.pack_into(">i", header, 8, HEADER_SIZE - 12 + len(body))
    data = bytearray(header + body)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def compress_batch(batch: bytes, codec: int) -> bytes:
    """Re-encode an uncompressed batch with a codec (1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    header = bytearray(batch[:HEADER_SIZE])
    body = batch[HEADER_SIZE:]
    packed = {
        1: lambda b: gzip.compress(b),
        2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
        3: lambda b: bytes(cramjam.lz4.compress(b)),
        4: lambda b: bytes(cramjam.zstd.compress(b)),
    }[codec](body)
    (attributes,) = struct.unpack_from(">h", header, 21)
    struct.pack_into(">h", header, 21, (attributes & ~0x07) | codec)
    return _reseal(header, packed)


def commit_marker(base_offset: int, producer_id: int) -> bytes:
    """A transactional COMMIT control batch."""
    batch = make_batch(
        base_offset, [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 7), [])], producer_id=producer_id
    )
    header = bytearray(batch[:HEADER_SIZE])
    (attributes,) = struct.unpack_from(">h", header, 21)
    struct.pack_into(">h", header, 21, attributes | 0x10 | 0x20)
    return _reseal(header, batch[HEADER_SIZE:])


def dump(*paths: Path, print_data: bool = False, deep: bool = False, sanity: bool = False) -> tuple[str, int]:
    out = io.StringIO()
    dumper = Dumper(out=out, print_data=print_data, deep=deep, sanity_only=sanity)
    for path in paths:
        dumper.dump(path)
    return out.getvalue(), dumper.failures


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    first = make_batch(0, [(b"abc", b"hello", []), (None, b"world", [("h1", b"x"), ("h2", b"y")])])
    second = make_batch(2, [(b"k", b"v" * 50, [])] * 3, producer_id=42, base_sequence=10)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(first + second)
    return path


def test_batch_lines_match_kafka_format(segment: Path) -> None:
    text, failures = dump(segment)
    lines = text.splitlines()
    assert failures == 0
    assert lines[0] == f"Dumping {segment}"
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false position: 0 "
        f"CreateTime: {BASE_TS + 1} size: "
    )
    assert lines[2].endswith("isvalid: true") and "magic: 2 compresscodec: none crc: " in lines[2]
    assert "baseOffset: 2 lastOffset: 4 count: 3 baseSequence: 10 lastSequence: 12 producerId: 42" in lines[3]
    assert len(lines) == 4  # no record lines without --deep-iteration / --print-data-log


def test_print_data_log_shows_records(segment: Path) -> None:
    text, _ = dump(segment, print_data=True)
    assert (
        f"| offset: 0 CreateTime: {BASE_TS} keySize: 3 valueSize: 5 sequence: -1 headerKeys: [] "
        "key: abc payload: hello"
    ) in text
    assert (
        f"| offset: 1 CreateTime: {BASE_TS + 1} keySize: -1 valueSize: 5 sequence: -1 "
        "headerKeys: [h1,h2] payload: world"
    ) in text
    assert f"| offset: 4 CreateTime: {BASE_TS + 2} keySize: 1 valueSize: 50 sequence: 12" in text


def test_deep_iteration_without_payloads(segment: Path) -> None:
    text, _ = dump(segment, deep=True)
    assert "| offset: 0 " in text
    assert "payload:" not in text


@pytest.mark.parametrize(("codec", "name"), [(1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")])
def test_compressed_batches_are_decoded(tmp_path: Path, codec: int, name: str) -> None:
    records = [(b"key-%d" % i, b"value-%d " % i * 20, [("trace", b"1")]) for i in range(5)]
    path = tmp_path / "00000000000000000100.log"
    path.write_bytes(compress_batch(make_batch(100, records), codec))
    text, _ = dump(path, print_data=True)
    assert "Log starting offset: 100" in text
    assert f"compresscodec: {name} " in text and "isvalid: true" in text
    assert "| offset: 104 " in text and "key: key-4 payload: value-4 value-4" in text
    assert "headerKeys: [trace]" in text


def test_xerial_framed_snappy(tmp_path: Path) -> None:
    batch = make_batch(0, [(None, b"java producers frame snappy " * 4, [])])
    header, body = bytearray(batch[:HEADER_SIZE]), batch[HEADER_SIZE:]
    chunk = bytes(cramjam.snappy.compress_raw(body))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(chunk)) + chunk
    struct.pack_into(">h", header, 21, 2)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_reseal(header, framed))
    text, _ = dump(path, print_data=True)
    assert "payload: java producers frame snappy" in text


def test_bad_crc_is_reported_and_dump_continues(tmp_path: Path) -> None:
    broken = bytearray(make_batch(0, [(None, b"tampered", [])]))
    broken[-2] ^= 0x01  # flips a payload byte, leaving the framing intact
    good = make_batch(1, [(None, b"intact", [])])
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(broken) + good)
    text, _ = dump(path, print_data=True)
    lines = [line for line in text.splitlines() if line.startswith("baseOffset")]
    assert lines[0].endswith("isvalid: false")
    assert lines[1].endswith("isvalid: true")
    assert "payload: intact" in text


def test_truncated_tail_is_counted(segment: Path) -> None:
    data = segment.read_bytes()
    segment.write_bytes(data + data[:30])
    text, _ = dump(segment)
    assert f"Found 30 invalid bytes at the end of {segment.name}" in text
    assert text.count("baseOffset:") == 2


def test_garbage_lengths_do_not_crash() -> None:
    for blob in (b"\xff" * 12, struct.pack(">qi", 0, 2**31 - 1), struct.pack(">qi", 5, -7) + b"\0" * 80):
        scan = scan_log(blob)
        assert scan.entries == [] and scan.problem


def test_control_batch_shows_marker(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(commit_marker(0, producer_id=9))
    text, _ = dump(path, print_data=True)
    assert "isTransactional: true isControl: true" in text
    assert "endTxnMarker: COMMIT coordinatorEpoch: 7" in text


def test_records_round_trip_through_decoder(segment: Path) -> None:
    batches = [b for b in scan_log(segment.read_bytes(), keep_bodies=True).entries]
    records = decode_records(batches[0])  # type: ignore[arg-type]
    assert [(r.offset, r.key, r.value) for r in records] == [(0, b"abc", b"hello"), (1, None, b"world")]
    assert records[1].headers == [("h1", b"x"), ("h2", b"y")]


def test_offset_index_padding_is_ignored(segment: Path) -> None:
    first_size = len(make_batch(0, [(b"abc", b"hello", []), (None, b"world", [("h1", b"x"), ("h2", b"y")])]))
    index = segment.with_suffix(".index")
    index.write_bytes(struct.pack(">ii", 1, 0) + struct.pack(">ii", 4, first_size) + b"\0" * 8 * 50)
    text, _ = dump(index)
    assert text.splitlines() == [f"Dumping {index}", "offset: 1 position: 0", f"offset: 4 position: {first_size}"]
    verdict, failures = dump(index, sanity=True)
    assert verdict.strip() == f"{index} passed sanity check."
    assert failures == 0


def test_offset_index_sanity_check_finds_problems(segment: Path) -> None:
    index = segment.with_suffix(".index")
    index.write_bytes(struct.pack(">ii", 3, 50) + struct.pack(">ii", 2, 40) + b"\0\0\0")
    verdict, failures = dump(index, sanity=True)
    assert failures == 1
    assert "failed sanity check" in verdict
    assert "offset 2 is not larger than the previous offset 3" in verdict
    assert "not a multiple of 8" in verdict
    assert "position 50 is not the start of a batch" in verdict


def test_time_index(segment: Path) -> None:
    timeindex = segment.with_suffix(".timeindex")
    timeindex.write_bytes(struct.pack(">qi", BASE_TS + 1, 1) + struct.pack(">qi", BASE_TS + 2, 4) + b"\0" * 12 * 10)
    text, _ = dump(timeindex)
    assert text.splitlines()[1:] == [f"timestamp: {BASE_TS + 1} offset: 1", f"timestamp: {BASE_TS + 2} offset: 4"]
    timeindex.write_bytes(struct.pack(">qi", BASE_TS + 5, 1) + struct.pack(">qi", BASE_TS, 4))
    verdict, failures = dump(timeindex, sanity=True)
    assert failures == 1 and "is smaller than the previous timestamp" in verdict


def test_empty_files(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000007.log"
    log.write_bytes(b"")
    index = tmp_path / "00000000000000000007.index"
    index.write_bytes(b"\0" * 80)
    text, failures = dump(log, index)
    assert text.splitlines() == [f"Dumping {log}", "Log starting offset: 7", f"Dumping {index}"]
    assert failures == 0


def test_cli_accepts_comma_separated_files_and_reports_missing(segment: Path, tmp_path: Path) -> None:
    missing = tmp_path / "00000000000000000099.log"
    result = CliRunner().invoke(app, ["dump-log", "--files", f"{segment},{missing}", "--print-data-log"])
    assert result.exit_code == 1
    assert "payload: hello" in result.output
    assert "does not exist" in result.output
    assert "Traceback" not in result.output


def test_transactional_batch_and_abort_marker(tmp_path: Path) -> None:
    data = bytearray(make_batch(0, [(b"k", b"v", [])], producer_id=5, base_sequence=0))
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x10)
    txn = _reseal(bytearray(data[:HEADER_SIZE]), bytes(data[HEADER_SIZE:]))
    marker = make_batch(1, [(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 3), [])], producer_id=5)
    header = bytearray(marker[:HEADER_SIZE])
    struct.pack_into(">h", header, 21, struct.unpack_from(">h", header, 21)[0] | 0x30)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(txn + _reseal(header, marker[HEADER_SIZE:]))
    text, failures = dump(path, deep=True)
    lines = text.splitlines()
    assert failures == 0
    assert "producerId: 5" in lines[2] and "isTransactional: true isControl: false" in lines[2]
    assert "isTransactional: true isControl: true" in lines[4]
    assert "endTxnMarker: ABORT coordinatorEpoch: 3" in lines[5]


def test_txn_index_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    entry = struct.Struct(">hqqqq")
    path.write_bytes(entry.pack(0, 7, 10, 14, 10) + entry.pack(0, 8, 20, 25, 22))
    text, failures = dump(path)
    assert failures == 0
    assert text.splitlines()[1:] == [
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 14 lastStableOffset: 10",
        "version: 0 producerId: 8 firstOffset: 20 lastOffset: 25 lastStableOffset: 22",
    ]


def test_deep_dump_of_a_compression_bomb_holds_one_record_at_a_time(tmp_path: Path) -> None:
    """A 200 KB gzip batch of 200 zero-filled 1 MiB values: every record is listed, and the dump
    never holds the 200 MiB inflated section (Python's peak allocation stays near one value)."""
    import tracemalloc

    from tests.support.record_batches import zero_value_batch

    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(zero_value_batch("gzip", [b"k%03d" % i for i in range(200)], 1 << 20, BASE_TS))
    out = io.StringIO()
    tracemalloc.start()
    try:
        Dumper(out, deep=True).dump(seg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("| offset:")]
    assert len(lines) == 200 and "valueSize: 1048576" in lines[-1]
    assert peak < 32 * 1024 * 1024
