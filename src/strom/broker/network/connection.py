"""KafkaConnection: one client connection, its requests handled one at a time and answered in order.

Like Kafka, requests on one connection are handled one at a time and answered in order, so a
long-polling fetch only holds up its own connection. The bytes come in through a FrameReceiver,
the answers go out through a ResponseQueue; this module holds what lies between: sessions and SASL,
quotas, flow control and request metrics.

Quotas (KIP-219): a request that took its client over a quota is answered at once with
`throttle_time_ms`, then the connection is muted for that long: nothing more is read from it
or handled (answers already on their way still go out), so a client that ignores the throttle
time is held back all the same.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from typing import TYPE_CHECKING

from strom.broker.network.file_region import SENDFILE_MIN_BYTES, read_file_region, send_file_region
from strom.broker.network.framing import FrameReceiver
from strom.broker.network.response_queue import ResponseQueue
from strom.broker.request import (
    CloseConnection,
    DeferredResponse,
    FileRegion,
    LazyRecords,
    RawResponse,
    RequestContext,
)
from strom.broker.session import Session
from strom.config.listeners import EndPoint
from strom.metrics.request_metrics import RequestMetrics
from strom.protocol import codec
from strom.protocol.api_keys import ApiKey
from strom.security.authenticator import SaslServerAuthenticator
from strom.security.principal import USER_TYPE, KafkaPrincipal
from strom.security.ssl_principal_mapper import NoMatchingRule, distinguished_name

if TYPE_CHECKING:
    from strom.broker.network.socket_server import SocketServer

log = logging.getLogger(__name__)

# Stop reading from a client that has this much unprocessed input queued (Kafka mutes it).
MAX_QUEUED_BYTES = 64 * 1024 * 1024
MAX_QUEUED_FRAMES = 256
# Answers a connection may queue behind a waiting one before it stops reading requests.
MAX_DEFERRED_ANSWERS = 64
# What a SASL connection may send before it has authenticated (and, with an expired session, to re-authenticate).
_SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_UNAUTHENTICATED_APIS = _SASL_APIS | {ApiKey.API_VERSIONS}


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


class _Close(Exception):
    """Raised inside the request loop when the connection must be dropped (Kafka closes it)."""


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection: its frames are handled one at a time, its answers written in request order."""

    def __init__(self, socket_server: SocketServer, endpoint: EndPoint) -> None:
        self._socket_server = socket_server
        self.endpoint = endpoint
        self.session = Session.for_connection(endpoint, "unknown")
        self._pool = socket_server.memory_pool
        self._receiver = FrameReceiver(self, self._pool, socket_server.max_request_bytes)
        kafka_server = socket_server.kafka_server
        self._apis = kafka_server.apis
        self._services = kafka_server.services
        # APIs whose answers may be gathered into one write (their handlers answer at once, or defer)
        self._gathered_apis = kafka_server.apis.gathered_apis
        self._auth_deadline: asyncio.TimerHandle | None = None
        # Fetch answers go out with sendfile (zero copy) in plaintext; TLS must encrypt them, so they are copied.
        self._zero_copy = not endpoint.uses_tls
        if endpoint.uses_sasl:
            self.session.authenticator = SaslServerAuthenticator(socket_server.sasl_configs[endpoint.listener_name],
                                                                 self.session)
            # Until authenticated, frames are capped at sasl.server.max.receive.size (as Kafka).
            self._receiver.max_request = min(self._receiver.max_request, socket_server.sasl_max_receive_size)
        self._held = 0  # pool bytes charged for frames queued or being handled
        self._frames: collections.deque[bytes | bytearray] = collections.deque()
        self._metrics = socket_server.request_metrics
        self._received: collections.deque[float] = collections.deque()  # when each queued frame arrived (metrics)
        self._last_frame: bytes | bytearray | None = None
        self._queued_bytes = 0
        self._queue_paused = False  # this client has too much queued
        self._pool_paused = False  # the broker-wide budget is spent
        self._quota_muted = False  # throttled for a quota violation until _muted_until (loop time)
        self._muted_until = 0.0
        self._reading_paused = False
        self._handling = False
        self._last_active = time.monotonic()
        self._closed = False
        self._transport: asyncio.Transport | None = None
        self.client_host: str = "unknown"
        self._wakeup = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._task: asyncio.Task[None] | None = None

    # -- asyncio protocol callbacks -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.client_host = peer[0] if peer else "unknown"
        self.session.client_host = self.client_host
        self.session.client_port = peer[1] if peer else 0
        if self.endpoint.security_protocol == "SSL" and not self._set_certificate_principal(transport):
            transport.close()
            return
        self._socket_server.connections.add(self)
        loop = asyncio.get_running_loop()
        if not self.session.authenticated:
            self._auth_deadline = loop.call_later(self._socket_server.authentication_timeout_s,
                                                  self._authentication_timed_out)
        self._socket_server.connections_created[self.endpoint.listener_name] += 1
        self._task = loop.create_task(self._request_loop())

    def _set_certificate_principal(self, transport: asyncio.Transport) -> bool:
        """SSL listener: a verified client certificate names the principal (User:<mapped DN>), else ANONYMOUS."""
        ssl_object = transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        if not cert:
            return True
        dn = distinguished_name(cert)
        try:
            name = self._socket_server.principal_mappers[self.endpoint.listener_name].name(dn)
        except (NoMatchingRule, ValueError) as exc:
            log.info("closing connection from %s on listener %s: %s", self.client_host, self.endpoint.listener_name,
                     exc)
            return False
        self.session.principal = KafkaPrincipal(USER_TYPE, name)
        return True

    def _authentication_timed_out(self) -> None:
        if not self.session.authenticated and not self._closed:
            log.info("closing connection from %s:%d on listener %s: not authenticated within "
                     "connection.authentication.timeout.ms", self.client_host, self.session.client_port,
                     self.endpoint.listener_name)
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._auth_deadline is not None:
            self._auth_deadline.cancel()
        if self in self._socket_server.connections:
            self._socket_server.connections_closed[self.endpoint.listener_name] += 1
        self._socket_server.connections.discard(self)
        self._pool.forget(self)
        self._receiver.release()
        self._writable.set()
        self._wakeup.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = time.monotonic()
        self._receiver.buffer_updated(nbytes)

    def eof_received(self) -> bool:
        return False

    # -- frames in (FrameSink) ------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def frame_received(self, frame: bytes | bytearray, charged: int) -> None:
        size = len(frame)
        if self._closed:
            if charged:
                self._pool.give_back(charged)
            return
        if charged:
            self._held += charged  # the pool charge of a large frame moves with it
        else:
            self._pool.take(size)
            self._held += size
        self._frames.append(frame)
        if self._metrics is not None:
            self._received.append(self._last_active)  # set when these bytes arrived
        self._queued_bytes += size
        if self._queued_bytes > MAX_QUEUED_BYTES or len(self._frames) > MAX_QUEUED_FRAMES:
            self._queue_paused = True
            self._update_reading()
        if self._pool.exhausted:
            self.wait_for_memory(to_grow=False)
        self._wakeup.set()

    # -- flow control ---------------------------------------------------------------------
    def wait_for_memory(self, to_grow: bool) -> None:
        self._pool_paused = True
        self._pool.wait_for_room(self, to_grow)
        self._update_reading()

    def pool_has_room(self) -> None:
        """Called by the pool when handled requests gave memory back: carry on where reading stopped."""
        if self._closed:
            return
        self._pool_paused = False
        self._receiver.resume()
        self._update_reading()

    def _update_reading(self) -> None:
        paused = self._queue_paused or self._pool_paused or self._quota_muted
        if paused == self._reading_paused or self._transport is None or self._closed:
            return
        self._reading_paused = paused
        if paused:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    def _release(self, nbytes: int) -> None:
        nbytes = min(nbytes, self._held)
        if nbytes:
            self._held -= nbytes
            self._pool.give_back(nbytes)

    def idle_seconds(self, now: float) -> float | None:
        """Seconds without bytes received or a request in flight; None when busy or waiting on the broker."""
        if self._handling or self._frames or self._pool_paused or self._closed:
            return None
        return now - self._last_active

    def shrink_buffers(self) -> None:
        """A quiet connection drops its receive buffer and last request; new bytes get a small buffer."""
        self._last_frame = None
        self._receiver.shrink()

    def abort(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        self._wakeup.set()

    def close(self) -> asyncio.Task[None] | None:
        self.abort()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        return self._task

    # -- request loop ---------------------------------------------------------------------
    async def _request_loop(self) -> None:
        answers = ResponseQueue(self._write, self._answer_done)
        queued = answers.queued
        try:
            while not self._closed:
                if queued and answers.head_ready:
                    await answers.write_waiting(wait=False)
                if self._quota_muted:
                    await answers.flush()
                    await self._hold_throttled(answers)
                elif self._frames:
                    await self._handle_next(answers)
                else:
                    await answers.flush()
                    await self._wait_for_work(answers)
        except _Close:
            await answers.flush()
            self.abort()
        except (ConnectionError, asyncio.CancelledError):
            self.abort()
        except Exception:
            log.exception("connection from %s failed; closing it", self.client_host)
            self.abort()
        finally:
            self._frames.clear()
            self._received.clear()
            self._last_frame = None
            self._queued_bytes = 0
            self._release(self._held)

    async def _wait_for_work(self, answers: ResponseQueue) -> None:
        """Nothing to handle: idle once every answer is out; sleep until a frame arrives or an answer is ready."""
        if self._handling and not answers.waiting:
            self._handling = False
            self._last_active = time.monotonic()
        self._wakeup.clear()
        if not self._frames and not answers.head_ready:
            await self._wakeup.wait()

    def _next_frame(self) -> tuple[bytes | bytearray, float]:
        """The oldest queued frame and when it arrived (metrics); reading resumes once the queue is short."""
        frame = self._frames.popleft()
        received = self._received.popleft() if self._metrics is not None else 0.0
        # Held until the next request replaces it, as before: freeing a large frame as soon as it is
        # handled lets malloc trim the heap and fault the pages in again for the next one.
        # The sweep drops it once the connection is quiet.
        self._last_frame = frame
        self._handling = True
        self._queued_bytes -= len(frame)
        if (self._queue_paused and self._queued_bytes < MAX_QUEUED_BYTES // 2
                and len(self._frames) < MAX_QUEUED_FRAMES // 2):
            self._queue_paused = False
            self._update_reading()
        return frame, received

    async def _handle_next(self, answers: ResponseQueue) -> None:
        """Handle the oldest queued request; its answer is queued or written in request order."""
        frame, received = self._next_frame()
        authenticator = self.session.authenticator
        if authenticator is not None and authenticator.raw_tokens:
            try:
                await self._raw_sasl_token(frame)  # after SaslHandshake v0: a bare token, no header
            finally:
                self._release(len(frame))
            return
        view = memoryview(frame)
        header, body_pos = self._parse_header(view)
        gather = header.api_key in self._gathered_apis
        if not gather:
            await answers.drain()  # this handler may wait (long poll, rebalance): earlier answers must not
        elif len(answers.queued) >= MAX_DEFERRED_ANSWERS:
            await answers.write_waiting(wait=True)  # bound what a pipelining client holds
        metrics = self._metrics
        started = time.monotonic() if metrics is not None else 0.0
        try:
            ctx = self._request_context(header)
            response = await self._apis.handle(ctx, view[body_pos:])
        except codec.MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self.client_host, exc)
            raise _Close from exc
        except CloseConnection as exc:
            raise _Close from exc
        finally:
            self._release(len(frame))  # handled: its bytes no longer count against the broker budget
        if header.api_key in _SASL_APIS and self.session.authenticator is not None:
            await self._after_sasl_request(response)
        if ctx.throttle_time_ms:
            self._throttle(ctx.throttle_time_ms)
        local_done = 0.0
        if metrics is not None:
            local_done = time.monotonic()
            self._measure_handed_over(metrics, header, response, gather, received, started, local_done)
        if response is None:
            return
        if isinstance(response, RawResponse):
            await self._answer_raw(header, response, answers, received, started, local_done)
        elif answers.add(response, gather):
            await answers.flush()
            if metrics is not None and not gather:
                metrics.record(header.api_key, header.api_version, received, started, local_done, 0.0,
                               time.monotonic())

    async def _answer_raw(self, header: codec.RequestHeader, response: RawResponse, answers: ResponseQueue,
                          received: float, started: float, local_done: float) -> None:
        if isinstance(response, DeferredResponse):
            # Phase 1 is done, phase 2 waits: send what is ready, keep reading requests.
            await answers.add_waiting(response.ready)
            return
        await answers.flush()
        await self._send_raw(header, response)
        if self._metrics is not None:
            self._metrics.record_raw(header.api_key, header.api_version, received, started, local_done, response,
                                     time.monotonic())

    def _throttle(self, throttle_ms: int) -> None:
        """Mute the connection for a quota violation: stop reading and handling until the time is up."""
        until = asyncio.get_running_loop().time() + throttle_ms / 1000
        self._muted_until = max(self._muted_until, until)
        if not self._quota_muted:
            self._quota_muted = True
            self._update_reading()

    async def _hold_throttled(self, answers: ResponseQueue) -> None:
        """Wait out the throttle time, still writing answers that complete meanwhile (acks=all produces)."""
        loop = asyncio.get_running_loop()
        while not self._closed and (remaining := self._muted_until - loop.time()) > 0:
            if answers.head_ready:
                await answers.write_waiting(wait=False)
                continue
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                pass
        self._quota_muted = False
        self._update_reading()

    def _answer_done(self, _: asyncio.Future[bytes]) -> None:
        self._wakeup.set()

    @staticmethod
    def _measure_handed_over(metrics: RequestMetrics, header: codec.RequestHeader,
                             response: bytes | RawResponse | None, gather: bool, received: float,
                             started: float, local_done: float) -> None:
        """Request metrics of answers not sent right away: none (acks=0), gathered (their shared write is
        not split among them) or deferred (remote time = until the answer is ready).
        Answers written at once are measured after their write, by the request loop."""
        api_key, version = header.api_key, header.api_version
        if response is None or (gather and not isinstance(response, RawResponse)):
            metrics.record_quick(api_key, version, received, started, local_done)
        elif isinstance(response, DeferredResponse):
            def ready(_: asyncio.Future[bytes]) -> None:
                now = time.monotonic()
                metrics.record(api_key, version, received, started, local_done, now - local_done, now)

            response.ready.add_done_callback(ready)

    def _parse_header(self, view: memoryview) -> tuple[codec.RequestHeader, int]:
        try:
            return codec.parse_request_header(view)
        except codec.MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self.client_host, exc)
            raise _Close from exc

    def _request_context(self, header: codec.RequestHeader) -> RequestContext:
        """What a handler gets with its request, once the session may send it."""
        session = self.session
        if not session.authenticated or session.expires_at:
            self._check_session(header)
        return RequestContext(header, self._services, self.client_host, session)

    async def _after_sasl_request(self, response: bytes | RawResponse | None) -> None:
        """Count the outcome of a SaslHandshake/SaslAuthenticate; a failed authentication closes the
        connection once its answer has gone out."""
        authenticator = self.session.authenticator
        assert authenticator is not None
        self._count_sasl_outcome()
        self._after_sasl_step()
        if authenticator.must_close:
            if response is not None and not isinstance(response, RawResponse):
                await self._write([response])  # the failure reaches the client, then the connection closes
            raise _Close

    def _check_session(self, header: codec.RequestHeader) -> None:
        """A SASL connection before authentication, or with an expired session (rare path)."""
        session = self.session
        if not session.authenticated:
            if header.api_key in _UNAUTHENTICATED_APIS:
                return
            log.info("closing connection from %s:%d on listener %s: %s request before authenticating",
                     self.client_host, session.client_port, session.listener_name, _api_name(header.api_key))
            raise _Close
        if header.api_key in _SASL_APIS or time.monotonic() < session.expires_at:
            return
        log.info("closing connection from %s:%d on listener %s: the session of %s expired "
                 "(connections.max.reauth.ms) and the client did not re-authenticate", self.client_host,
                 session.client_port, session.listener_name, session.principal)
        raise _Close

    def _count_sasl_outcome(self) -> None:
        """Successful and failed authentications per listener, for the metrics endpoint."""
        authenticator = self.session.authenticator
        if authenticator is None or authenticator.outcome is None:
            return
        counts = (self._socket_server.successful_authentications if authenticator.outcome
                  else self._socket_server.failed_authentications)
        counts[self.endpoint.listener_name] += 1
        authenticator.outcome = None

    def _after_sasl_step(self) -> None:
        """Authenticated: lift the pre-authentication frame cap and the authentication deadline."""
        if self.session.authenticated:
            self._receiver.max_request = self._socket_server.max_request_bytes
            if self._auth_deadline is not None:
                self._auth_deadline.cancel()
                self._auth_deadline = None

    async def _raw_sasl_token(self, frame: bytes | bytearray) -> None:
        """A bare SASL token (after SaslHandshake v0); the answer is a bare size-prefixed token. A failure
        closes the connection without an answer: this format cannot carry one."""
        authenticator = self.session.authenticator
        assert authenticator is not None
        result = await authenticator.authenticate(bytes(frame), 0)
        self._count_sasl_outcome()
        if result.error_code:
            raise _Close
        self._after_sasl_step()
        await self._write([struct.pack(">i", len(result.auth_bytes)) + result.auth_bytes])

    async def _write(self, chunks: list[bytes]) -> None:
        if self._closed or self._transport is None:
            raise ConnectionError("connection closed")
        self._transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if not self._writable.is_set():
            await self._writable.wait()

    async def _send_raw(self, header: codec.RequestHeader, response: RawResponse) -> None:
        head = codec.response_header(header.correlation_id, header.flexible)
        pending: list[bytes] = [struct.pack(">i", len(head) + response.size), head]
        for part in response.parts:
            if isinstance(part, FileRegion):
                if part.size >= SENDFILE_MIN_BYTES:
                    await self._write(pending)
                    pending = []
                    assert self._transport is not None
                    await send_file_region(self._transport, part, None if self._zero_copy else self._write)
                else:
                    pending.append(read_file_region(part))
            elif isinstance(part, LazyRecords):
                await self._write(pending)
                pending = []
                await self._send_lazy(part)
            else:
                pending.append(part)
        if pending:
            await self._write(pending)

    async def _send_lazy(self, part: LazyRecords) -> None:
        """Pieces as they are made, each after the socket took the previous one (the write waits while the
        transport's buffer is full): memory holds about one piece, not the whole records."""
        sent = 0
        while (piece := await part.next_piece()) is not None:
            if piece:
                await self._write([piece])
                sent += len(piece)
        if sent != part.size:  # never send a short frame
            raise ConnectionError(f"lazy records gave {sent} bytes of {part.size}")

