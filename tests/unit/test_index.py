"""OffsetIndex / TimeIndex: entry layout, binary search, fullness, truncation, reopen and sanity checks."""

from __future__ import annotations

import os
import struct

import pytest

from strom.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_worked_example(tmp_path: str) -> None:
    """Seeds §4.4/4.5: in segment 170410, entry [3,348] is offset 170413 and [8,1325] serves 170418."""
    idx = OffsetIndex(os.path.join(tmp_path, "00000000000000170410.index"), 170410, 1024)
    idx.append(170413, 348)
    idx.append(170418, 1325)
    idx.append(170425, 2900)
    assert idx.lookup(170413) == (170413, 348)
    assert idx.lookup(170418) == (170418, 1325)
    assert idx.lookup(170420) == (170418, 1325)  # greatest entry <= target
    assert idx.lookup(170411) == (170410, 0)  # below the first entry: start of the segment
    idx.persist()
    with open(idx.path, "rb") as f:
        raw = f.read()
    assert raw[8:16] == struct.pack(">ii", 8, 1325)  # 4-byte relative offset + 4-byte position
    assert len(raw) == 24


def test_offset_index_binary_search_many_entries(tmp_path: str) -> None:
    idx = OffsetIndex(os.path.join(tmp_path, "0.index"), 1000, 8 * 5000)
    for i in range(1, 4000):
        idx.append(1000 + i * 3, i * 100)
    for target in range(1000, 1000 + 4000 * 3, 7):
        off, pos = idx.lookup(target)
        k = (target - 1000) // 3
        if k == 0:
            assert (off, pos) == (1000, 0)
        else:
            assert (off, pos) == (1000 + k * 3, k * 100)
    assert idx.lookup_by_position(250) == (1006, 200)


def test_offset_index_full_and_append_rules(tmp_path: str) -> None:
    idx = OffsetIndex(os.path.join(tmp_path, "0.index"), 0, 8 * 4 + 5)  # rounds down to 4 entries
    assert idx.max_entries == 4
    for i in range(1, 5):
        assert not idx.is_full()
        idx.append(i, i * 10)
    assert idx.is_full()
    with pytest.raises(ValueError):
        idx.append(3, 999)  # offsets must increase


def test_offset_index_truncate_and_reopen(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "0.index")
    idx = OffsetIndex(path, 0, 1024)
    for i in range(1, 11):
        idx.append(i * 10, i * 100)
    assert not os.path.exists(path)  # entries live in memory until the segment rolls, flushes or closes
    idx.flush()
    assert os.path.getsize(path) == 80
    idx.truncate_to(55)  # drops offsets >= 55
    assert idx.entries == 5 and idx.last_entry == (50, 500)
    idx.truncate_to_position(300)
    assert idx.entries == 2 and idx.last_entry == (20, 200)
    idx.persist()
    assert os.path.getsize(path) == 16  # truncation rewrites the file
    again = OffsetIndex(path, 0, 1024)
    assert not again.loaded  # lazy: nothing read until first use
    assert again.entries == 2 and again.lookup(25) == (20, 200)
    again.sanity_check(log_size=1000)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=150)  # points beyond the log


def test_preallocated_index_left_by_older_versions_loads(tmp_path: str) -> None:
    """Older versions preallocated 10 MiB files; a crash left them with an all-zero tail."""
    path = os.path.join(tmp_path, "0.index")
    with open(path, "wb") as f:
        f.write(struct.pack(">ii", 10, 100) + struct.pack(">ii", 20, 200))
        f.truncate(1024)
    idx = OffsetIndex(path, 0, 1024)
    assert idx.entries == 2 and idx.last_entry == (20, 200)
    idx.append(30, 300)
    idx.persist()
    assert os.path.getsize(path) == 24


def test_lazily_loaded_garbage_index_is_rebuilt_by_its_owner(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "0.index")
    with open(path, "wb") as f:
        f.write(struct.pack(">ii", 50, 10) + struct.pack(">ii", 5, 20))
    calls = []

    def rebuild(index, exc) -> None:  # noqa: ANN001
        calls.append(str(exc))
        index.append(7, 70)

    idx = OffsetIndex(path, 0, 1024, on_corrupt=rebuild)
    assert idx.lookup(9) == (7, 70)
    assert len(calls) == 1 and "corrupt index" in calls[0]


def test_offset_index_sanity_check_detects_garbage(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "0.index")
    with open(path, "wb") as f:
        f.write(struct.pack(">ii", 50, 10) + struct.pack(">ii", 5, 20))
    idx = OffsetIndex(path, 0, 1024)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    with open(path, "wb") as f:
        f.write(b"\x01" * 13)
    idx = OffsetIndex(path, 0, 1024)
    assert not idx.file_size_ok()
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()


def test_time_index_monotonic_lookup_and_truncate(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "0.timeindex")
    idx = TimeIndex(path, 100, 12 * 100)
    assert idx.lookup(5) == (-1, 100)
    assert idx.maybe_append(1_000, 110)
    assert not idx.maybe_append(1_000, 115)  # timestamps must strictly increase
    assert not idx.maybe_append(900, 116)
    assert idx.maybe_append(2_000, 120)
    assert idx.maybe_append(3_000, 130)
    assert idx.lookup(999) == (-1, 100)
    assert idx.lookup(1_000) == (1_000, 110)
    assert idx.lookup(2_500) == (2_000, 120)
    assert idx.lookup(10**12) == (3_000, 130)
    idx.truncate_to(120)
    assert idx.entries == 1 and idx.last_entry == (1_000, 110)
    idx.persist()
    with open(path, "rb") as f:
        assert f.read(12) == struct.pack(">qi", 1_000, 10)
    idx.sanity_check()


def test_time_index_keeps_one_slot_for_roll(tmp_path: str) -> None:
    idx = TimeIndex(os.path.join(tmp_path, "0.timeindex"), 0, 12 * 3)
    idx.maybe_append(1, 1)
    assert not idx.is_full()
    idx.maybe_append(2, 2)
    assert idx.is_full()
    with pytest.raises(ValueError):
        idx.maybe_append(3, 3)
    assert idx.maybe_append(3, 3, skip_full_check=True)


def test_last_entry_of_an_unloaded_index_reads_two_entries_not_the_file(tmp_path: str) -> None:
    """Retention asks every old segment for its largest timestamp: that must not load every index."""
    path = os.path.join(tmp_path, "0.timeindex")
    idx = TimeIndex(path, 100, 12 * 100)
    for i in range(1, 50):
        idx.maybe_append(1_000 * i, 100 + i)
    idx.persist()
    again = TimeIndex(path, 100, 12 * 100)
    assert again.last_entry == (49_000, 149)
    assert not again.loaded
    with open(path, "r+b") as f:  # a last entry below the first is not believed: full load + check
        f.seek(0)
        f.write(struct.pack(">qi", 10**15, 1))
    calls = []
    suspicious = TimeIndex(path, 100, 12 * 100, on_corrupt=lambda index, exc: calls.append(exc))
    assert suspicious.last_entry == (-1, 100)  # rebuilt (here: by a callback that adds nothing)
    assert suspicious.loaded and len(calls) == 1
