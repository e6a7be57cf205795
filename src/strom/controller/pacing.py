"""Controller passes over thousands of partitions share the broker's event loop: they yield in chunks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

T = TypeVar("T")

# Partitions a controller pass (deciding elections, walking the context, building requests) handles
# between two yields to the event loop, as the replica manager's STATE_CHANGE_CHUNK: the controller
# shares the broker's loop, and a failover touches every partition.
STATE_CHANGE_CHUNK = 128


async def paced(items: Iterable[T]) -> AsyncIterator[T]:
    """``items`` one by one, letting other callbacks run every STATE_CHANGE_CHUNK of them: a pass over
    10,000 partitions that writes nothing to ZooKeeper would otherwise hold the loop for all of them."""
    for i, item in enumerate(items):
        if i and i % STATE_CHANGE_CHUNK == 0:
            await asyncio.sleep(0)
        yield item
