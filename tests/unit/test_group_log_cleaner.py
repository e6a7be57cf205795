"""LogCleaner on real Logs: latest value per key, tombstones, offsets, crash leftovers, restart."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support.record_batches import decode_batch

from strom.protocol.record_batch import COMPRESSION_GZIP, build_batch, iter_batches
from strom.storage.cleaner import LogCleaner
from strom.storage.log import Log
from strom.storage.log_config import LogConfig


def make_log(tmp_path: Path, **props: str) -> Log:
    config = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": "600",
                                   "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0", **props})
    return Log(str(tmp_path / "compacted-0"), config)


def append(plog: Log, records: list[tuple[bytes | None, bytes | None]], ts: int | None = None,
           compression: int = 0) -> None:
    now = int(time.time() * 1000) if ts is None else ts
    plog.append_as_leader(build_batch([(k, v, (), now) for k, v in records], compression=compression), 0)
    plog.update_high_watermark(plog.log_end_offset)


def read_all(plog: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    data = plog.read(plog.log_start_offset, 1 << 30, plog.log_end_offset, True).to_bytes()
    out = []
    for h in iter_batches(data):
        out += [(r.offset, r.key, r.value) for r in decode_batch(data, h.position)]
    return out


def test_keeps_latest_value_per_key_and_offsets(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    for i in range(60):
        append(plog, [(f"k{i % 5}".encode(), f"v{i}".encode())])
    before = read_all(plog)
    assert len(before) == 60
    stats = LogCleaner().clean_log(plog)
    assert stats is not None and stats.segments_rewritten > 0
    after = read_all(plog)
    # every key's latest value survives at its original offset; older values are gone from the cleaned part
    latest = {k: (o, v) for o, k, v in before}
    for k, (o, v) in latest.items():
        assert (o, k, v) in after
    cleaned_upto = stats.end_offset
    cleaned = [r for r in after if r[0] < cleaned_upto]
    assert len({k for _, k, _ in cleaned}) == len(cleaned)
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    assert plog.log_end_offset == 60
    # a consumer positioned in a gap reads on from the next surviving offset
    data = plog.read(1, 1 << 20, plog.log_end_offset, True).to_bytes()
    assert data
    plog.close()


def test_partially_kept_compressed_batches_are_rebuilt(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    for i in range(10):
        append(plog, [(b"a", f"a{i}".encode() * 10), (f"u{i}".encode(), b"unique" * 10)],
               compression=COMPRESSION_GZIP)
    LogCleaner().clean_log(plog, force=True)
    after = read_all(plog)
    assert sum(1 for _, k, _ in after if k and k.startswith(b"u")) == 10
    assert [v for _, k, v in after if k == b"a"][-1] == b"a9" * 10
    plog.close()
    # the rewritten segments load and index correctly after a restart
    again = make_log(tmp_path)
    assert read_all(again) == after
    again.close()


def test_tombstones_removed_after_delete_retention(tmp_path: Path) -> None:
    plog = make_log(tmp_path, **{"delete.retention.ms": "1000"})
    now = int(time.time() * 1000)
    for i in range(20):
        append(plog, [(f"k{i % 4}".encode(), b"value-" + str(i).encode() * 20)], ts=now - 10_000)
    append(plog, [(b"k0", None)], ts=now - 10_000)  # old tombstone: removed
    append(plog, [(b"k1", None)], ts=now)  # fresh tombstone: kept for delete.retention.ms
    for i in range(20):
        append(plog, [(f"filler{i}".encode(), b"x" * 50)], ts=now)
    cleaner = LogCleaner()
    stats = cleaner.clean_log(plog, now_ms=now)
    assert stats is not None and stats.tombstones_removed == 1
    after = read_all(plog)
    keys = [k for _, k, _ in after]
    assert b"k0" not in keys  # both its values and its tombstone are gone
    assert (b"k1", None) in [(k, v) for _, k, v in after]
    # later, the kept tombstone expires too and a round runs for it even without new dirt
    later = now + 5000
    stats = cleaner.clean_log(plog, now_ms=later)
    assert stats is not None and stats.tombstones_removed == 1
    assert b"k1" not in [k for _, k, _ in read_all(plog)]
    plog.close()


def test_dirty_ratio_and_checkpoint(tmp_path: Path) -> None:
    plog = make_log(tmp_path, **{"min.cleanable.dirty.ratio": "0.5"})
    for i in range(40):
        append(plog, [(f"k{i % 3}".encode(), b"v" * 40)])
    cleaner = LogCleaner()
    assert cleaner.clean_log(plog) is not None
    # nothing new: the whole cleanable range is clean
    assert cleaner.clean_log(plog) is None
    checkpoint = (tmp_path / "cleaner-offset-checkpoint").read_text().splitlines()
    assert checkpoint[0] == "0" and checkpoint[2].startswith("compacted 0 ")
    # a fresh cleaner (broker restart) resumes from the checkpoint
    assert LogCleaner().clean_log(plog) is None
    plog.close()


def test_leftover_cleaned_file_is_ignored_on_load(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    for i in range(30):
        append(plog, [(f"k{i % 2}".encode(), b"v" * 40)])
    before = read_all(plog)
    first = plog.segments[0]
    with open(first.log_path + ".cleaned", "wb") as f:
        f.write(b"garbage from a crash mid-clean")
    plog.close()
    again = make_log(tmp_path)
    assert read_all(again) == before
    assert not any(n.endswith(".cleaned") for n in os.listdir(again.directory))
    again.close()


def test_active_segment_and_above_high_watermark_untouched(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    for _ in range(30):
        append(plog, [(b"same", b"v" * 40)])
    plog.update_high_watermark(0)  # pretend nothing is replicated yet
    assert LogCleaner().clean_log(plog, force=True) is None
    plog.update_high_watermark(plog.log_end_offset)
    LogCleaner().clean_log(plog, force=True)
    active_records = [r for r in read_all(plog) if r[0] >= plog.active_segment.base_offset]
    assert active_records  # the active segment keeps its duplicates
    plog.close()
