"""SocketServer: accepts connections, frames requests, answers in order.

Like Kafka, requests on one connection are handled one at a time and answered
in order, so a long-polling fetch only holds up its own connection.

Each connection is an `asyncio.BufferedProtocol`: small frames are parsed out
of one reusable receive buffer, and a large frame (a 1 MiB produce) is received
straight into a buffer of exactly its size, avoiding the stream reader's
buffer-growing copies (the codec then slices the records out once). Responses to consecutive
pipelined Produce requests are gathered into a single socket write, which
roughly halves the per-request cost of unbatched producers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import struct
from typing import TYPE_CHECKING

from strom.broker.request import FileRegion, RawResponse, RequestContext
from strom.protocol import codec
from strom.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from strom.broker.server import KafkaServer

log = logging.getLogger(__name__)

# Regions smaller than this are copied: sendfile's syscall overhead beats the copy.
# Benchmarks set STROM_SENDFILE_MIN_BYTES very high to compare against plain copies.
SENDFILE_MIN_BYTES = int(os.environ.get("STROM_SENDFILE_MIN_BYTES", 64 * 1024))
RECEIVE_BUFFER_BYTES = 256 * 1024
# Stop reading from a client that has this much unprocessed input queued (Kafka mutes it).
MAX_QUEUED_BYTES = 64 * 1024 * 1024
MAX_QUEUED_FRAMES = 256
# Responses that may be gathered into one write: handlers that never wait.
COALESCED_APIS = frozenset({ApiKey.PRODUCE})
FLUSH_BYTES = 1 << 20


class SocketServer:
    def __init__(self, server: KafkaServer, host: str, port: int, max_request_bytes: int) -> None:
        self._server = server
        self._host = host
        self._port = port
        self.max_request_bytes = max_request_bytes
        self._asyncio_server: asyncio.Server | None = None
        self.connections: set[KafkaConnection] = set()

    @property
    def kafka_server(self) -> KafkaServer:
        return self._server

    @property
    def port(self) -> int:
        assert self._asyncio_server is not None
        return self._asyncio_server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._asyncio_server = await loop.create_server(
            lambda: KafkaConnection(self), self._host, self._port, reuse_address=True
        )

    async def stop(self) -> None:
        if self._asyncio_server is not None:
            self._asyncio_server.close()
        tasks = [c.close() for c in list(self.connections)]
        await asyncio.gather(*[t for t in tasks if t is not None], return_exceptions=True)


class _Close(Exception):
    """Raised inside the request loop when the connection must be dropped (Kafka closes it)."""


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, socket_server: SocketServer) -> None:
        self._socket_server = socket_server
        self._max_request = socket_server.max_request_bytes
        self._scratch = bytearray(RECEIVE_BUFFER_BYTES)
        self._scratch_len = 0
        self._big: bytearray | None = None  # a large frame being received in place
        self._big_pos = 0
        self._frames: collections.deque[bytes | bytearray] = collections.deque()
        self._queued_bytes = 0
        self._reading_paused = False
        self._closed = False
        self._transport: asyncio.Transport | None = None
        self._client_host = "unknown"
        self._wakeup = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._task: asyncio.Task[None] | None = None

    # -- asyncio protocol callbacks -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._client_host = peer[0] if peer else "unknown"
        self._socket_server.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._request_loop())

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._socket_server.connections.discard(self)
        self._writable.set()
        self._wakeup.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_pos :]
        return memoryview(self._scratch)[self._scratch_len :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_pos += nbytes
            if self._big_pos == len(self._big):
                self._enqueue(self._big)
                self._big = None
            return
        self._scratch_len += nbytes
        self._extract_frames()

    def eof_received(self) -> bool:
        return False

    # -- framing ------------------------------------------------------------------------
    def _extract_frames(self) -> None:
        """Cut complete frames out of the receive buffer; switch to in-place mode for big ones."""
        end = self._scratch_len
        pos = 0
        with memoryview(self._scratch) as data:
            while end - pos >= 4:
                (size,) = struct.unpack_from(">i", data, pos)
                if size < 0 or size > self._max_request:
                    # Checked before the body is read, so a hostile length never allocates.
                    log.warning("closing connection from %s: request size %d exceeds socket.request.max.bytes %d",
                                self._client_host, size, self._max_request)
                    self._abort()
                    return
                available = end - pos - 4
                if available >= size:
                    self._enqueue(bytes(data[pos + 4 : pos + 4 + size]))
                    pos += 4 + size
                    continue
                if size > len(self._scratch) // 2:
                    big = bytearray(size)
                    big[:available] = data[pos + 4 : end]
                    self._big, self._big_pos = big, available
                    pos = end
                break
            remaining = end - pos
            if remaining and pos:
                data[:remaining] = data[pos:end]
        self._scratch_len = remaining

    def _enqueue(self, frame: bytes | bytearray) -> None:
        self._frames.append(frame)
        self._queued_bytes += len(frame)
        if (self._queued_bytes > MAX_QUEUED_BYTES or len(self._frames) > MAX_QUEUED_FRAMES) and self._transport:
            self._transport.pause_reading()
            self._reading_paused = True
        self._wakeup.set()

    def _abort(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        self._wakeup.set()

    def close(self) -> asyncio.Task[None] | None:
        self._abort()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        return self._task

    # -- request loop ---------------------------------------------------------------------
    async def _request_loop(self) -> None:
        pending: list[bytes] = []  # answers to consecutive Produce requests, written together
        pending_bytes = 0
        try:
            while not self._closed:
                if not self._frames:
                    if pending:
                        await self._write(pending)
                        pending, pending_bytes = [], 0
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                frame = self._frames.popleft()
                self._queued_bytes -= len(frame)
                if self._reading_paused and self._queued_bytes < MAX_QUEUED_BYTES // 2 and self._transport:
                    self._transport.resume_reading()
                    self._reading_paused = False
                view = memoryview(frame)
                header, body_pos = self._parse_header(view)
                coalesce = header.api_key in COALESCED_APIS
                if pending and not coalesce:
                    # This handler may wait (long poll, rebalance): earlier answers must not wait with it.
                    await self._write(pending)
                    pending, pending_bytes = [], 0
                response = await self._dispatch(header, view[body_pos:])
                if response is None:
                    continue
                if isinstance(response, RawResponse):
                    if pending:
                        await self._write(pending)
                        pending, pending_bytes = [], 0
                    await self._send_raw(header, response)
                    continue
                pending.append(response)
                pending_bytes += len(response)
                if pending_bytes >= FLUSH_BYTES or not coalesce:
                    await self._write(pending)
                    pending, pending_bytes = [], 0
        except _Close:
            if pending:
                await self._write(pending)
            self._abort()
        except (ConnectionError, asyncio.CancelledError):
            self._abort()
        except Exception:
            log.exception("connection from %s failed; closing it", self._client_host)
            self._abort()

    def _parse_header(self, view: memoryview) -> tuple[codec.RequestHeader, int]:
        try:
            return codec.parse_request_header(view)
        except codec.MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self._client_host, exc)
            raise _Close from exc

    async def _dispatch(self, header: codec.RequestHeader, body: memoryview) -> bytes | RawResponse | None:
        ctx = RequestContext(header, self._socket_server.kafka_server, self._client_host)
        try:
            return await self._socket_server.kafka_server.apis.handle(ctx, body)
        except codec.MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self._client_host, exc)
            raise _Close from exc

    async def _write(self, chunks: list[bytes]) -> None:
        if self._closed or self._transport is None:
            raise ConnectionError("connection closed")
        self._transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if not self._writable.is_set():
            await self._writable.wait()

    async def _send_raw(self, header: codec.RequestHeader, response: RawResponse) -> None:
        head = codec.response_header(header.correlation_id, header.flexible)
        pending: list[bytes] = [struct.pack(">i", len(head) + response.size), head]
        loop = asyncio.get_running_loop()
        for part in response.parts:
            if isinstance(part, FileRegion):
                if part.size >= SENDFILE_MIN_BYTES:
                    await self._write(pending)
                    pending = []
                    assert self._transport is not None
                    sent = await loop.sendfile(self._transport, part.file, part.position, part.size, fallback=True)
                    if sent != part.size:  # the segment shrank under us: never send a short frame
                        raise ConnectionError("segment truncated during fetch")
                else:
                    data = os.pread(part.file.fileno(), part.size, part.position)
                    if len(data) != part.size:  # the segment shrank under us: never send a short frame
                        raise ConnectionError("segment truncated during fetch")
                    pending.append(data)
            else:
                pending.append(part)
        if pending:
            await self._write(pending)
