"""`strom dump-log`: print the contents of segment files (like kafka-dump-log.sh).

Reads the files directly, with no broker: it is the tool for looking at what is really
on disk after a crash, a compaction or a suspected corruption. So it never trusts the
data: every length is bounds-checked, a bad CRC is reported and the dump goes on.
"""

from __future__ import annotations

import mmap
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, TextIO

import typer

from strom.cli.common import cli_errors, print_error
from strom.protocol.compression import DecompressedStream
from strom.protocol.record_batch import read_varint
from strom.protocol.record_stream import MAX_READ_RECORD_BYTES

# v2 RecordBatch header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc,
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the counted bytes
CRC_START = 21  # the CRC covers attributes .. end of batch
OFFSET_INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER"}
_INT32_MAX = 2**31 - 1


@dataclass
class Record:
    """One record of a v2 batch, with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    sequence: int


@dataclass
class Batch:
    """A v2 RecordBatch header plus where it sits in the file."""

    position: int
    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    valid: bool
    body: bytes = field(repr=False, default=b"")

    @property
    def size(self) -> int:
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> str:
        return "LogAppendTime" if self.attributes & 0x08 else "CreateTime"

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def last_sequence(self) -> int:
        return _add_sequence(self.base_sequence, self.last_offset_delta)


@dataclass
class LegacyEntry:
    """A magic 0/1 message set entry: framed like a batch, not decoded further."""

    position: int
    offset: int
    size: int
    magic: int


@dataclass
class LogScan:
    """Everything found in a .log file: batches in order and how many bytes were unusable."""

    entries: list[Batch | LegacyEntry]
    valid_bytes: int
    file_size: int
    problem: str | None = None


def _add_sequence(base: int, delta: int) -> int:
    """Sequences wrap at Int32.MAX like Kafka's DefaultRecordBatch.incrementSequence."""
    if base < 0:
        return -1
    if base > _INT32_MAX - delta:
        return delta - (_INT32_MAX - base) - 1
    return base + delta


def scan_log(data: bytes | memoryview | mmap.mmap, keep_bodies: bool = False) -> LogScan:
    """Walk the batch framing of a .log file without trusting any length field."""
    import crc32c

    view = memoryview(data)
    size = len(view)
    pos = 0
    entries: list[Batch | LegacyEntry] = []
    problem: str | None = None
    while pos + LOG_OVERHEAD <= size:
        base_offset, length = struct.unpack_from(">qi", view, pos)
        if length == 0 and base_offset == 0:
            problem = f"zero-filled bytes from position {pos}"
            break
        if length < 0 or pos + LOG_OVERHEAD + length > size:
            problem = (
                f"batch at position {pos} claims {length} bytes but only {size - pos - LOG_OVERHEAD} remain"
            )
            break
        if length < 5:
            problem = f"batch at position {pos} is too short ({length} bytes)"
            break
        magic = view[pos + 16]
        if magic != 2:
            if magic > 2:
                problem = f"unknown magic {magic} at position {pos}"
                break
            entries.append(LegacyEntry(pos, base_offset, length + LOG_OVERHEAD, magic))
            pos += length + LOG_OVERHEAD
            continue
        if length + LOG_OVERHEAD < BATCH_HEADER.size:
            problem = f"batch at position {pos} is shorter than a v2 batch header"
            break
        fields = BATCH_HEADER.unpack_from(view, pos)
        end = pos + LOG_OVERHEAD + length
        valid = crc32c.crc32c(view[pos + CRC_START : end]) == fields[4]
        body = bytes(view[pos + BATCH_HEADER.size : end]) if keep_bodies else b""
        entries.append(Batch(pos, *fields, valid=valid, body=body))
        pos = end
    if problem is None and pos < size:
        problem = f"{size - pos} bytes at position {pos} are too few for a batch"
    return LogScan(entries, pos, size, problem)




