"""Transactional offset commits (TxnOffsetCommit) in the group coordinator, against real logs.

Offsets written in a transaction stay pending per producer id until the transaction's
marker: on_txn_completed (live) or a control batch in __consumer_offsets (on load) makes
them the committed offsets on commit and drops them on abort.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.group_support import Harness, run
from tests.unit.test_group_coordinator import join, join_new, sync

from strom.coordinator.group.group_coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INVALID_GROUP_ID,
    UNKNOWN_MEMBER_ID,
    GroupCoordinator,
)
from strom.coordinator.group.group_metadata import OffsetAndMetadata
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from strom.protocol.record_batch import build_control_batch
from strom.storage.validator import AppendOrigin

TP = ("t", 0)
PID = 4000


def write_marker(h: Harness, group: str, producer_id: int, commit: bool, epoch: int = 0) -> None:
    """What WriteTxnMarkers does to the group's partition, without telling the coordinator."""
    partition = h.manager.partition_for(group)
    results, _ = h.replicas.append_records(
        {(GROUP_METADATA_TOPIC_NAME, partition): build_control_batch(producer_id, epoch, 0, commit,
                                                                     1_700_000_000_000)},
        -1, origin=AppendOrigin.COORDINATOR)
    assert all(r.error_code == 0 for r in results.values())


async def txn_commit(c: GroupCoordinator, group: str, offset: int, pid: int = PID, epoch: int = 0,
                     member: str = "", generation: int = -1, instance: str | None = None,
                     tp: tuple[str, int] = TP) -> dict[tuple[str, int], int]:
    return await c.handle_txn_offset_commit("txn-1", group, pid, epoch, member, generation, instance,
                                            {tp: OffsetAndMetadata(offset, metadata="m", commit_timestamp=1)})


def committed(c: GroupCoordinator, group: str, tp: tuple[str, int] = TP) -> int | None:
    err, found = c.handle_fetch_offsets(group, [tp])
    assert err == 0
    off = found[tp]
    return None if off is None else off.offset


def test_pending_until_commit_and_dropped_on_abort(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        assert await txn_commit(c, "g", 10) == {TP: 0}  # an unknown group is accepted
        assert committed(c, "g") is None
        assert c.partitions_with_pending_offsets("g", [TP, ("t", 1)]) == {TP}
        p = h.manager.partition_for("g")
        c.on_txn_completed(PID, {p + 1}, True)  # another partition: not this group's marker
        assert committed(c, "g") is None
        c.on_txn_completed(PID, {p}, True)
        assert committed(c, "g") == 10
        assert c.partitions_with_pending_offsets("g", [TP]) == set()

        assert await txn_commit(c, "g", 20) == {TP: 0}
        c.on_txn_completed(PID, {p}, False)
        assert committed(c, "g") == 10
        assert c.partitions_with_pending_offsets("g", [TP]) == set()
        c.on_txn_completed(PID, {p}, True)  # a repeated marker changes nothing
        assert committed(c, "g") == 10
        h.close()

    run(main)


def test_later_plain_commit_wins_over_transaction_committed_after_it(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        assert await txn_commit(c, "g", 10) == {TP: 0}
        assert await c.handle_commit_offsets("g", "", None, -1, {TP: OffsetAndMetadata(15)}) == {TP: 0}
        c.on_txn_completed(PID, {h.manager.partition_for("g")}, True)
        assert committed(c, "g") == 15
        write_marker(h, "g", PID, commit=True)
        h.close()
        h2 = Harness(str(tmp_path))
        assert committed(h2.coordinator, "g") == 15  # the load applies the same rule
        h2.close()

    run(main)


def test_load_replays_transactional_batches_and_markers(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        assert await c.handle_commit_offsets("g", "", None, -1, {TP: OffsetAndMetadata(1)}) == {TP: 0}
        # committed transaction
        assert await txn_commit(c, "g", 10, pid=1) == {TP: 0}
        write_marker(h, "g", 1, commit=True)
        # aborted transaction, later in the log
        assert await txn_commit(c, "g", 99, pid=2) == {TP: 0}
        write_marker(h, "g", 2, commit=False)
        # a transaction still open when the broker stops, in a group that has nothing else
        assert await txn_commit(c, "only-pending", 7, pid=3) == {TP: 0}
        # an aborted transaction of a group that never had anything else leaves nothing to load
        assert await txn_commit(c, "only-aborted", 5, pid=4) == {TP: 0}
        write_marker(h, "only-aborted", 4, commit=False)
        h.close()

        h2 = Harness(str(tmp_path))
        c2 = h2.coordinator
        assert committed(c2, "g") == 10
        assert committed(c2, "only-pending") is None
        assert c2.partitions_with_pending_offsets("only-pending", [TP]) == {TP}
        assert committed(c2, "only-aborted") is None
        # the open transaction's marker arrives after the load
        c2.on_txn_completed(3, {h2.manager.partition_for("only-pending")}, True)
        assert committed(c2, "only-pending") == 7
        h2.close()

    run(main)


def test_completion_while_the_partition_loads_is_applied_after_replay(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        assert await txn_commit(h.coordinator, "g", 10) == {TP: 0}
        h.close()

        h2 = Harness(str(tmp_path))
        m = h2.manager
        p = m.partition_for("g")
        h2.coordinator.on_resignation(p)
        m.loading_partitions.add(p)
        records = m.read_partition(p)  # read before the marker ...
        assert await txn_commit(h2.coordinator, "g", 11) == {TP: COORDINATOR_LOAD_IN_PROGRESS}
        h2.coordinator.on_txn_completed(PID, {p}, True)  # ... which arrives mid-load
        m.loading_partitions.discard(p)
        m.replay(p, records, lambda g: None)
        assert committed(h2.coordinator, "g") == 10
        h2.close()

    run(main)


def test_member_checks(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        r = await join_new(c, "g")
        await sync(c, "g", r)
        assert await txn_commit(c, "g", 1, member="stranger", generation=r.generation_id) == {TP: UNKNOWN_MEMBER_ID}
        assert await txn_commit(c, "g", 1, member=r.member_id, generation=r.generation_id + 1) == \
            {TP: ILLEGAL_GENERATION}
        assert await txn_commit(c, "g", 1, member=r.member_id, generation=r.generation_id) == {TP: 0}
        assert await txn_commit(c, "g", 2) == {TP: 0}  # v0-v2 carry no member fields
        s = await join(c, "static", instance="i-1", require_known=False)
        await sync(c, "static", s)
        assert await txn_commit(c, "static", 1, member="other", generation=s.generation_id, instance="i-1") == \
            {TP: FENCED_INSTANCE_ID}
        assert await txn_commit(c, "static", 1, member=s.member_id, generation=s.generation_id,
                                instance="i-1") == {TP: 0}
        assert await txn_commit(c, "", 1) == {TP: INVALID_GROUP_ID}
        h.close()

    run(main)


def test_new_producer_epoch_without_markers_can_commit_offsets(tmp_path: Path) -> None:
    """InitProducerId bumps the epoch; the next transaction's offsets carry no sequence numbers."""
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        p = h.manager.partition_for("g")
        assert await txn_commit(c, "g", 1, epoch=0) == {TP: 0}
        write_marker(h, "g", PID, commit=True, epoch=0)
        c.on_txn_completed(PID, {p}, True)
        assert await txn_commit(c, "g", 2, epoch=1) == {TP: 0}
        write_marker(h, "g", PID, commit=True, epoch=1)
        c.on_txn_completed(PID, {p}, True)
        assert committed(c, "g") == 2
        h.close()

    run(main)
