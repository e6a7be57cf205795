"""SocketServer: accepts connections, frames requests, answers in order.

Like Kafka, a connection is muted while one of its requests is in flight, so
responses go out in request order without any reordering buffer, and a
long-polling fetch only holds up its own connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from typing import TYPE_CHECKING

from strom.broker.request import FileRegion, RawResponse, RequestContext
from strom.protocol import codec

if TYPE_CHECKING:
    from strom.broker.server import KafkaServer

log = logging.getLogger(__name__)

# Regions smaller than this are copied: sendfile's syscall overhead beats the copy.
# Benchmarks set STROM_SENDFILE_MIN_BYTES very high to compare against plain copies.
SENDFILE_MIN_BYTES = int(os.environ.get("STROM_SENDFILE_MIN_BYTES", 64 * 1024))


class SocketServer:
    def __init__(self, server: KafkaServer, host: str, port: int, max_request_bytes: int) -> None:
        self._server = server
        self._host = host
        self._port = port
        self._max_request_bytes = max_request_bytes
        self._asyncio_server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._asyncio_server is not None
        return self._asyncio_server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._asyncio_server = await asyncio.start_server(
            self._on_connection, self._host, self._port, reuse_address=True, limit=1 << 20
        )

    async def stop(self) -> None:
        if self._asyncio_server is not None:
            self._asyncio_server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host = peer[0] if peer else "unknown"
        try:
            await self._serve(reader, writer, client_host)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("connection from %s failed; closing it", client_host)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_host: str) -> None:
        apis = self._server.apis
        while True:
            size_bytes = await reader.readexactly(4)
            (size,) = struct.unpack(">i", size_bytes)
            if size < 0 or size > self._max_request_bytes:
                # Checked before reading the body, so a hostile length never allocates.
                log.warning("closing connection from %s: request size %d exceeds socket.request.max.bytes %d",
                            client_host, size, self._max_request_bytes)
                return
            frame = memoryview(await reader.readexactly(size))
            try:
                header, body_pos = codec.parse_request_header(frame)
            except codec.MalformedRequest as exc:
                log.warning("closing connection from %s: %s", client_host, exc)
                return
            ctx = RequestContext(header, self._server, client_host)
            try:
                response = await apis.handle(ctx, frame[body_pos:])
            except codec.MalformedRequest as exc:
                log.warning("closing connection from %s: %s", client_host, exc)
                return
            if response is None:  # acks=0
                continue
            if isinstance(response, RawResponse):
                await self._send_raw(writer, header, response)
            else:
                writer.write(response)
                if writer.transport.get_write_buffer_size() > 1 << 20:
                    await writer.drain()

    async def _send_raw(self, writer: asyncio.StreamWriter, header: codec.RequestHeader,
                        response: RawResponse) -> None:
        head = codec.response_header(header.correlation_id, header.flexible)
        pending: list[bytes] = [struct.pack(">i", len(head) + response.size), head]
        loop = asyncio.get_running_loop()
        for part in response.parts:
            if isinstance(part, FileRegion):
                if part.size >= SENDFILE_MIN_BYTES:
                    writer.write(b"".join(pending))
                    pending = []
                    await writer.drain()
                    await loop.sendfile(writer.transport, part.file, part.position, part.size, fallback=True)
                else:
                    pending.append(os.pread(part.file.fileno(), part.size, part.position))
            else:
                pending.append(part)
        writer.write(b"".join(pending))
        await writer.drain()
