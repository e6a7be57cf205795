"""Transactions in the log: LSO, markers, the aborted-transaction index, restarts, cleaning."""

from __future__ import annotations

import os

import pytest
from kafka.errors import InvalidRecordError, InvalidTxnStateError, TransactionCoordinatorFencedError
from kafka.record.default_records import DefaultRecordBatch

from strom.protocol.record_batch import build_batch, build_control_batch, iter_batches
from strom.storage.cleaner import LogCleaner
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.transaction_index import ENTRY_SIZE, AbortedTxn
from strom.storage.validator import AppendOrigin

COORD = AppendOrigin.COORDINATOR


def txn_batch(pid: int, seq: int, n: int = 2, key: bytes = b"k", value: bytes = b"v", epoch: int = 0) -> bytes:
    return build_batch([(key, value + bytes([i]), [], 1_000 + i) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def plain(n: int = 1, key: bytes = b"p", value: bytes = b"x") -> bytes:
    return build_batch([(key, value, [], 1_000 + i) for i in range(n)])


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(pid, epoch, coordinator_epoch, commit, 2_000)


def open_log(path: str, **props: str) -> Log:
    return Log(os.path.join(path, "t-0"), LogConfig.from_props(props), now_ms=0)


def settle(log: Log) -> None:
    log.update_high_watermark(log.log_end_offset)


def visible_values(log: Log) -> list[bytes]:
    """What a read_committed consumer keeps: records below the LSO minus aborted transactions."""
    lso = log.last_stable_offset
    data = log.read(log.log_start_offset, 10**7, max_offset=lso).to_bytes()
    aborted = {(t.producer_id, t.first_offset, t.last_offset)
               for t in log.collect_aborted_transactions(log.log_start_offset, lso)}
    out = []
    for h in iter_batches(data):
        if h.is_control:
            continue
        if h.is_transactional and any(p == h.producer_id and f <= h.base_offset <= last for p, f, last in aborted):
            continue
        out.extend(bytes(r.value) for r in DefaultRecordBatch(data[h.position:h.end]))
    return out


def test_lso_holds_at_an_open_transaction_until_its_marker(tmp_path: str) -> None:
    log = open_log(str(tmp_path))
    log.append_as_leader(plain(), 0)
    log.append_as_leader(txn_batch(7, 0), 0)  # offsets 1-2
    log.append_as_leader(plain(), 0)  # 3
    settle(log)
    assert log.high_watermark == 4 and log.last_stable_offset == 1
    info = log.append_as_leader(marker(7, commit=True), 0, origin=COORD)
    assert info.first_offset == 4
    assert log.last_stable_offset == 1  # closed, but the marker is not below the HW yet
    settle(log)
    assert log.last_stable_offset == 5
    assert log.collect_aborted_transactions(0, 5) == []
    log.close()


def test_abort_is_indexed_and_filtered(tmp_path: str) -> None:
    log = open_log(str(tmp_path))
    log.append_as_leader(txn_batch(7, 0, value=b"a"), 0)  # 0-1
    log.append_as_leader(txn_batch(8, 0, value=b"c"), 0)  # 2-3
    log.append_as_leader(marker(7, commit=False), 0, origin=COORD)  # 4
    log.append_as_leader(marker(8, commit=True), 0, origin=COORD)  # 5
    settle(log)
    assert log.collect_aborted_transactions(0, log.last_stable_offset) == [AbortedTxn(7, 0, 4, 2)]
    assert visible_values(log) == [b"c\x00", b"c\x01"]
    seg = log.active_segment
    assert os.path.getsize(seg.txn_index.path) == ENTRY_SIZE
    log.close()
    reopened = open_log(str(tmp_path))
    settle(reopened)
    assert visible_values(reopened) == [b"c\x00", b"c\x01"]
    reopened.close()


def test_open_transaction_survives_a_clean_restart(tmp_path: str) -> None:
    log = open_log(str(tmp_path))
    log.append_as_leader(plain(2), 0)
    log.append_as_leader(txn_batch(7, 0), 0)  # 2-3
    log.close()
    log = open_log(str(tmp_path))
    settle(log)
    assert log.last_stable_offset == 2
    log.append_as_leader(marker(7, commit=False), 0, origin=COORD)
    settle(log)
    assert log.last_stable_offset == 5
    assert [t.first_offset for t in log.collect_aborted_transactions(0, 5)] == [2]
    log.close()


def test_unclean_restart_rebuilds_the_txn_index(tmp_path: str) -> None:
    log = open_log(str(tmp_path), **{"segment.bytes": "300"})
    for i in range(6):
        log.append_as_leader(txn_batch(7, 2 * i, value=bytes([65 + i])), 0)
        log.append_as_leader(marker(7, commit=i % 2 == 0), 0, origin=COORD)
    settle(log)
    expected = visible_values(log)
    aborted_before = log.collect_aborted_transactions(0, log.last_stable_offset)
    assert len(aborted_before) == 3
    paths = [s.txn_index.path for s in log.segments]
    directory = log.directory
    # a crash: no close, no snapshot; the indexes are lost with it
    for s in log.segments:
        s.file.close()
    for p in paths:
        if os.path.exists(p):
            os.unlink(p)
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(directory, name))
    log = Log(directory, LogConfig.from_props({"segment.bytes": "300"}), recovery_point=0, now_ms=0)
    settle(log)
    assert log.collect_aborted_transactions(0, log.last_stable_offset) == aborted_before
    assert visible_values(log) == expected
    log.close()


def test_fencing_and_state_errors(tmp_path: str) -> None:
    log = open_log(str(tmp_path))
    log.append_as_leader(txn_batch(7, 0), 0)
    with pytest.raises(InvalidTxnStateError):  # a plain idempotent write inside an open transaction
        log.append_as_leader(build_batch([(b"k", b"v", [], 1)], producer_id=7, producer_epoch=0,
                                         base_sequence=2), 0)
    with pytest.raises(InvalidRecordError):  # clients may not write markers
        log.append_as_leader(marker(7, commit=True), 0)
    log.append_as_leader(marker(7, commit=True, coordinator_epoch=3), 0, origin=COORD)
    log.append_as_leader(txn_batch(7, 2), 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_as_leader(marker(7, commit=True, coordinator_epoch=2), 0, origin=COORD)
    end = log.log_end_offset
    log.append_as_leader(marker(7, commit=False, epoch=1, coordinator_epoch=3), 0, origin=COORD)  # epoch bump
    assert log.log_end_offset == end + 1
    log.close()


def test_truncation_drops_index_entries_past_the_cut(tmp_path: str) -> None:
    log = open_log(str(tmp_path))
    log.append_as_leader(txn_batch(7, 0), 0)
    log.append_as_leader(marker(7, commit=False), 0, origin=COORD)  # 2
    log.append_as_leader(txn_batch(8, 0), 0)  # 3-4
    log.append_as_leader(marker(8, commit=False), 0, origin=COORD)  # 5
    log.truncate_to(5)
    settle(log)
    assert [t.producer_id for t in log.active_segment.txn_index.entries] == [7]
    assert log.last_stable_offset == 3  # producer 8's transaction is open again
    log.close()


def test_cleaner_drops_aborted_records_and_keeps_markers(tmp_path: str) -> None:
    log = open_log(str(tmp_path), **{"cleanup.policy": "compact", "segment.bytes": "200",
                                     "min.cleanable.dirty.ratio": "0.01"})
    log.append_as_leader(plain(key=b"k", value=b"committed"), 0)
    log.append_as_leader(txn_batch(7, 0, n=1, key=b"k", value=b"aborted"), 0)
    log.append_as_leader(marker(7, commit=False), 0, origin=COORD)
    log.append_as_leader(txn_batch(9, 0, n=1, key=b"open", value=b"o"), 0)  # stays open
    for _ in range(4):
        log.append_as_leader(plain(key=b"other", value=b"y"), 0)
    settle(log)
    LogCleaner().clean_log(log, force=True)
    data = log.read(0, 10**7).to_bytes()
    values = [(bytes(r.key), bytes(r.value)) for h in iter_batches(data) if not h.is_control
              for r in DefaultRecordBatch(data[h.position:h.end])]
    assert (b"k", b"committed") in values  # not superseded by the aborted write of the same key
    assert not any(v.startswith(b"aborted") for _, v in values)
    assert (b"open", b"o\x00") in values
    assert sum(1 for h in iter_batches(data) if h.is_control) == 1
    log.close()