def _bytes_field(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise ValueError("field runs past the end of the record")
    return buf[pos : pos + length], pos + length


def decode_records(batch: Batch) -> list[Record]:
    """Decode (and decompress) the records of a batch read with keep_bodies=True."""
    return list(iter_decoded_records(batch))


def iter_decoded_records(batch: Batch) -> Iterator[Record]:
    """The records of a batch one at a time, decompressed a chunk at a time: a batch that
    inflates to gigabytes costs one record's bytes, never the whole inflated section."""
    with DecompressedStream(batch.codec, batch.body) as stream:
        for n in range(max(batch.count, 0)):
            raw = bytearray()
            length = 0
            shift = 0
            while True:
                b = stream.read_byte()
                raw.append(b)
                length |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ValueError(f"record {n} has a length varint longer than 10 bytes")
            length = (length >> 1) ^ -(length & 1)
            if length < 0 or length > MAX_READ_RECORD_BYTES:
                raise ValueError(f"record {n} claims {length} bytes")
            data = stream.read(length)
            pos = 1  # record attributes, unused in v2
            ts_delta, pos = read_varint(data, pos)
            offset_delta, pos = read_varint(data, pos)
            key, pos = _bytes_field(data, pos)
            value, pos = _bytes_field(data, pos)
            count, pos = read_varint(data, pos)
            headers: list[tuple[str, bytes | None]] = []
            for _h in range(max(count, 0)):
                hkey, pos = _bytes_field(data, pos)
                hvalue, pos = _bytes_field(data, pos)
                headers.append(((hkey or b"").decode("utf-8", "backslashreplace"), hvalue))
            if pos != len(data):
                raise ValueError(f"record {n} has {len(data) - pos} unexpected bytes")
            timestamp = batch.max_timestamp if batch.attributes & 0x08 else batch.base_timestamp + ts_delta
            yield Record(
                offset=batch.base_offset + offset_delta,
                timestamp=timestamp,
                key=key,
                value=value,
                headers=headers,
                sequence=_add_sequence(batch.base_sequence, offset_delta),
            )
        if not stream.at_end():
            raise ValueError(f"bytes left after {max(batch.count, 0)} records")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def batch_line(batch: Batch) -> str:
    """The batch summary line, field for field as kafka-dump-log prints it."""
    return (
        f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.count} "
        f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
        f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
        f"partitionLeaderEpoch: {batch.partition_leader_epoch} isTransactional: {_bool(batch.is_transactional)} "
        f"isControl: {_bool(batch.is_control)} position: {batch.position} "
        f"{batch.timestamp_type}: {batch.max_timestamp} size: {batch.size} magic: {batch.magic} "
        f"compresscodec: {CODEC_NAMES.get(batch.codec, f'unknown({batch.codec})')} crc: {batch.crc} "
        f"isvalid: {_bool(batch.valid)}"
    )


def record_line(batch: Batch, record: Record, print_data: bool) -> str:
    """One `| offset: ...` line; control records show their marker instead of data."""
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    keys = ",".join(k for k, _ in record.headers)
    line = (
        f"| offset: {record.offset} {batch.timestamp_type}: {record.timestamp} "
        f"keySize: {key_size} valueSize: {value_size} sequence: {record.sequence} headerKeys: [{keys}]"
    )
    if batch.is_control:
        line += _control_text(record)
    elif print_data:
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


def _control_text(record: Record) -> str:
    if record.key is None or len(record.key) < 4:
        return " controlType: unreadable"
    _version, kind = struct.unpack_from(">hh", record.key)
    name = CONTROL_TYPES.get(kind, f"UNKNOWN({kind})")
    if kind in (0, 1) and record.value is not None and len(record.value) >= 6:
        _v, epoch = struct.unpack_from(">hi", record.value)
        return f" endTxnMarker: {name} coordinatorEpoch: {epoch}"
    return f" controlType: {name}({kind})"


def _base_offset_from_name(path: Path) -> int | None:
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def _read(path: Path) -> bytes | mmap.mmap:
    with path.open("rb") as handle:
        if path.stat().st_size == 0:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


