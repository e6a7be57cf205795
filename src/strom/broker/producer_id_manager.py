"""Hands out producer ids from blocks reserved in the metadata store."""

from __future__ import annotations

import asyncio

from strom.metadata.store import MetadataStore

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._next = 0
        self._end = 0
        self._refill = asyncio.Lock()  # one block reservation at a time, however many requests wait

    async def generate(self) -> int:
        """A coroutine: reserving a block is a ZooKeeper write in a cluster, made off the event loop."""
        async with self._refill:
            if self._next >= self._end:
                first = await self._metadata.allocate_producer_id_block_async(BLOCK_SIZE)
                self._next, self._end = first, first + BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid
