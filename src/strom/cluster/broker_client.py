"""BrokerClient: one pipelined Kafka-protocol connection from this broker to another.

The controller sends LeaderAndIsr/UpdateMetadata/StopReplica through it and replica
fetchers send Fetch. Requests are written as soon as they are made (pipelined) and answers
are matched by correlation id; the peer answers one connection's requests in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time

from kafka.protocol.api_message import ApiMessage

from strom.protocol import codec
from strom.protocol.api_keys import ApiKey
from strom.security.client_security import ClientSecurity, sasl_authenticate
from strom.security.sasl import AuthenticationFailed

# A SASL session is renewed (KIP-368 re-authentication on the same connection) after this share of its lifetime.
REAUTHENTICATE_AT = 0.85


class BrokerClient:
    """One TCP connection to `host:port`, opened on first use and again after a failure.

    With `security`, the connection uses TLS and/or authenticates with SASL before the first request, and
    re-authenticates in line when the broker limits the session (connections.max.reauth.ms).
    """

    def __init__(self, host: str, port: int, client_id: str = "strom-broker", request_timeout_ms: int = 30000,
                 connect_timeout_s: float = 5.0, security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_s
        self._client_id = client_id.encode()
        self._correlation = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        # correlation id -> (future for the response body, response header is flexible)
        self._pending: dict[int, tuple[asyncio.Future[bytes], bool]] = {}
        self._connect_lock = asyncio.Lock()
        self.security = security or ClientSecurity()
        self._reauthenticate_at = 0.0  # time.monotonic(); 0 = the session does not expire

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def send(self, request: ApiMessage, version: int) -> ApiMessage:
        """Send `request` at `version` and return the decoded response."""
        if not request.expect_response():
            raise ValueError("requests without a response (acks=0) are not supported")
        body = await self.send_raw(request.API_KEY, version, request.encode(version=version))
        return codec.response_class(request.API_KEY).decode(body, version=version)

    async def send_raw(self, api_key: int, version: int, body: bytes | bytearray | memoryview) -> memoryview:
        """Send an encoded request body; return the response body (after the response header).

        Raises ConnectionError when the connection cannot be made or is lost, and
        asyncio.TimeoutError after request_timeout_ms. The connection is then dropped (failing
        the other pending requests with ConnectionError): the peer answers in order, so
        everything queued behind the stuck request is stuck too.
        """
        writer = await self._connect()
        if self._reauthenticate_at and time.monotonic() >= self._reauthenticate_at:
            writer = await self._reauthenticate(writer)
        return await self._send_on(writer, api_key, version, body)

    async def _send_on(self, writer: asyncio.StreamWriter, api_key: int, version: int,
                       body: bytes | bytearray | memoryview) -> memoryview:
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
            writer.write(struct.pack(">i", len(header) + len(body)) + header + bytes(body))
            await writer.drain()
        except (OSError, RuntimeError) as exc:  # RuntimeError: the transport is already closed
            self._pending.pop(correlation_id, None)
            future.cancel()
            self._drop(writer, ConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}"))
            raise ConnectionError(f"connection to {self.host}:{self.port} lost") from exc
        try:
            return await asyncio.wait_for(future, self.request_timeout_s)
        except TimeoutError:
            self._drop(writer, ConnectionError(f"dropped after a request to {self.host}:{self.port} timed out"))
            raise

    async def close(self) -> None:
        if self._writer is not None:
            self._drop(self._writer, ConnectionError("client closed"))
        if self._reader_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
            self._reader_task = None

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connect_lock:
            if self._writer is None:
                context = self.security.ssl_context
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(self.host, self.port, ssl=context,
                                                server_hostname=self.host if context is not None else None),
                        self.connect_timeout_s)
                except (OSError, TimeoutError) as exc:
                    raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
                self._writer = writer
                self._reader_task = asyncio.create_task(self._read_responses(reader, writer))
                if self.security.uses_sasl:
                    await self._authenticate(writer)
            return self._writer

    async def _authenticate(self, writer: asyncio.StreamWriter) -> None:
        async def send(request: ApiMessage, version: int) -> ApiMessage:
            body = await self._send_on(writer, request.API_KEY, version, request.encode(version=version))
            return codec.response_class(request.API_KEY).decode(body, version=version)

        try:
            lifetime_ms = await asyncio.wait_for(sasl_authenticate(send, self.security), self.request_timeout_s)
        except (AuthenticationFailed, TimeoutError, ConnectionError) as exc:
            self._drop(writer, ConnectionError(f"authentication with {self.host}:{self.port} failed: {exc}"))
            raise ConnectionError(f"authentication with {self.host}:{self.port} failed: {exc}") from exc
        self._reauthenticate_at = time.monotonic() + lifetime_ms / 1000 * REAUTHENTICATE_AT if lifetime_ms else 0.0

    async def _reauthenticate(self, writer: asyncio.StreamWriter) -> asyncio.StreamWriter:
        """Renew the SASL session in line: the broker answers in order, so requests already sent are unaffected."""
        async with self._connect_lock:
            if self._writer is writer and self._reauthenticate_at and time.monotonic() >= self._reauthenticate_at:
                await self._authenticate(writer)
        return await self._connect()

    async def _read_responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error = ConnectionError(f"connection to {self.host}:{self.port} closed")
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                (correlation_id,) = struct.unpack_from(">i", frame)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    error = ConnectionError(f"unexpected correlation id {correlation_id} from {self.host}:{self.port}")
                    break
                future, flexible = entry
                pos = codec.skip_tagged_fields(memoryview(frame), 4) if flexible else 4
                if not future.done():
                    future.set_result(memoryview(frame)[pos:])  # no copy: a follower's fetch answer can be large
        except (OSError, asyncio.IncompleteReadError, codec.MalformedRequest, struct.error) as exc:
            error = ConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}")
        self._drop(writer, error)

    def _drop(self, writer: asyncio.StreamWriter, error: ConnectionError) -> None:
        """Close `writer` (if still current) and fail every request waiting on it."""
        if self._writer is not writer:
            return
        self._writer = None
        writer.close()
        task = self._reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