@dataclass
class Dumper:
    """Dumps files to `out`; counts missing files and failed sanity checks for the exit code."""

    out: TextIO
    print_data: bool = False
    deep: bool = False
    sanity_only: bool = False
    failures: int = 0

    def write(self, line: str) -> None:
        self.out.write(line + "\n")

    def dump(self, path: Path) -> None:
        """Dispatch on the file's extension like Kafka's DumpLogSegments."""
        if not path.exists():
            log = path.with_suffix(".log")
            if path.suffix in (".index", ".timeindex") and log.exists() and _is_active_segment(log):
                # Not a fault: the broker writes the active segment's indexes when it rolls or stops.
                self.write(f"{path} is not written yet: {log.name} is the partition's active segment, whose "
                           "index the broker keeps in memory until the segment rolls or the broker stops. "
                           f"Nothing to check; dump {log.name} to see its batches.")
                return
            if path.suffix in (".index", ".timeindex") and log.exists():
                print_error(f"File '{path}' does not exist; the broker rebuilds it from {log.name} the next "
                            "time it loads the partition.")
            else:
                print_error(f"File '{path}' does not exist.")
            self.failures += 1
            return
        if path.is_dir():
            print_error(f"'{path}' is a directory; pass segment files (*.log, *.index, *.timeindex).")
            self.failures += 1
            return
        suffix = path.suffix
        if suffix == ".log":
            self.dump_log(path)
        elif suffix == ".index":
            self.dump_offset_index(path)
        elif suffix == ".timeindex":
            self.dump_time_index(path)
        elif suffix == ".txnindex":
            self.dump_txn_index(path)
        else:
            sys.stderr.write(f"Ignoring unknown file {path}\n")

    # .log -------------------------------------------------------------------------
    def dump_log(self, path: Path) -> None:
        self.write(f"Dumping {path}")
        base = _base_offset_from_name(path)
        data = _read(path)
        deep = self.deep or self.print_data
        scan = scan_log(data, keep_bodies=deep)
        if base is None:
            base = scan.entries[0].base_offset if scan.entries and isinstance(scan.entries[0], Batch) else 0
        self.write(f"Log starting offset: {base}")
        for entry in scan.entries:
            if isinstance(entry, LegacyEntry):
                self.write(
                    f"offset: {entry.offset} position: {entry.position} size: {entry.size} "
                    f"magic: {entry.magic} (legacy message format, not decoded)"
                )
                continue
            self.write(batch_line(entry))
            if not deep:
                continue
            try:
                for record in iter_decoded_records(entry):
                    self.write(record_line(entry, record, self.print_data))
            except Exception as exc:  # corrupt data of any shape must not stop the dump
                self.write(f"| could not decode the records of this batch: {exc}")
        if scan.valid_bytes < scan.file_size:
            self.write(f"Found {scan.file_size - scan.valid_bytes} invalid bytes at the end of {path.name}")
        if isinstance(data, mmap.mmap):
            data.close()

    # .index -----------------------------------------------------------------------
    def dump_offset_index(self, path: Path) -> None:
        base = _base_offset_from_name(path) or 0
        raw = path.read_bytes()
        problems: list[str] = []
        if len(raw) % OFFSET_INDEX_ENTRY.size:
            problems.append(
                f"size {len(raw)} is not a multiple of {OFFSET_INDEX_ENTRY.size}; the last partial entry is ignored"
            )
        entries = [
            (base + rel, position)
            for rel, position in _trim_padding(list(OFFSET_INDEX_ENTRY.iter_unpack(_whole(raw, 8))))
        ]
        for i in range(1, len(entries)):
            (prev_off, prev_pos), (off, pos) = entries[i - 1], entries[i]
            if off <= prev_off:
                problems.append(f"entry {i}: offset {off} is not larger than the previous offset {prev_off}")
            if pos <= prev_pos:
                problems.append(
                    f"entry {i}: position {pos} is not larger than the previous position {prev_pos}"
                )
        mismatches = self._check_against_log(path, entries)
        if self.sanity_only:
            self._verdict(path, problems + mismatches)
            return
        self.write(f"Dumping {path}")
        for offset, position in entries:
            self.write(f"offset: {offset} position: {position}")
        for problem in problems:
            self.write(f"Problem in {path.name}: {problem}")
        if mismatches:
            self.write(f"Mismatches in :{path}")
            for mismatch in mismatches:
                self.write(f"  {mismatch}")

    def _check_against_log(self, path: Path, entries: list[tuple[int, int]]) -> list[str]:
        """Each index entry must point at a batch start that holds its offset."""
        log = path.with_suffix(".log")
        if not log.exists() or not entries:
            return []
        data = _read(log)
        scan = scan_log(data)
        by_position = {e.position: e for e in scan.entries if isinstance(e, Batch)}
        mismatches: list[str] = []
        for offset, position in entries:
            batch = by_position.get(position)
            if batch is None:
                mismatches.append(f"Index offset: {offset}, position {position} is not the start of a batch")
            elif not batch.base_offset <= offset <= batch.last_offset:
                mismatches.append(f"Index offset: {offset}, log offset: {batch.last_offset}")
        if isinstance(data, mmap.mmap):
            data.close()
        return mismatches

    # .timeindex -------------------------------------------------------------------
    def dump_time_index(self, path: Path) -> None:
        base = _base_offset_from_name(path) or 0
        raw = path.read_bytes()
        problems: list[str] = []
        if len(raw) % TIME_INDEX_ENTRY.size:
            problems.append(
                f"size {len(raw)} is not a multiple of {TIME_INDEX_ENTRY.size}; the last partial entry is ignored"
            )
        entries = [
            (timestamp, base + rel)
            for timestamp, rel in _trim_padding(list(TIME_INDEX_ENTRY.iter_unpack(_whole(raw, 12))))
        ]
        for i in range(1, len(entries)):
            (prev_ts, prev_off), (ts, off) = entries[i - 1], entries[i]
            if ts < prev_ts:
                problems.append(f"entry {i}: timestamp {ts} is smaller than the previous timestamp {prev_ts}")
            if off < prev_off:
                problems.append(f"entry {i}: offset {off} is smaller than the previous offset {prev_off}")
        log = path.with_suffix(".log")
        if log.exists() and entries:
            data = _read(log)
            batches = [e for e in scan_log(data).entries if isinstance(e, Batch)]
            if batches:
                last = batches[-1].last_offset
                for ts, off in entries:
                    if off < batches[0].base_offset or off > last:
                        problems.append(
                            f"timestamp {ts} points at offset {off}, outside the log ({base}..{last})"
                        )
            if isinstance(data, mmap.mmap):
                data.close()
        if self.sanity_only:
            self._verdict(path, problems)
            return
        self.write(f"Dumping {path}")
        for timestamp, offset in entries:
            self.write(f"timestamp: {timestamp} offset: {offset}")
        for problem in problems:
            self.write(f"Problem in {path.name}: {problem}")

    # .txnindex --------------------------------------------------------------------
    def dump_txn_index(self, path: Path) -> None:
        raw = path.read_bytes()
        self.write(f"Dumping {path}")
        for version, pid, first, last, lso in TXN_INDEX_ENTRY.iter_unpack(_whole(raw, TXN_INDEX_ENTRY.size)):
            self.write(
                f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                f"lastStableOffset: {lso}"
            )

    def _verdict(self, path: Path, problems: list[str]) -> None:
        if problems:
            self.failures += 1
            self.write(f"{path} failed sanity check:")
            for problem in problems:
                self.write(f"  {problem}")
        else:
            self.write(f"{path} passed sanity check.")


