"""Partition ownership shared by coordinators: a failed load is retried, not given up on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.unit.fake_clock import ManualClock
from tests.unit.group_support import Harness, run

from strom.coordinator import common
from strom.coordinator.group.group_coordinator import COORDINATOR_LOAD_IN_PROGRESS, NONE, NOT_COORDINATOR
from strom.coordinator.group.group_metadata import OffsetAndMetadata


async def _commit(h: Harness, group: str) -> None:
    result = await h.coordinator.handle_commit_offsets(
        group, "", None, -1, {("t", 0): OffsetAndMetadata(42, commit_timestamp=1)})
    assert result == {("t", 0): NONE}


def _fail_first_reads(h: Harness, monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    calls: list[int] = []
    real = h.manager.read_partition

    def flaky(partition: int) -> Any:
        calls.append(partition)
        if len(calls) <= failures:
            raise OSError("disk hiccup")
        return real(partition)

    monkeypatch.setattr(h.manager, "read_partition", flaky)
    return calls


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for the load's worker thread to get somewhere (bounded by the test's own timeout)."""
    while not condition():
        await asyncio.sleep(0.001)


def test_failed_load_is_retried_until_the_partition_is_coordinated(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        clock = ManualClock()
        h = Harness(str(tmp_path), num_partitions=4, clock=clock)
        c = h.coordinator
        await _commit(h, "g")
        p = h.manager.partition_for("g")
        c.on_resignation(p)
        assert c.handle_fetch_offsets("g", None)[0] == NOT_COORDINATOR
        calls = _fail_first_reads(h, monkeypatch, failures=2)
        c.loading_partitions.add(p)
        task = asyncio.create_task(common.load_with_retry(c, p, lambda: True, clock))
        await _until(lambda: clock.sleepers == 1)  # the first read failed: backing off
        # Between attempts the group is loading (clients retry), never NOT_COORDINATOR.
        assert len(calls) == 1 and c.handle_fetch_offsets("g", None)[0] == COORDINATOR_LOAD_IN_PROGRESS
        await clock.advance(999)
        assert len(calls) == 1  # the back-off starts at 1 s
        await clock.advance(1)
        await _until(lambda: len(calls) == 2 and clock.sleepers == 1)
        await clock.advance(2000)  # then doubles
        await asyncio.wait_for(task, 5)
        assert len(calls) == 3 and p in c.owned_partitions and p not in c.loading_partitions
        error, offsets = c.handle_fetch_offsets("g", None)
        assert error == NONE and offsets[("t", 0)].offset == 42
        h.close()

    run(main)


def test_retry_stops_once_leadership_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        clock = ManualClock()
        h = Harness(str(tmp_path), num_partitions=4, clock=clock)
        c = h.coordinator
        c.on_resignation(0)
        calls = _fail_first_reads(h, monkeypatch, failures=100)
        leader = [True]
        task = asyncio.create_task(common.load_with_retry(c, 0, lambda: leader[0], clock))
        await _until(lambda: clock.sleepers == 1)
        await clock.advance(1000)
        await _until(lambda: len(calls) == 2 and clock.sleepers == 1)
        leader[0] = False
        await clock.advance(2000)
        await asyncio.wait_for(task, 5)
        assert len(calls) == 2 and 0 not in c.owned_partitions and 0 not in c.loading_partitions
        h.close()

    run(main)
