"""The loop stall detector names the callback that blocked the loop, and only that."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from strom.server_common.stall_detector import LOOP_STALL_MARKER, LoopStallDetector


def blocking_replay_of_a_whole_partition() -> None:
    time.sleep(0.4)  # stands for any blocking call made on the loop


async def _run(detector: LoopStallDetector, body) -> None:  # noqa: ANN001 - an async callable
    detector.start()
    try:
        await asyncio.sleep(0.2)  # the heartbeat is armed and on time
        await body()
        await asyncio.sleep(0.2)  # the late heartbeat runs and records the stall
    finally:
        detector.stop()


def test_a_blocking_callback_is_reported_once_with_its_stack(caplog: pytest.LogCaptureFixture) -> None:
    detector = LoopStallDetector(threshold_ms=150)

    async def block() -> None:
        blocking_replay_of_a_whole_partition()

    with caplog.at_level(logging.INFO, logger="strom.server_common.stall_detector"):
        asyncio.run(_run(detector, block))
    warnings = [
        r for r in caplog.records if r.name == "strom.server_common.stall_detector" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1, caplog.text
    assert LOOP_STALL_MARKER in warnings[0].getMessage()
    assert "blocking_replay_of_a_whole_partition" in warnings[0].getMessage()
    assert detector.stats.stalls == 1 and detector.stats.blocked_stalls == 1
    assert detector.stats.max_stall_s >= 0.3


def test_work_that_yields_is_not_a_stall(caplog: pytest.LogCaptureFixture) -> None:
    detector = LoopStallDetector(threshold_ms=150)

    async def chunks() -> None:
        for _ in range(40):
            time.sleep(0.01)  # 10 ms of work, then let the loop run
            await asyncio.sleep(0)

    with caplog.at_level(logging.INFO, logger="strom.server_common.stall_detector"):
        asyncio.run(_run(detector, chunks))
    # Only the detector's own records count: a client thread left over by another test may log.
    ours = [r for r in caplog.records if r.name == "strom.server_common.stall_detector"]
    assert not [r for r in ours if r.levelno >= logging.WARNING], caplog.text
    assert detector.stats.blocked_stalls == 0


def test_zero_turns_it_off() -> None:
    detector = LoopStallDetector(threshold_ms=0)

    async def block() -> None:
        blocking_replay_of_a_whole_partition()

    asyncio.run(_run(detector, block))
    assert detector.stats.stalls == 0 and detector.stats.max_stall_s == 0
