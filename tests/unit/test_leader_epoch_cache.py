"""LeaderEpochFileCache: Kafka 3.x's rules for assign, end_offset_for and truncation, and its file."""

from __future__ import annotations

import os

import pytest

from strom.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def entries(cache: LeaderEpochFileCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.epoch_entries]


def file_text(tmp_path: str) -> str:
    with open(os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT)) as f:
        return f.read()


def cache_with(tmp_path: str, *pairs: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(str(tmp_path))
    for epoch, offset in pairs:
        cache.assign(epoch, offset)
    return cache


def test_file_format_and_reload(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (0, 0), (3, 120), (4, 500))
    assert file_text(tmp_path) == "0\n3\n0 0\n3 120\n4 500\n"
    again = LeaderEpochFileCache(str(tmp_path))
    assert again.loaded_from_file
    assert again.epoch_entries == [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(4, 500)]
    assert cache.latest_epoch == again.latest_epoch == 4


def test_assign_same_epoch_later_offset_is_a_no_op_without_a_write(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (2, 10))
    before = os.stat(os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT)).st_mtime_ns
    assert not cache.assign(2, 11)
    assert not cache.assign(2, 10)
    assert entries(cache) == [(2, 10)]
    assert os.stat(os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT)).st_mtime_ns == before


def test_assign_new_epoch_appends(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (2, 10))
    assert cache.assign(5, 20)
    assert entries(cache) == [(2, 10), (5, 20)]


def test_assign_conflicting_entry_replaces_the_newer_ones(tmp_path: str) -> None:
    # Kafka 3.x: the log is the authority, entries that contradict the new one go.
    cache = cache_with(tmp_path, (1, 0), (2, 10), (5, 20))
    assert cache.assign(3, 15)  # epoch below the latest: (5, 20) goes
    assert entries(cache) == [(1, 0), (2, 10), (3, 15)]
    assert cache.assign(3, 12)  # same epoch, earlier start
    assert entries(cache) == [(1, 0), (2, 10), (3, 12)]
    assert cache.assign(6, 10)  # a new epoch starting at an existing start offset
    assert entries(cache) == [(1, 0), (6, 10)]
    assert LeaderEpochFileCache(str(tmp_path)).epoch_entries == cache.epoch_entries


def test_assign_rejects_negative(tmp_path: str) -> None:
    cache = LeaderEpochFileCache(str(tmp_path))
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)
    assert not os.path.exists(os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT))


def test_assign_all_writes_once(tmp_path: str) -> None:
    cache = LeaderEpochFileCache(str(tmp_path))
    assert cache.assign_all([(0, 0), (0, 5), (1, 7), (3, 9)])
    assert entries(cache) == [(0, 0), (1, 7), (3, 9)]
    assert not cache.assign_all([(3, 12)])
    assert file_text(tmp_path) == "0\n3\n0 0\n1 7\n3 9\n"


def test_end_offset_for_empty_cache_and_undefined_epoch(tmp_path: str) -> None:
    assert LeaderEpochFileCache(str(tmp_path)).end_offset_for(0, 100) == UNDEFINED
    cache = cache_with(tmp_path, (0, 0))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 100) == UNDEFINED


def test_end_offset_for_latest_epoch_is_the_leo(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 50))
    assert cache.end_offset_for(2, 77) == (2, 77)


def test_end_offset_for_older_epoch_is_the_next_epoch_start(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 50), (5, 90))
    assert cache.end_offset_for(0, 100) == (0, 50)
    assert cache.end_offset_for(2, 100) == (2, 90)
    # an epoch this log never had: the largest one below it, ending where the next starts
    assert cache.end_offset_for(1, 100) == (0, 50)
    assert cache.end_offset_for(3, 100) == (2, 90)
    assert cache.end_offset_for(4, 100) == (2, 90)


