"""BrokerClient: one pipelined Kafka-protocol connection from this broker to another.

The controller sends LeaderAndIsr/UpdateMetadata/StopReplica through it, replica fetchers and
the Spark source send Fetch, the Spark sink sends Produce. Requests are written as soon as they
are made (pipelined) and answers are matched by correlation id; the peer answers one
connection's requests in order. Answers are received with a BufferedProtocol straight into one
buffer per frame: a fetch answer of megabytes is copied once from the socket, not three times
as with a StreamReader.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_message import ApiMessage

from strom.protocol import codec
from strom.protocol.api_keys import ApiKey
from strom.security.client_security import ClientSecurity, sasl_authenticate
from strom.security.sasl import AuthenticationFailed

# An answer bigger than this is a corrupt stream, not an answer (Kafka clients cap it too).
MAX_RESPONSE_BYTES = 1 << 30
_STAGING_BYTES = 64 * 1024
_SIZE = struct.Struct(">i")

# A peer that acknowledges nothing at the TCP level for this long is gone (a network partition, a host that
# died without a reset): the connection is dropped and made again rather than left to retransmission
# back-off, which can keep a healed link silent for many seconds more. The peer's kernel, not its
# (possibly busy) process, acknowledges, so a slow broker is not mistaken for a dead one.
DEAD_PEER_TIMEOUT_S = 6.0

# A SASL session is renewed (KIP-368 re-authentication on the same connection) after this share of its lifetime.
REAUTHENTICATE_AT = 0.85


def detect_dead_peer(sock: socket.socket | None, timeout_s: float) -> None:
    """Make the kernel end the connection when the peer stops acknowledging for about `timeout_s`.

    Keepalive probes cover a connection waiting for an answer (nothing of ours unacknowledged);
    TCP_USER_TIMEOUT covers data of ours that is never acknowledged. Either way the socket fails
    with ETIMEDOUT, the pending requests fail, and the next request connects again.
    """
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    probes = 3
    interval = max(1, round(timeout_s / (probes + 1)))
    for option, value in (("TCP_KEEPIDLE", interval), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", probes),
                          ("TCP_USER_TIMEOUT", int(timeout_s * 1000))):
        if hasattr(socket, option):  # Linux has all four; other systems keep their defaults for the rest
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class _Connection(asyncio.BufferedProtocol):
    """One socket's framing: answers are read into a staging buffer, or straight into their own
    frame buffer once their size is known and they do not fit; writes honour flow control."""

    def __init__(self, on_frame: Callable[[_Connection, bytearray], None],
                 on_lost: Callable[[_Connection, Exception | None], None]) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._staging = bytearray(_STAGING_BYTES)
        self._filled = 0  # bytes of _staging holding unparsed data
        self._frame: bytearray | None = None  # a large frame being received directly
        self._frame_pos = 0
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.closed = False

    # -- reading -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._frame_pos:]
        return memoryview(self._staging)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._frame_pos += nbytes
            if self._frame_pos == len(self._frame):
                frame, self._frame = self._frame, None
                self._on_frame(self, frame)
            return
        self._filled += nbytes
        self._parse_staging()

    def _parse_staging(self) -> None:
        view = memoryview(self._staging)
        pos = 0
        try:
            while self._filled - pos >= 4 and not self.closed:
                (size,) = _SIZE.unpack_from(self._staging, pos)
                if size < 4 or size > MAX_RESPONSE_BYTES:
                    raise ConnectionError(f"invalid response size {size}")
                have = self._filled - pos - 4
                if have >= size:
                    self._on_frame(self, bytearray(view[pos + 4 : pos + 4 + size]))
                    pos += 4 + size
                    continue
                if size > len(self._staging) - 4:
                    # Too big for staging: receive the rest straight into the frame's own buffer.
                    frame = bytearray(size)
                    frame[:have] = view[pos + 4 : self._filled]
                    self._frame, self._frame_pos = frame, have
                    pos = self._filled
                break
        finally:
            view.release()
        rest = self._filled - pos
        if rest and pos:
            self._staging[:rest] = self._staging[pos : self._filled]
        self._filled = rest

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost reports it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionError("connection lost"))
        self._drain_waiters.clear()
        self._on_lost(self, exc)

    # -- writing -----------------------------------------------------------------------
    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    def write(self, data: bytes | memoryview) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionError("connection closed")
        self.transport.write(data)

    async def drain(self) -> None:
        if self.closed:
            raise ConnectionError("connection lost")
        if self._paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class BrokerClient:
    """One TCP connection to `host:port`, opened on first use and again after a failure.

    With `security`, the connection uses TLS and/or authenticates with SASL before the first request, and
    re-authenticates in line when the broker limits the session (connections.max.reauth.ms).
    """

    def __init__(self, host: str, port: int, client_id: str = "strom-broker", request_timeout_ms: int = 30000,
                 connect_timeout_s: float = 5.0, security: ClientSecurity | None = None,
                 dead_peer_timeout_s: float | None = DEAD_PEER_TIMEOUT_S) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_s
        self.dead_peer_timeout_s = dead_peer_timeout_s
        self._client_id = client_id.encode()
        self._correlation = itertools.count(1)
        self._conn: _Connection | None = None
        # correlation id -> (future for the response body, response header is flexible)
        self._pending: dict[int, tuple[asyncio.Future[memoryview], bool]] = {}
        self._connect_lock = asyncio.Lock()
        self.security = security or ClientSecurity()
        self._reauthenticate_at = 0.0  # time.monotonic(); 0 = the session does not expire

    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def send(self, request: ApiMessage, version: int) -> ApiMessage:
        """Send `request` at `version` and return the decoded response."""
        if not request.expect_response():
            raise ValueError("requests without a response (acks=0) are not supported")
        body = await self.send_raw(request.API_KEY, version, request.encode(version=version))
        return codec.response_class(request.API_KEY).decode(body, version=version)

    async def send_raw(self, api_key: int, version: int,
                       body: bytes | bytearray | memoryview | list[memoryview | bytes]) -> memoryview:
        """Send an encoded request body; return the response body (after the response header).

        A body given as a list of chunks is joined once with the frame header: a Produce request of
        megabytes is copied once on its way from its batch buffers to the socket, not twice.

        Raises ConnectionError when the connection cannot be made or is lost, and
        asyncio.TimeoutError after request_timeout_ms. The connection is then dropped (failing
        the other pending requests with ConnectionError): the peer answers in order, so
        everything queued behind the stuck request is stuck too.
        """
        conn = await self._connect()
        if self._reauthenticate_at and time.monotonic() >= self._reauthenticate_at:
            conn = await self._reauthenticate(conn)
        return await self._send_on(conn, api_key, version, body)

    async def _send_on(self, conn: _Connection, api_key: int, version: int,
                       body: bytes | bytearray | memoryview | list[memoryview | bytes]) -> memoryview:
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        flexible = codec.is_flexible(api_key, version)
        header = struct.pack(">hhih", api_key, version, correlation_id, len(self._client_id)) + self._client_id
        if flexible:
            header += b"\x00"  # request header v2: no tagged fields
        future: asyncio.Future[memoryview] = asyncio.get_running_loop().create_future()
        # ApiVersions answers with response header v0 whatever the version (KIP-511).
        # The reader removes the entry when the answer arrives, even for an abandoned request.
        self._pending[correlation_id] = (future, flexible and api_key != ApiKey.API_VERSIONS)
        try:
            if isinstance(body, list):
                size = sum(memoryview(chunk).nbytes for chunk in body)
                conn.write(b"".join([struct.pack(">i", len(header) + size), header, *body]))
            else:
                conn.write(struct.pack(">i", len(header) + len(body)) + header + bytes(body))
            await conn.drain()
        except (OSError, RuntimeError) as exc:  # RuntimeError: the transport is already closed
            self._pending.pop(correlation_id, None)
            future.cancel()
            self._drop(conn, ConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}"))
            raise ConnectionError(f"connection to {self.host}:{self.port} lost") from exc
        try:
            return await asyncio.wait_for(future, self.request_timeout_s)
        except TimeoutError:
            self._drop(conn, ConnectionError(f"dropped after a request to {self.host}:{self.port} timed out"))
            raise

    async def close(self) -> None:
        if self._conn is not None:
            self._drop(self._conn, ConnectionError("client closed"))

    async def _connect(self) -> _Connection:
        async with self._connect_lock:
            if self._conn is None:
                context = self.security.ssl_context
                try:
                    _, conn = await asyncio.wait_for(
                        asyncio.get_running_loop().create_connection(
                            lambda: _Connection(self._on_frame, self._on_lost), self.host, self.port, ssl=context,
                            server_hostname=self.host if context is not None else None),
                        self.connect_timeout_s)
                except (OSError, TimeoutError) as exc:
                    raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
                if self.dead_peer_timeout_s is not None and conn.transport is not None:
                    detect_dead_peer(conn.transport.get_extra_info("socket"), self.dead_peer_timeout_s)
                self._conn = conn
                if self.security.uses_sasl:
                    await self._authenticate(conn)
            return self._conn

    async def _authenticate(self, conn: _Connection) -> None:
        async def send(request: ApiMessage, version: int) -> ApiMessage:
            body = await self._send_on(conn, request.API_KEY, version, request.encode(version=version))
            return codec.response_class(request.API_KEY).decode(body, version=version)

        try:
            lifetime_ms = await asyncio.wait_for(sasl_authenticate(send, self.security), self.request_timeout_s)
        except (AuthenticationFailed, TimeoutError, ConnectionError) as exc:
            self._drop(conn, ConnectionError(f"authentication with {self.host}:{self.port} failed: {exc}"))
            raise ConnectionError(f"authentication with {self.host}:{self.port} failed: {exc}") from exc
        self._reauthenticate_at = time.monotonic() + lifetime_ms / 1000 * REAUTHENTICATE_AT if lifetime_ms else 0.0

    async def _reauthenticate(self, conn: _Connection) -> _Connection:
        """Renew the SASL session in line: the broker answers in order, so requests already sent are unaffected."""
        async with self._connect_lock:
            if self._conn is conn and self._reauthenticate_at and time.monotonic() >= self._reauthenticate_at:
                await self._authenticate(conn)
        return await self._connect()

    def _on_frame(self, conn: _Connection, frame: bytearray) -> None:
        if conn is not self._conn:
            return
        try:
            (correlation_id,) = struct.unpack_from(">i", frame)
            entry = self._pending.pop(correlation_id, None)
            if entry is None:
                raise ConnectionError(f"unexpected correlation id {correlation_id} from {self.host}:{self.port}")
            future, flexible = entry
            pos = codec.skip_tagged_fields(memoryview(frame), 4) if flexible else 4
        except (ConnectionError, codec.MalformedRequest, struct.error) as exc:
            self._drop(conn, exc if isinstance(exc, ConnectionError)
                       else ConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}"))
            return
        if not future.done():
            future.set_result(memoryview(frame)[pos:])  # no copy: a follower's fetch answer can be large

    def _on_lost(self, conn: _Connection, exc: Exception | None) -> None:
        reason = f": {exc!r}" if exc is not None else ""
        self._drop(conn, ConnectionError(f"connection to {self.host}:{self.port} closed{reason}"))

    def _drop(self, conn: _Connection, error: ConnectionError) -> None:
        """Close `conn` (if still current) and fail every request waiting on it."""
        if self._conn is not conn:
            return
        self._conn = None
        conn.close()
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()



def request_once(host: str, port: int, request: ApiMessage, version: int, **client_options: Any) -> ApiMessage:
    """One request on a connection of its own, from synchronous code (a tool, the console); the
    connection is closed before this returns. ``client_options`` are BrokerClient's."""

    async def ask() -> ApiMessage:
        client = BrokerClient(host, port, **client_options)
        try:
            return await client.send(request, version)
        finally:
            await client.close()

    return asyncio.run(ask())
