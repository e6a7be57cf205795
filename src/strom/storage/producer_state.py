"""ProducerStateManager: idempotent-producer bookkeeping for one partition.

For every producer id the leader remembers the epoch and the sequence ranges
(with their assigned offsets) of the last five batches, which is exactly what
``max.in.flight.requests.per.connection <= 5`` needs: a retried batch whose
range is remembered is a duplicate and gets its original offsets back; any other
gap is OUT_OF_ORDER_SEQUENCE_NUMBER.

Choice (as Kafka 3.x after KIP-360): an unknown producer id is accepted with any
sequence, because its state may legitimately have been removed by retention or
expiration; UNKNOWN_PRODUCER_ID is not returned.

Transactions: a transactional data batch opens (or continues) the producer's transaction, whose
first offset bounds the last stable offset (LSO) until a COMMIT or ABORT marker of that producer
closes it. A closed transaction keeps bounding the LSO until the high watermark passes its
marker (Kafka's "unreplicated" transactions), so a read_committed consumer never sees a
transaction's records before the marker that decides them is committed. A non-transactional
write from a producer with an open transaction is INVALID_TXN_STATE; a marker from an older
coordinator epoch is TRANSACTION_COORDINATOR_FENCED.

State is persisted as ``<20-digit offset>.snapshot`` files (own format, CRC-32C)
at roll and close; recovery loads the newest snapshot <= the log end and replays
batch headers after it. A roll takes the snapshot's content at once but writes and fsyncs
the file later on the log dir's storage thread (``snapshot_later``, as Kafka since
KAFKA-15046), so the append path does no file work for it; a snapshot lost to a crash
meanwhile only makes recovery start from the previous one.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import crc32c
from kafka.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)

from strom.protocol.record_batch import CONTROL_ABORT, NO_SEQUENCE, RecordBatchHeader
from strom.storage.checkpoints import fsync_dir, write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
INT_MAX = 2**31 - 1

_SNAP_MAGIC = b"SPS1"
_SNAP_HEAD = struct.Struct(">4shIi")  # magic, version, crc(body), entry count
_SNAP_ENTRY = struct.Struct(">qhiqqb")  # pid, epoch, coordinator epoch, last ts, txn first offset, n
_SNAP_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp
_PENDING_TMP = ".pending.tmp"  # a deferred snapshot's temp file (the loader deletes leftover ``.tmp`` files)


class CorruptSnapshotError(Exception):
    """A snapshot file failed its CRC/format check; the loader falls back to an older one."""


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by its marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


# What a control batch says: (control type, coordinator epoch); see record_batch.read_control_marker.
Marker = tuple[int, int]


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT_MAX and next_seq == 0)


class ProducerStateManager:
    """Per-partition map producer id -> ProducerStateEntry, with snapshots in the log directory."""

    def __init__(self, directory: str, producer_id_expiration_ms: int = 86_400_000) -> None:
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # state reflects every batch below this offset
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.unreplicated: list[CompletedTxn] = []  # closed, but the marker is not below the HW yet
        # Deferred snapshots (``snapshot_later``) not renamed into place yet: offset -> the write's token.
        # Deleting snapshots cancels them here. The lock is held for a check and one rename, never
        # across the write or an fsync, so the event loop may take it. It also guards ``_snapshots``,
        # which a deferred write updates from the storage thread.
        self._pending: dict[int, object] = {}
        self._pending_lock = threading.Lock()
        # Snapshot file offsets, listed once and kept up to date by every write and _unlink (start-up
        # looks them up several times per partition; a listdir each is a syscall per partition each).
        self._snapshots: list[int] | None = None
        # Offset of the snapshot file holding exactly the state in memory; None once the state changed.
        # A clean shutdown skips writing that snapshot again. Deferred (roll) snapshots never set it: the
        # state may have moved on by the time their file lands.
        self._current_snapshot: int | None = None

    # -- validation (before anything is written) ---------------------------------------------------

    def check_batches(self, headers: Iterable[RecordBatchHeader],
                      markers: dict[int, Marker] | None = None, from_client: bool = True) -> BatchMetadata | None:
        """Classify the idempotent batches of one append, in order.

        Returns the original metadata of the first duplicate batch (the caller then
        writes nothing and answers with the original offsets), None if all are new.
        Raises InvalidProducerEpochError / OutOfOrderSequenceNumberError.  Batches of
        the same producer within one append are checked against each other.
        ``markers`` (batch position -> marker) come with a coordinator's control batches;
        a marker from an older coordinator epoch than the producer's last one is fenced.
        A coordinator's batches (transactional offset commits, which Kafka writes with
        sequence 0 every time) skip the duplicate and sequence checks, as in Kafka.
        """
        staged: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last seq) after earlier batches here
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            entry = self.producers.get(pid)
            epoch = h.producer_epoch
            if pid in staged:
                cur_epoch, cur_last = staged[pid]
            elif entry is not None:
                cur_epoch, cur_last = entry.producer_epoch, entry.last_seq
            else:
                cur_epoch, cur_last = NO_PRODUCER_EPOCH, NO_SEQUENCE
            if cur_epoch != NO_PRODUCER_EPOCH and epoch < cur_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than current epoch {cur_epoch}"
                )
            if h.is_control:
                marker = markers.get(h.position) if markers else None
                if marker is not None and entry is not None and marker[1] < entry.coordinator_epoch:
                    raise TransactionCoordinatorFencedError(
                        f"marker of producer {pid} from coordinator epoch {marker[1]} is older than "
                        f"epoch {entry.coordinator_epoch}"
                    )
                staged[pid] = (epoch, cur_last if epoch == cur_epoch else NO_SEQUENCE)
                continue
            if self.ongoing and pid in self.ongoing and not h.is_transactional and pid not in staged:
                raise InvalidTxnStateError(
                    f"expected a transactional write from producer {pid}: it has an open transaction"
                )
            if not from_client:  # clients' idempotent batches always carry a sequence (the validator checks)
                staged[pid] = (epoch, cur_last if epoch == cur_epoch else NO_SEQUENCE)
                continue
            if entry is not None and pid not in staged and epoch == entry.producer_epoch:
                dup = entry.find_duplicate(h.base_sequence, h.last_sequence)
                if dup is not None:
                    return dup
            if epoch != cur_epoch:
                if h.base_sequence != 0 and cur_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid} bumped epoch to {epoch} but sent sequence {h.base_sequence}; "
                        f"a new epoch must start at sequence 0"
                    )
            elif cur_last != NO_SEQUENCE and not _in_sequence(cur_last, h.base_sequence):
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid} epoch {epoch}: out of order sequence {h.base_sequence}, "
                    f"expected {(cur_last + 1) & INT_MAX}"
                )
            staged[pid] = (epoch, h.last_sequence)
        return None

    # -- update (after the write, and during replay) -----------------------------------------------

    def update(self, h: RecordBatchHeader, marker: Marker | None = None) -> CompletedTxn | None:
        """Apply one batch whose offsets are final (header fields must hold the assigned offsets).

        A control batch needs its ``marker``; the transaction it closes is returned."""
        pid = h.producer_id
        self._current_snapshot = None
        if h.next_offset > self.map_end_offset:
            self.map_end_offset = h.next_offset
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = ProducerStateEntry(pid)
            self.producers[pid] = entry
        if h.producer_epoch != entry.producer_epoch:
            entry.producer_epoch = h.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if h.is_control:
            first = entry.current_txn_first_offset
            entry.current_txn_first_offset = -1
            self.ongoing.pop(pid, None)
            if marker is None:
                return None
            entry.coordinator_epoch = max(entry.coordinator_epoch, marker[1])
            done = CompletedTxn(pid, first if first >= 0 else h.base_offset, h.base_offset,
                                marker[0] == CONTROL_ABORT)
            self.unreplicated.append(done)
            return done
        if h.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset, h.max_timestamp)
            )
        if h.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self.ongoing[pid] = h.base_offset
        return None

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """Smallest first offset of a transaction that is open, or closed by a marker at or past the HW."""
        if not self.ongoing and not self.unreplicated:
            return None
        firsts = list(self.ongoing.values())
        firsts.extend(t.first_offset for t in self.unreplicated if t.last_offset >= high_watermark)
        return min(firsts) if firsts else None

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget decided transactions whose marker is now below the HW: they bound nothing more."""
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is closed, ignoring replication: Kafka stores it in the txn index."""
        others = [first for pid, first in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def remove_expired_producers(self, now_ms: int, expiration_ms: int | None = None) -> int:
        """Forget producers idle for ``expiration_ms`` (default: this manager's producer.id.expiration.ms)
        with no open transaction, as Kafka does; the next snapshot no longer carries them. A producer that
        writes again later is accepted as new (see the module note on unknown producer ids)."""
        cutoff = now_ms - (self.producer_id_expiration_ms if expiration_ms is None else expiration_ms)
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and e.last_timestamp < cutoff
        ]
        for pid in expired:
            del self.producers[pid]
        if expired:
            self._current_snapshot = None
        return len(expired)

    def reset(self, offset: int = 0) -> None:
        self._current_snapshot = None
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.map_end_offset = offset

    def _reindex_ongoing(self) -> None:
        self.ongoing = {pid: e.current_txn_first_offset for pid, e in self.producers.items()
                        if e.current_txn_first_offset >= 0}
        self.unreplicated.clear()

    # -- snapshots ---------------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self, names: Iterable[str] | None = None) -> list[int]:
        """Offsets of the snapshot files, sorted; ``names`` (the directory's listing, if the caller has
        it) spares the first listdir."""
        with self._pending_lock:
            if self._snapshots is not None:
                return list(self._snapshots)
        offsets = []
        for name in os.listdir(self.directory) if names is None else names:
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if stem.isdigit():
                    offsets.append(int(stem))
        with self._pending_lock:
            if self._snapshots is None:
                self._snapshots = sorted(offsets)
            return list(self._snapshots)

    def snapshot_is_current(self, offset: int) -> bool:
        """Whether the snapshot file at ``offset`` holds the state in memory (written or read back by this
        process): then writing it again would change nothing. Whether it reached the disk does not
        matter: a snapshot that did not fails its CRC or is missing, and the load replays from an older one."""
        return self._current_snapshot == offset == self.map_end_offset

    def take_snapshot(self, offset: int | None = None, fsync: bool = False) -> str:
        """Write state as of ``offset`` (default: map end) atomically; returns the path."""
        offset = self.map_end_offset if offset is None else offset
        path = self.snapshot_path(offset)
        self._current_snapshot = None
        write_atomically(path, self._snapshot_bytes(), fsync=fsync)
        self._note_snapshot_file(offset)
        if offset == self.map_end_offset:
            self._current_snapshot = offset
        return path

    def _note_snapshot_file(self, offset: int) -> None:
        with self._pending_lock:
            if self._snapshots is not None and offset not in self._snapshots:
                bisect.insort(self._snapshots, offset)

    def snapshot_later(self, offset: int, executor: Executor) -> None:
        """Take the state as of ``offset`` now; write and fsync its file on ``executor`` (the dir's thread).

        Called at a roll under the log's lock, on the append path: only the encoding runs here.
        Until the file is in place recovery starts from an older snapshot (or the first segment)
        and replays more headers, which yields the same state. Truncation and retention cancel
        a pending write whose offset they delete (``delete_snapshots_after`` / ``_before``).
        """
        data = self._snapshot_bytes()
        token = object()
        with self._pending_lock:
            self._pending[offset] = token
        try:
            executor.submit(self._write_pending, offset, data, token)
        except RuntimeError:  # the executor is shut down (the broker is stopping): write it here
            self._write_pending(offset, data, token)

    def _write_pending(self, offset: int, data: bytes, token: object) -> None:
        """Write a deferred snapshot: temp file + fsync, rename if still wanted, fsync the dir.

        A failure is logged, not raised: the snapshot is an optimisation of recovery."""
        path = self.snapshot_path(offset)
        tmp = path + _PENDING_TMP
        try:
            with self._pending_lock:
                if self._pending.get(offset) is not token:
                    return
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            with self._pending_lock:
                wanted = self._pending.get(offset) is token
                if wanted:
                    del self._pending[offset]
                    os.replace(tmp, path)
                    if self._snapshots is not None and offset not in self._snapshots:
                        bisect.insort(self._snapshots, offset)
            if not wanted:
                os.unlink(tmp)
                return
            fsync_dir(self.directory)
        except OSError as exc:
            with self._pending_lock:
                wanted = self._pending.get(offset) is token
                if wanted:
                    del self._pending[offset]
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if wanted:  # a cancelled write failing (its dir renamed away meanwhile) is no news
                log.warning("could not write producer snapshot %s (recovery starts from an older one): %s",
                            path, exc)

    def cancel_pending_snapshots(self, keep: Callable[[int], bool] = lambda _offset: False) -> None:
        """Forget deferred snapshots whose offset ``keep`` rejects: their files are never written."""
        with self._pending_lock:
            for offset in [o for o in self._pending if not keep(o)]:
                del self._pending[offset]

    @property
    def pending_snapshot_offsets(self) -> list[int]:
        """Offsets of deferred snapshots not written yet."""
        with self._pending_lock:
            return sorted(self._pending)

    def _snapshot_bytes(self) -> bytes:
        """The state encoded as a snapshot file's content."""
        parts: list[bytes] = []
        for e in self.producers.values():
            parts.append(
                _SNAP_ENTRY.pack(
                    e.producer_id,
                    e.producer_epoch,
                    e.coordinator_epoch,
                    e.last_timestamp,
                    e.current_txn_first_offset,
                    len(e.batches),
                )
            )
            for b in e.batches:
                parts.append(
                    _SNAP_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                )
        body = b"".join(parts)
        return _SNAP_HEAD.pack(_SNAP_MAGIC, 1, crc32c.crc32c(body), len(self.producers)) + body

    @staticmethod
    def read_snapshot(path: str) -> dict[int, ProducerStateEntry]:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _SNAP_HEAD.size:
            raise CorruptSnapshotError(f"snapshot {path} is truncated")
        magic, version, crc, count = _SNAP_HEAD.unpack_from(data, 0)
        body = memoryview(data)[_SNAP_HEAD.size :]
        if magic != _SNAP_MAGIC or version != 1 or crc32c.crc32c(body) != crc:
            raise CorruptSnapshotError(f"snapshot {path} failed its magic/version/CRC check")
        out: dict[int, ProducerStateEntry] = {}
        pos = _SNAP_HEAD.size
        try:
            for _ in range(count):
                pid, epoch, coord_epoch, last_ts, txn_first, n = _SNAP_ENTRY.unpack_from(data, pos)
                pos += _SNAP_ENTRY.size
                entry = ProducerStateEntry(pid, epoch, last_timestamp=last_ts, coordinator_epoch=coord_epoch)
                entry.current_txn_first_offset = txn_first
                for _ in range(n):
                    entry.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(data, pos)))
                    pos += _SNAP_BATCH.size
                out[pid] = entry
        except struct.error as exc:
            raise CorruptSnapshotError(f"snapshot {path} is malformed: {exc}") from exc
        return out

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Load the newest valid snapshot <= ``max_offset``; delete newer/corrupt ones. Returns its offset."""
        self.delete_snapshots_after(max_offset)
        for offset in reversed(self.snapshot_offsets()):
            try:
                self.producers = self.read_snapshot(self.snapshot_path(offset))
            except (CorruptSnapshotError, OSError):
                self._unlink(offset)
                continue
            self._reindex_ongoing()
            self.map_end_offset = offset
            self._current_snapshot = offset
            return offset
        self.reset()
        return None

    def delete_snapshots_after(self, offset: int) -> None:
        self.cancel_pending_snapshots(keep=lambda snap: snap <= offset)
        for snap in self.snapshot_offsets():
            if snap > offset:
                self._unlink(snap)

    def delete_snapshots_before(self, offset: int) -> None:
        self.cancel_pending_snapshots(keep=lambda snap: snap >= offset)
        for snap in self.snapshot_offsets():
            if snap < offset:
                self._unlink(snap)

    def _unlink(self, offset: int) -> None:
        if self._current_snapshot == offset:
            self._current_snapshot = None
        with self._pending_lock:
            if self._snapshots is not None and offset in self._snapshots:
                self._snapshots.remove(offset)
        try:
            os.unlink(self.snapshot_path(offset))
        except FileNotFoundError:
            pass
