"""Framing: size-prefixed request frames cut out of a connection's received bytes.

Small frames are parsed out of one reusable receive buffer; a large frame (a 1 MiB produce) is
received straight into a buffer of exactly its size, avoiding a stream reader's buffer-growing
copies (the codec then slices the records out once). The receive buffer starts small and grows
only while the client keeps it full; a frame larger than EAGER_FRAME_BYTES gets memory as its bytes
arrive, so a declared-but-unsent 100 MiB frame costs little. Every byte held for a frame is charged
to the broker-wide RequestMemoryPool.
"""

from __future__ import annotations

import logging
import struct
from typing import Protocol

from strom.broker.network.memory_pool import PoolMember, RequestMemoryPool

log = logging.getLogger(__name__)

# A connection's receive buffer starts at this size when bytes first arrive, doubles (up to the maximum)
# while reads fill it, and is dropped again once the connection has been quiet for a sweep interval.
INITIAL_RECEIVE_BUFFER_BYTES = 16 * 1024
RECEIVE_BUFFER_BYTES = 256 * 1024
# Frames up to this size get their whole buffer when the header arrives (a 1 MiB produce is received
# in place with no extra copy); larger ones start at FIRST_FRAME_CHUNK_BYTES and double as bytes arrive.
EAGER_FRAME_BYTES = 2 * 1024 * 1024
FIRST_FRAME_CHUNK_BYTES = 64 * 1024


class FrameSink(PoolMember, Protocol):
    """What the receiver hands complete frames to (the connection)."""

    client_host: str

    @property
    def closed(self) -> bool: ...

    def frame_received(self, frame: bytes | bytearray, charged: int) -> None:
        """A complete frame; ``charged`` pool bytes are already held for it (0: not charged yet)."""

    def wait_for_memory(self, to_grow: bool) -> None:
        """The pool is spent: stop reading until it calls ``pool_has_room``."""

    def abort(self) -> None:
        """Drop the connection."""


class FrameReceiver:
    """The receive side of one connection: the buffers asyncio's BufferedProtocol reads into."""

    def __init__(self, sink: FrameSink, pool: RequestMemoryPool, max_request: int) -> None:
        self._sink = sink
        self._pool = pool
        self.max_request = max_request  # socket.request.max.bytes (lower before SASL authentication)
        self._scratch = bytearray()  # allocated when the first bytes arrive: idle clients hold none
        self._scratch_len = 0
        self._big: bytearray | None = None  # a large frame being received in place
        self._big_pos = 0
        self._big_size = 0  # declared size of the large frame; len(_big) may still be smaller
        self._big_held = 0  # pool bytes charged for the large frame's buffer

    def get_buffer(self) -> memoryview:
        if self._big is not None:
            if self._big_pos == len(self._big):  # not reached while paused for memory; never hand out nothing
                self._grow_big(force=True)
            return memoryview(self._big)[self._big_pos :]
        if not self._scratch:
            self._scratch = bytearray(INITIAL_RECEIVE_BUFFER_BYTES)
        return memoryview(self._scratch)[self._scratch_len :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_pos += nbytes
            if self._big_pos == self._big_size:
                self._finish_big()
            elif self._big_pos == len(self._big):
                self._grow_big(force=False)
            return
        filled = self._scratch_len + nbytes == len(self._scratch)
        self._scratch_len += nbytes
        self._extract_frames()
        if filled and len(self._scratch) < RECEIVE_BUFFER_BYTES and not self._sink.closed:
            # A busy client: read more per system call. The sweep shrinks the buffer once it is quiet.
            grown = bytearray(len(self._scratch) * 2)
            memoryview(grown)[: self._scratch_len] = memoryview(self._scratch)[: self._scratch_len]
            self._scratch = grown

    def resume(self) -> None:
        """The pool has room again: carry on where receiving stopped."""
        if self._big is not None:
            if self._big_pos == len(self._big):
                self._grow_big(force=False)
        elif self._scratch_len >= 4:
            self._extract_frames()

    def shrink(self) -> None:
        """A quiet connection drops its receive buffer; new bytes get a small one."""
        if self._scratch and self._scratch_len == 0:
            self._scratch = bytearray()

    def release(self) -> None:
        """The connection is gone: give back what a partly received frame holds."""
        if self._big_held:
            self._pool.give_back(self._big_held)
            self._big_held = 0
        self._big = None

    def _extract_frames(self) -> None:
        """Cut complete frames out of the receive buffer; switch to in-place mode for big ones."""
        end = self._scratch_len
        pos = 0
        with memoryview(self._scratch) as data:
            while end - pos >= 4:
                (size,) = struct.unpack_from(">i", data, pos)
                if size < 0 or size > self.max_request:
                    # Checked before the body is read, so a hostile length never allocates.
                    log.warning("closing connection from %s: request size %d exceeds socket.request.max.bytes %d",
                                self._sink.client_host, size, self.max_request)
                    self._sink.abort()
                    return
                available = end - pos - 4
                if available >= size:
                    self._sink.frame_received(bytes(data[pos + 4 : pos + 4 + size]), 0)
                    pos += 4 + size
                    continue
                if size > len(self._scratch) // 2:
                    first = size if size <= EAGER_FRAME_BYTES else min(size, max(FIRST_FRAME_CHUNK_BYTES,
                                                                                  2 * available))
                    if not self._pool.try_take(first):
                        # The header stays here until handled requests give memory back.
                        self._sink.wait_for_memory(to_grow=False)
                        break
                    big = bytearray(first)
                    # Through a memoryview: a bytearray slice assignment would copy the source first.
                    memoryview(big)[:available] = data[pos + 4 : end]
                    self._big, self._big_pos, self._big_size, self._big_held = big, available, size, first
                    pos = end
                break
            remaining = end - pos
            if remaining and pos:
                data[:remaining] = data[pos:end]
        self._scratch_len = remaining

    def _grow_big(self, force: bool) -> None:
        """Give a partly received large frame more room: double it, or its full size once half has arrived."""
        assert self._big is not None
        size, have = self._big_size, len(self._big)
        new = min(size, have * 2)
        if new * 2 > size:
            new = size
        if force:
            self._pool.take(new - have)
        elif not self._pool.try_grow(self._sink, new - have):
            self._sink.wait_for_memory(to_grow=True)
            return
        grown = bytearray(new)
        memoryview(grown)[:have] = self._big
        self._big = grown
        self._big_held += new - have

    def _finish_big(self) -> None:
        assert self._big is not None
        frame, held = self._big, self._big_held
        self._big, self._big_held = None, 0
        self._pool.frame_done(self._sink)
        self._sink.frame_received(frame, held)  # the charge moves with the frame
