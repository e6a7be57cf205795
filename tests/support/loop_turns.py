"""Whether the event loop stays free: a coroutine that stands for every other client counts its turns."""

from __future__ import annotations

import asyncio
from typing import Any


class OtherConnection:
    """``async with OtherConnection() as other:`` runs a coroutine taking a turn whenever the loop is free;
    ``other.ticks`` is how many it took. Work that never yields leaves it at the count it had."""

    def __init__(self) -> None:
        self.ticks = 0
        self._stop = False
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while not self._stop:
            self.ticks += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> OtherConnection:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._stop = True
        if self._task is not None:
            await self._task
