"""CoordinatorRuntime: write then apply, replies at the commit, one ordered queue per partition."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kafka.errors as Errors
import pytest
from tests.unit.group_support import Harness, LogBackedReplicaManager, run

from strom.coordinator.group.group_metadata import OffsetAndMetadata
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from strom.coordinator.group.records import group_metadata_key, offset_commit_key
from strom.coordinator.runtime import RECORD, CoordinatorRuntime, in_chunks

TOPIC = GROUP_METADATA_TOPIC_NAME


class DeferredCommits(LogBackedReplicaManager):
    """Appends go to real logs at once; the acks=all answer of each waits until the test commits it,
    in whatever order the test chooses (as replication would, were it out of order)."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.pending: list[tuple[asyncio.Future[Any], dict[tuple[str, int], Any]]] = []
        self.fail_next: int = 0  # error code the next append's commit answers with

    def append_records(self, entries: dict[tuple[str, int], bytes], acks: int, origin: Any = None) -> Any:
        results, _ = super().append_records(entries, acks, origin)
        if self.fail_next:
            results = {tp: SimpleNamespace(error_code=self.fail_next, error_message="injected", base_offset=-1)
                       for tp in results}
            self.fail_next = 0
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((future, results))
        return None, future

    def commit(self, index: int) -> None:
        future, results = self.pending[index]
        future.set_result(results)

    def logged_keys(self, partition: int) -> list[bytes | None]:
        return [r.key for r in CoordinatorRuntime(TOPIC, self).read_records(partition)]


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_apply_runs_only_after_the_commit_and_the_reply_waits_for_it(tmp_path: Path) -> None:
    async def main() -> None:
        rm = DeferredCommits(str(tmp_path))
        runtime = CoordinatorRuntime(TOPIC, rm)
        applied: list[int] = []
        task = asyncio.create_task(runtime.write(0, [(b"k", b"v")], lambda off: applied.append(off) or "done"))
        await _settle()
        # Written to the log, but not committed: nothing applied, no reply yet.
        assert rm.logged_keys(0) == [b"k"]
        assert applied == [] and not task.done()
        rm.commit(0)
        assert await task == "done" and applied == [0]
        rm.close()

    run(main)


def test_applies_follow_log_order_whatever_order_commits_arrive_in(tmp_path: Path) -> None:
    async def main() -> None:
        rm = DeferredCommits(str(tmp_path))
        runtime = CoordinatorRuntime(TOPIC, rm)
        applied: list[bytes] = []
        tasks = [asyncio.create_task(runtime.write(0, [(key, b"v")], lambda _o, k=key: applied.append(k)))
                 for key in (b"a", b"b", b"c")]
        await _settle()
        assert rm.logged_keys(0) == [b"a", b"b", b"c"]  # appended in arrival order
        rm.commit(2)
        rm.commit(1)
        await _settle()
        assert applied == [] and not any(t.done() for t in tasks)  # "a" is not committed yet
        rm.commit(0)
        await asyncio.gather(*tasks)
        assert applied == [b"a", b"b", b"c"]
        rm.close()

    run(main)


def test_partitions_are_independent(tmp_path: Path) -> None:
    async def main() -> None:
        rm = DeferredCommits(str(tmp_path))
        runtime = CoordinatorRuntime(TOPIC, rm)
        applied: list[int] = []
        slow = asyncio.create_task(runtime.write(0, [(b"a", b"v")], lambda _o: applied.append(0)))
        fast = asyncio.create_task(runtime.write(1, [(b"b", b"v")], lambda _o: applied.append(1)))
        await _settle()
        rm.commit(1)
        await fast
        assert applied == [1] and not slow.done()
        rm.commit(0)
        await slow
        assert applied == [1, 0]
        rm.close()

    run(main)


def test_a_failed_append_applies_nothing_and_does_not_block_the_next(tmp_path: Path) -> None:
    async def main() -> None:
        rm = DeferredCommits(str(tmp_path))
        runtime = CoordinatorRuntime(TOPIC, rm)
        state: dict[bytes, bytes] = {}
        rm.fail_next = Errors.NotEnoughReplicasAfterAppendError.errno
        failed = asyncio.create_task(runtime.write(0, [(b"k", b"1")], lambda _o: state.update({b"k": b"1"})))
        later = asyncio.create_task(runtime.write(0, [(b"j", b"2")], lambda _o: state.update({b"j": b"2"})))
        await _settle()
        rm.commit(1)
        await _settle()
        assert state == {} and not later.done()  # still behind the first write
        rm.commit(0)
        with pytest.raises(Errors.NotEnoughReplicasAfterAppendError):
            await failed
        await later
        assert state == {b"j": b"2"}
        rm.close()

    run(main)


def test_a_write_waits_for_a_load_of_its_partition(tmp_path: Path) -> None:
    async def main() -> None:
        rm = DeferredCommits(str(tmp_path))
        runtime = CoordinatorRuntime(TOPIC, rm)
        release = threading.Event()

        def rebuild(partition: int) -> list[bytes | None]:
            release.wait(10)
            return [r.key for r in runtime.read_records(partition)]

        load = asyncio.create_task(runtime.load(0, rebuild))
        await _settle()
        write = asyncio.create_task(runtime.write(0, [(b"k", b"v")]))
        other = asyncio.create_task(runtime.write(1, [(b"o", b"v")]))
        await _settle()
        assert rm.logged_keys(0) == [] and rm.logged_keys(1) == [b"o"]  # partition 1 is not held up
        release.set()
        assert await load == []  # the load saw the log as it was before the write
        await _settle()
        assert rm.logged_keys(0) == [b"k"]
        rm.commit(1)
        rm.commit(0)
        assert await write == 0 and await other == 0
        rm.close()

    run(main)