def test_end_offset_for_epoch_newer_than_all(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 50))
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_end_offset_for_epoch_older_than_the_first_entry(tmp_path: str) -> None:
    # Kafka 3.x answers the first entry's start: the follower truncates to the leader's
    # start instead of falling back to its high watermark.
    cache = cache_with(tmp_path, (3, 40), (5, 90))
    assert cache.end_offset_for(1, 100) == (1, 40)


def test_truncate_from_end(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 50), (5, 90))
    assert not cache.truncate_from_end(91)  # nothing starts at or after 91
    assert cache.truncate_from_end(90)
    assert entries(cache) == [(0, 0), (2, 50)]
    assert cache.truncate_from_end(20)
    assert entries(cache) == [(0, 0)]
    assert not cache.truncate_from_end(-1)
    assert LeaderEpochFileCache(str(tmp_path)).epoch_entries == cache.epoch_entries
    assert cache.truncate_from_end(0)
    assert entries(cache) == [] and cache.latest_epoch is None


def test_truncate_from_start_keeps_an_adjusted_first_entry(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 50), (5, 90))
    assert not cache.truncate_from_start(0)
    assert cache.truncate_from_start(60)
    assert entries(cache) == [(2, 60), (5, 90)]
    assert cache.truncate_from_start(90)  # exactly on an entry: older ones go, it stays
    assert entries(cache) == [(5, 90)]
    assert not cache.truncate_from_start(90)
    assert cache.truncate_from_start(200)
    assert entries(cache) == [(5, 200)]
    assert LeaderEpochFileCache(str(tmp_path)).epoch_entries == cache.epoch_entries


def test_truncate_from_start_before_the_first_entry_changes_nothing(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (2, 50))
    assert not cache.truncate_from_start(10)
    assert entries(cache) == [(2, 50)]


def test_clear(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (0, 0), (1, 5))
    cache.clear()
    assert entries(cache) == [] and cache.end_offset_for(1, 9) == UNDEFINED
    assert file_text(tmp_path) == "0\n0\n"
    assert LeaderEpochFileCache(str(tmp_path)).loaded_from_file


def test_epoch_for_offset(tmp_path: str) -> None:
    cache = cache_with(tmp_path, (1, 10), (4, 30))
    assert [cache.epoch_for_offset(o) for o in (5, 10, 29, 30, 99)] == [None, 1, 1, 4, 4]


def test_missing_file_is_an_empty_cache(tmp_path: str) -> None:
    cache = LeaderEpochFileCache(str(tmp_path))
    assert not cache.loaded_from_file and cache.epoch_entries == [] and cache.latest_epoch is None


@pytest.mark.parametrize("content", [
    b"", b"\x00\xff\xfe garbage", b"0\n", b"1\n1\n0 0\n", b"0\n2\n0 0\n", b"0\n1\n0 0\n1 5\n",
    b"0\n2\n3 0\n1 5\n", b"0\n1\n0\n", b"0\n1\n-1 0\n", b"0\nx\n",
    b"0\n2\n0 0\n2 12",  # "0\n2\n0 0\n2 1234\n" rewritten in place over a shorter file, its new size lost
])
def test_garbage_file_is_an_empty_cache_and_is_rewritten(tmp_path: str, content: bytes) -> None:
    with open(os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT), "wb") as f:
        f.write(content)
    cache = LeaderEpochFileCache(str(tmp_path))
    assert not cache.loaded_from_file and cache.epoch_entries == []
    cache.rebuild([(0, 0), (2, 8)])
    assert file_text(tmp_path) == "0\n2\n0 0\n2 8\n"
    assert LeaderEpochFileCache(str(tmp_path)).loaded_from_file


def test_failed_assign_write_leaves_memory_unchanged(tmp_path: str) -> None:
    directory = os.path.join(tmp_path, "gone")
    os.makedirs(directory)
    cache = cache_with(directory, (0, 0))
    os.rename(directory, directory + "-moved")  # the next write cannot create its temp file
    with pytest.raises(OSError):
        cache.assign(1, 5)
    assert entries(cache) == [(0, 0)]
    assert cache.truncate_from_end(0)  # truncations are lenient: memory follows, the load redoes it
    assert entries(cache) == []
