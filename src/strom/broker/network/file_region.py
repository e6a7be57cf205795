"""Fetched file regions on the socket: sendfile (zero copy) in plaintext, copied in chunks through TLS."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from strom.broker.request import FileRegion

# Regions smaller than this are copied: sendfile's syscall overhead beats the copy.
# Benchmarks set STROM_SENDFILE_MIN_BYTES very high to compare against plain copies.
SENDFILE_MIN_BYTES = int(os.environ.get("STROM_SENDFILE_MIN_BYTES", 64 * 1024))
# Over TLS a fetched file region is read and written in chunks of this size.
COPY_CHUNK_BYTES = 1 << 20


def read_file_region(part: FileRegion) -> bytes:
    """A small region, copied. Through the file's own locked pread: a bare descriptor number could name
    another file by now if the segment was closed (deleted) on another thread."""
    try:
        data = part.file.pread(part.size, part.position)
    except ValueError:  # closed: the segment was deleted since the fetch read it
        raise ConnectionError("segment deleted during fetch") from None
    if len(data) != part.size:  # the segment shrank under us: never send a short frame
        raise ConnectionError("segment truncated during fetch")
    return data


async def send_file_region(transport: asyncio.Transport, part: FileRegion,
                           write: Callable[[list[bytes]], Awaitable[None]] | None = None) -> None:
    """Send a file region with sendfile (zero copy), or, given the connection's ``write`` (TLS), copied in
    chunks.

    The send may take long (a slow client) while the segment is deleted and its file closed on another
    thread; asyncio's sendfile keeps using the descriptor number it started with, which by then may name
    another file. So the region is sent through a descriptor of our own (dup'd under the file's close
    lock): the segment's bytes stay readable through it until the send is over, whoever closes the
    segment meanwhile.
    """
    try:
        fd = part.file.dup()
    except ValueError:  # closed before the send began: the segment was deleted since the fetch read it
        raise ConnectionError("segment deleted during fetch") from None
    with open(fd, "rb", buffering=0, closefd=True) as file:
        if write is None:
            sent = await asyncio.get_running_loop().sendfile(transport, file, part.position, part.size,
                                                             fallback=True)
        else:
            sent = await _write_copied(write, fd, part)
    if sent != part.size:  # the segment shrank under us: never send a short frame
        raise ConnectionError("segment truncated during fetch")


async def _write_copied(write: Callable[[list[bytes]], Awaitable[None]], fd: int, part: FileRegion) -> int:
    """A file region through TLS: read in chunks at explicit offsets (never through the file position, which
    dup'd descriptors share with the segment) and write each."""
    sent = 0
    while sent < part.size:
        data = os.pread(fd, min(COPY_CHUNK_BYTES, part.size - sent), part.position + sent)
        if not data:
            break
        await write([data])
        sent += len(data)
    return sent
