"""Components stop in reverse start order, once each, and a failing step does not stop the rest."""

from __future__ import annotations

import asyncio

import pytest

from strom.server_common.lifecycle import Lifecycle


def test_steps_run_last_started_first_and_a_failure_does_not_stop_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []
    lifecycle = Lifecycle()
    lifecycle.on_stop("metadata", lambda: ran.append("metadata"))

    def full_disk() -> None:
        ran.append("logs")
        raise OSError(28, "No space left on device")

    lifecycle.on_stop("logs", full_disk)

    async def listener() -> None:
        await asyncio.sleep(0)
        ran.append("listener")

    lifecycle.on_stop("listener", listener)
    assert lifecycle.pending == ["listener", "logs", "metadata"]
    assert asyncio.run(lifecycle.stop()) is False
    assert ran == ["listener", "logs", "metadata"]
    assert "shutdown step logs failed" in caplog.text
    assert asyncio.run(lifecycle.stop()) is True and ran == ["listener", "logs", "metadata"]  # each once
