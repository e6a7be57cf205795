"""ResponseQueue: a connection's answers, written in request order.

Kafka answers the requests of one connection in order. Two things make that more than "write each
answer as it comes": answers of APIs whose handlers answer at once may be gathered into one socket
write (which roughly halves the per-request cost of a pipelining, unbatched producer), and an answer
may not be ready yet (a DeferredResponse: an acks=all produce waiting for the ISR) while the
connection goes on reading requests, whose answers then queue behind it.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

# Gathered answers are written once they add up to this much.
FLUSH_BYTES = 1 << 20

Write = Callable[[list[bytes]], Awaitable[None]]


class ResponseQueue:
    """Gathered answers (ready, not yet written) and, behind a waiting one, every later answer in order.

    At most one of the two holds anything: once an answer waits, the ones after it queue behind it.
    """

    def __init__(self, write: Write, on_ready: Callable[[asyncio.Future[bytes]], None]) -> None:
        self._write = write
        self._on_ready = on_ready  # wakes the request loop when a waiting answer completes
        self._gathered: list[bytes] = []
        self._gathered_bytes = 0
        # Behind a waiting answer, every later one in order. Read it (never change it) to test for emptiness
        # without a call: the request loop does, once per request.
        self.queued: collections.deque[bytes | asyncio.Future[bytes]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Answers queued behind (and including) one that is not ready yet."""
        return len(self.queued)

    @property
    def head_ready(self) -> bool:
        """The first queued answer can be written now."""
        if not self.queued:
            return False
        head = self.queued[0]
        return not isinstance(head, asyncio.Future) or head.done()

    def add(self, answer: bytes, gather: bool) -> bool:
        """Queue a complete answer; True when the caller must ``flush`` now (not gathered, or enough
        gathered). Behind a waiting answer it waits its turn instead."""
        if self.queued:
            self.queued.append(answer)
            return False
        self._gathered.append(answer)
        self._gathered_bytes += len(answer)
        return self._gathered_bytes >= FLUSH_BYTES or not gather

    async def add_waiting(self, ready: asyncio.Future[bytes]) -> None:
        """An answer complete once ``ready`` is: what is gathered goes out first."""
        await self.flush()
        ready.add_done_callback(self._on_ready)
        self.queued.append(ready)

    async def flush(self) -> None:
        """Write the gathered answers."""
        if self._gathered:
            chunks = self._gathered
            self._gathered, self._gathered_bytes = [], 0
            await self._write(chunks)

    async def drain(self) -> None:
        """Write everything, waiting for queued answers to complete (before a handler that may wait)."""
        await self.flush()
        if self.queued:
            await self.write_waiting(wait=True)

    async def write_waiting(self, wait: bool) -> None:
        """Write queued answers in order: the ready ones at the head, or (wait) all of them."""
        queued = self.queued
        chunks: list[bytes] = []
        while queued:
            head = queued[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    if not wait:
                        break
                    if chunks:
                        await self._write(chunks)
                        chunks = []
                    await head
                chunks.append(head.result())
            else:
                chunks.append(head)
            queued.popleft()
        if chunks:
            await self._write(chunks)
