"""Hands out producer ids from blocks reserved in the metadata store."""

from __future__ import annotations

from strom.cluster.metadata import MetadataStore

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._next = 0
        self._end = 0

    def generate(self) -> int:
        if self._next >= self._end:
            self._next = self._metadata.allocate_producer_id_block(BLOCK_SIZE)
            self._end = self._next + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid
