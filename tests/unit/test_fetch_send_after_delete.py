"""A fetch still sending a segment when retention deletes it sends that segment's bytes, never another file's.

The delete scheduler closes a deleted segment's file after file.delete.delay.ms, on its own thread. A slow
client's sendfile may still be going then; if it kept using the closed descriptor number, the next file
opened with that number would be sent in its place. The send below is held up by a client that does not
read, the segment is deleted and closed, the number is taken by a file of other bytes, then the client
reads everything.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from strom.broker.network import read_file_region, send_file_region
from strom.broker.request import FileRegion
from strom.protocol.record_batch import build_batch
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

VALUE = b"segment-bytes-" * 4096  # 56 KiB per record
SOCKET_BUFFER = 64 * 1024  # far less than the segment: the send waits for the client


def _log(tmp_path: Path) -> Log:
    props = {"segment.bytes": str(4 * 1024 * 1024), "file.delete.delay.ms": "20"}
    log = Log(str(tmp_path / "topic-0"), LogConfig.from_props(props), now_ms=0)
    for i in range(64):  # ~3.5 MiB in the first segment, then a roll
        log.append_as_leader(build_batch([(b"k%d" % i, VALUE, [], 1_000 + i)]), 0)
    log.roll()
    log.append_as_leader(build_batch([(b"k", b"in the next segment", [], 2_000)]), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def _wait(predicate, what: str, timeout: float = 30.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


async def _connected_pair() -> tuple[asyncio.Transport, socket.socket]:
    """A real TCP connection on loopback: the broker's side as a transport, the client's as a socket."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        accepted, _ = server.accept()
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
    accepted.setblocking(False)
    client.setblocking(False)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, sock=accepted)
    return transport, client


async def _receive(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    received = bytearray()
    while len(received) < size:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, size - len(received)), 30)
        if not chunk:
            break
        received += chunk
    return bytes(received)


def test_slow_sendfile_sends_the_deleted_segment_not_a_reused_descriptor(tmp_path: Path) -> None:
    log = _log(tmp_path)
    first = log.segments[0]
    data = log.read(0, first.size, max_offset=log.segments[1].base_offset)
    [fslice] = data.slices
    expected = fslice.read()
    assert len(expected) > 32 * SOCKET_BUFFER
    old_fd = fslice.file.fileno()
    others: list[int] = []

    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        transport, client = await _connected_pair()
        try:
            send = asyncio.create_task(send_file_region(transport, FileRegion(fslice.file, fslice.position,
                                                                              fslice.size)))
            await asyncio.sleep(0.2)  # the send has started and waits: the client reads nothing yet
            assert not send.done()
            log.delete_records(log.segments[1].base_offset)  # retention: the segment goes, its file closes
            await loop.run_in_executor(None, _wait, lambda: fslice.file.closed, "the segment's file to close")
            # Another file takes the closed descriptor number (the lowest free one is handed out first).
            other = tmp_path / "other.bin"
            other.write_bytes(b"\xee" * (len(expected) + 1024))
            for _ in range(64):
                fd = os.open(other, os.O_RDONLY)
                others.append(fd)
                if fd == old_fd:
                    break
            assert old_fd in others, "the closed descriptor number was not reused"
            received = await _receive(loop, client, len(expected))
            await asyncio.wait_for(send, 30)
            return received
        finally:
            transport.close()
            client.close()

    try:
        received = asyncio.run(scenario())
    finally:
        for fd in others:
            os.close(fd)
        log.close()
    assert len(received) == len(expected)
    assert received == expected, "the fetch sent bytes of another file"


def test_regions_of_a_closed_segment_fail_instead_of_reading_another_file(tmp_path: Path) -> None:
    log = _log(tmp_path)
    [fslice] = log.read(0, 1024).slices
    region = FileRegion(fslice.file, fslice.position, fslice.size)
    assert read_file_region(region) == fslice.read()
    log.delete_records(log.segments[1].base_offset)
    _wait(lambda: fslice.file.closed, "the segment's file to close")
    with pytest.raises(ConnectionError):
        read_file_region(region)

    async def send_closed() -> None:
        transport, client = await _connected_pair()
        try:
            await send_file_region(transport, region)
        finally:
            transport.close()
            client.close()

    with pytest.raises(ConnectionError):
        asyncio.run(send_closed())
    log.close()