def test_read_records_sees_transactional_batches_and_markers(tmp_path: Path) -> None:
    async def main() -> None:
        rm = LogBackedReplicaManager(str(tmp_path))
        runtime = CoordinatorRuntime(TOPIC, rm)
        await runtime.write(0, [(b"a", b"1"), (b"b", None)])
        records = list(runtime.read_records(0))
        assert [(r.offset, r.key, r.value, r.kind) for r in records] == [(0, b"a", b"1", RECORD),
                                                                          (1, b"b", None, RECORD)]
        rm.close()

    run(main)


def test_in_chunks_lets_other_callbacks_run_between_chunks() -> None:
    async def main() -> None:
        seen: list[str] = []

        async def other() -> None:
            seen.append("other")

        task = asyncio.create_task(other())
        await in_chunks(range(6), lambda i: seen.append(str(i)), every=3)
        await task
        assert seen.index("other") == 3  # ran after the first chunk, before the second

    run(main)


def test_offset_commits_in_flight_land_in_log_order(tmp_path: Path) -> None:
    """Two commits of one partition wait for replication at once and the later one is acknowledged
    first: the group must end with the later offset, as the log (and so any reload) says."""
    async def main() -> None:
        h = Harness(str(tmp_path))
        rm = DeferredCommits(str(tmp_path / "deferred"))
        h.manager.runtime.replica_manager = rm
        c = h.coordinator
        first = asyncio.create_task(c.handle_commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(1)}))
        second = asyncio.create_task(c.handle_commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(2)}))
        await _settle()
        rm.commit(1)
        rm.commit(0)
        assert await first == {("t", 0): 0} and await second == {("t", 0): 0}
        assert c.handle_fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 2  # type: ignore[union-attr]
        rm.close()
        h.close()

    run(main)


def test_delete_groups_is_written_then_applied_and_a_failed_append_keeps_the_group(tmp_path: Path) -> None:
    """DeleteGroups tombstones the group and its offsets first: the group stays (as the log says)
    until the tombstones are committed, and a failed append leaves it and its offsets in place."""
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        for group in ("kept", "gone"):
            assert await c.handle_commit_offsets(group, "", None, -1, {("t", 0): OffsetAndMetadata(7)}) == {
                ("t", 0): 0}
        rm = DeferredCommits(str(tmp_path / "deferred"))
        h.manager.runtime.replica_manager = rm

        rm.fail_next = Errors.NotEnoughReplicasAfterAppendError.errno
        failed = asyncio.create_task(c.handle_delete_groups(["kept"]))
        await _settle()
        rm.commit(0)
        assert (await failed)["kept"] == Errors.CoordinatorNotAvailableError.errno
        group = h.manager.get_group("kept")
        assert group is not None and str(group.state) == "Empty"
        assert c.handle_fetch_offsets("kept", [("t", 0)])[1][("t", 0)].offset == 7  # type: ignore[union-attr]

        deleting = asyncio.create_task(c.handle_delete_groups(["gone"]))
        await _settle()
        assert h.manager.get_group("gone") is not None and not deleting.done()  # not committed yet
        assert c.handle_fetch_offsets("gone", [("t", 0)])[1][("t", 0)].offset == 7  # type: ignore[union-attr]
        rm.commit(1)
        assert await deleting == {"gone": 0}
        assert h.manager.get_group("gone") is None
        rm.close()
        h.close()

    run(main)


def test_offset_expiry_is_written_then_applied_and_a_failed_append_keeps_the_offsets(tmp_path: Path) -> None:
    """Expired offsets (and the empty group they leave) go from memory only once their tombstones
    are committed; a failed append keeps them, and the next expiry pass tries again."""
    async def main() -> None:
        h = Harness(str(tmp_path), retention_ms=1_000)
        c = h.coordinator
        assert await c.handle_commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(3)}) == {("t", 0): 0}
        later = h.manager.clock.wall_ms() + 60_000
        rm = DeferredCommits(str(tmp_path / "deferred"))
        h.manager.runtime.replica_manager = rm

        rm.fail_next = Errors.NotEnoughReplicasAfterAppendError.errno
        failed = asyncio.create_task(h.manager.cleanup_group_metadata(later))
        await _settle()
        assert c.handle_fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 3  # type: ignore[union-attr]
        rm.commit(0)
        assert await failed == 0
        assert c.handle_fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 3  # type: ignore[union-attr]
        assert h.manager.get_group("g") is not None

        expiring = asyncio.create_task(h.manager.cleanup_group_metadata(later))
        await _settle()
        assert h.manager.get_group("g") is not None  # tombstones appended, not committed
        rm.commit(1)
        assert await expiring == 1
        assert h.manager.get_group("g") is None  # empty and without offsets: dead
        assert rm.logged_keys(h.manager.partition_for("g"))[-2:] == [
            offset_commit_key("g", "t", 0), group_metadata_key("g")]
        rm.close()
        h.close()

    run(main)