def _is_active_segment(log: Path) -> bool:
    """Whether `log` is the newest segment of its partition directory (the one being appended to)."""
    base = _base_offset_from_name(log)
    if base is None:
        return False
    others = (_base_offset_from_name(p) for p in log.parent.glob("*.log"))
    return all(other is None or other <= base for other in others)


def _whole(raw: bytes, entry_size: int) -> bytes:
    """Whole entries only, without the zero-filled tail of a preallocated index.

    Stripping the zero bytes first keeps a 10 MB preallocated index fast to read.
    """
    whole = len(raw) - len(raw) % entry_size
    used = len(raw[:whole].rstrip(b"\0"))
    return raw[: -(-used // entry_size) * entry_size]


def _trim_padding(entries: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop the zero-filled tail of a preallocated index (zeros inside stay, to be reported)."""
    end = len(entries)
    while end > 0 and entries[end - 1] == (0, 0):
        end -= 1
    # A single (0, 0) first entry is legitimate when more entries follow it; on its own
    # it is indistinguishable from padding, and Kafka treats it the same way.
    return entries[:end]


def iter_files(files: list[str]) -> Iterator[Path]:
    """Accept Kafka's comma-separated --files as well as repeated --files."""
    for item in files:
        for name in item.split(","):
            if name.strip():
                yield Path(name.strip())


def dump_log(
    files: Annotated[
        list[str], typer.Option("--files", help="Comma-separated segment files: *.log, *.index, *.timeindex, *.txnindex.")
    ],
    print_data_log: Annotated[
        bool,
        typer.Option(
            "--print-data-log", help="Print each record's key and payload (implies deep iteration)."
        ),
    ] = False,
    deep_iteration: Annotated[
        bool, typer.Option("--deep-iteration", help="Print one line per record, not only per batch.")
    ] = False,
    index_sanity_check: Annotated[
        bool, typer.Option("--index-sanity-check", help="Only check index files for consistency.")
    ] = False,
) -> None:
    """Print batches, records and index entries of segment files (no broker needed)."""
    with cli_errors():
        dumper = Dumper(
            out=sys.stdout, print_data=print_data_log, deep=deep_iteration, sanity_only=index_sanity_check
        )
        for path in iter_files(files):
            dumper.dump(path)
        sys.stdout.flush()
        if dumper.failures:
            raise typer.Exit(1)
