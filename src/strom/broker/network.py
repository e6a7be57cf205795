"""SocketServer: accepts connections, frames requests, answers in order.

Like Kafka, requests on one connection are handled one at a time and answered
in order, so a long-polling fetch only holds up its own connection.

Each connection is an `asyncio.BufferedProtocol`: small frames are parsed out
of one reusable receive buffer, and a large frame (a 1 MiB produce) is received
straight into a buffer of exactly its size, avoiding the stream reader's
buffer-growing copies (the codec then slices the records out once). Responses to consecutive
pipelined Produce requests are gathered into a single socket write, which
roughly halves the per-request cost of unbatched producers.

Resource limits: the receive buffer of a connection starts small and grows only while the
client keeps it full; a frame larger than EAGER_FRAME_BYTES gets memory as its bytes arrive
(so a declared-but-unsent 100 MiB frame costs little); all received-but-unhandled request
bytes are charged to one broker-wide RequestMemoryPool (`queued.max.request.bytes`);
connections idle for `connections.max.idle.ms` are closed by one periodic sweep; and when
the process runs out of file descriptors, accepting pauses with back-off instead of spinning.

Quotas (KIP-219): a request that took its client over a quota is answered at once with
`throttle_time_ms`, then the connection is muted for that long: nothing more is read from it
or handled (answers already on their way still go out), so a client that ignores the throttle
time is held back all the same.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from strom.broker.request import CloseConnection, DeferredResponse, FileRegion, RawResponse, RequestContext
from strom.broker.session import Session
from strom.config import ConfigError
from strom.config.listeners import EndPoint
from strom.metrics.request_metrics import RequestMetrics
from strom.protocol import codec
from strom.protocol.api_keys import ApiKey
from strom.security.authenticator import SaslListenerConfig, SaslServerAuthenticator
from strom.security.credential_cache import CredentialCache
from strom.security.listener_security import sasl_listener_config
from strom.security.login_throttle import LoginThrottle
from strom.security.principal import USER_TYPE, KafkaPrincipal
from strom.security.ssl_factory import server_context
from strom.security.ssl_principal_mapper import NoMatchingRule, SslPrincipalMapper, distinguished_name

if TYPE_CHECKING:
    from strom.broker.server import KafkaServer

log = logging.getLogger(__name__)

# Regions smaller than this are copied: sendfile's syscall overhead beats the copy.
# Benchmarks set STROM_SENDFILE_MIN_BYTES very high to compare against plain copies.
SENDFILE_MIN_BYTES = int(os.environ.get("STROM_SENDFILE_MIN_BYTES", 64 * 1024))
# A connection's receive buffer starts at this size when bytes first arrive, doubles (up to the maximum)
# while reads fill it, and is dropped again once the connection has been quiet for a sweep interval.
INITIAL_RECEIVE_BUFFER_BYTES = 16 * 1024
RECEIVE_BUFFER_BYTES = 256 * 1024
# Frames up to this size get their whole buffer when the header arrives (a 1 MiB produce is received
# in place with no extra copy); larger ones start at FIRST_FRAME_CHUNK_BYTES and double as bytes arrive.
EAGER_FRAME_BYTES = 2 * 1024 * 1024
FIRST_FRAME_CHUNK_BYTES = 64 * 1024
# Stop reading from a client that has this much unprocessed input queued (Kafka mutes it).
MAX_QUEUED_BYTES = 64 * 1024 * 1024
MAX_QUEUED_FRAMES = 256
# Responses that may be gathered into one write. Their handlers answer at once, or (acks=all) return a
# DeferredResponse: phase 1 is done and the connection goes on reading while phase 2 waits.
COALESCED_APIS = frozenset({ApiKey.PRODUCE})
# Answers a connection may queue behind a waiting Produce before it stops reading requests.
MAX_DEFERRED_ANSWERS = 64
FLUSH_BYTES = 1 << 20
LISTEN_BACKLOG = 128
MAX_ACCEPTS_PER_WAKEUP = 64
# Out of file descriptors: accepting pauses for a back-off doubling from min to max;
# one log line per interval at most.
ACCEPT_BACKOFF_MIN_S = 0.05
ACCEPT_BACKOFF_MAX_S = 1.0
ACCEPT_ERROR_LOG_INTERVAL_S = 10.0
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# The idle sweep runs this often at most (and at least a few times per connections.max.idle.ms).
MAX_SWEEP_INTERVAL_S = 30.0
# What a SASL connection may send before it has authenticated (and, with an expired session, to re-authenticate).
_SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_UNAUTHENTICATED_APIS = _SASL_APIS | {ApiKey.API_VERSIONS}
# Over TLS a fetched file region is read and written in chunks of this size.
COPY_CHUNK_BYTES = 1 << 20
# Failed TLS handshakes (a plaintext client on a TLS port, scanners) are summed up in one line per interval.
TLS_FAILURE_LOG_INTERVAL_S = 60.0


def _answer_ready(answer: bytes | asyncio.Future[bytes]) -> bool:
    return not isinstance(answer, asyncio.Future) or answer.done()


class RequestMemoryPool:
    """Broker-wide budget of request bytes received but not yet handled (`queued.max.request.bytes`).

    Like Kafka's non-strict memory pool, an allocation is granted while anything is left, so a
    single frame larger than the whole budget still gets through; once the budget is spent, a
    connection that needs more stops reading its socket until handled requests give bytes back.
    Partly received frames hold memory while waiting for more, so to rule out a standstill where
    every holder waits for the others, one of them at a time (the grower) may go over budget to
    finish its frame.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity if capacity > 0 else None
        self.used = 0
        self.grower: KafkaConnection | None = None
        # Ordered sets, woken oldest first: connections waiting to start a frame or read, and to grow one.
        self._waiting: dict[KafkaConnection, None] = {}
        self._grow_waiting: dict[KafkaConnection, None] = {}

    @property
    def exhausted(self) -> bool:
        return self.capacity is not None and self.used >= self.capacity

    def try_take(self, nbytes: int) -> bool:
        if self.exhausted:
            return False
        self.used += nbytes
        return True

    def try_grow(self, conn: KafkaConnection, nbytes: int) -> bool:
        """Room for a partly received frame: from the budget, or over it as the single grower."""
        if self.try_take(nbytes):
            return True
        if self.grower is None or self.grower is conn:
            self.grower = conn
            self.used += nbytes
            return True
        return False

    def take(self, nbytes: int) -> None:
        """Charge bytes that were already received (they exist whether or not there is room)."""
        self.used += nbytes

    def give_back(self, nbytes: int) -> None:
        self.used -= nbytes
        if (self._waiting or self._grow_waiting) and not self.exhausted:
            waiting = [*self._grow_waiting, *self._waiting]
            self._waiting.clear()
            self._grow_waiting.clear()
            for conn in waiting:
                conn.pool_has_room()

    def wait_for_room(self, conn: KafkaConnection, to_grow: bool) -> None:
        (self._grow_waiting if to_grow else self._waiting)[conn] = None

    def frame_done(self, conn: KafkaConnection) -> None:
        """A partly received frame completed or was dropped: hand the grower's role on."""
        if self.grower is not conn:
            return
        self.grower = None
        if self._grow_waiting:
            nxt = next(iter(self._grow_waiting))
            del self._grow_waiting[nxt]
            nxt.pool_has_room()

    def forget(self, conn: KafkaConnection) -> None:
        self._waiting.pop(conn, None)
        self._grow_waiting.pop(conn, None)
        self.frame_done(conn)


class SocketServer:
    """Binds every listener; a connection remembers which one it came in on (its EndPoint)."""

    def __init__(self, server: KafkaServer, endpoints: list[EndPoint], max_request_bytes: int) -> None:
        self._server = server
        self.endpoints = endpoints
        self.max_request_bytes = max_request_bytes
        cfg = server.config
        self.max_idle_ms: int = cfg.get("connections.max.idle.ms")
        self.memory_pool = RequestMemoryPool(cfg.get("queued.max.request.bytes"))
        self._sockets: list[socket.socket] = []
        self._socket_endpoints: dict[socket.socket, EndPoint] = {}
        self.bound_ports: dict[str, int] = {}  # listener name -> port actually bound (port 0 = any)
        self._accept_paused_until = 0.0
        self._accept_backoff = ACCEPT_BACKOFF_MIN_S
        self._accept_errors = 0  # failures since the last log line
        self._accept_error_logged_at = float("-inf")
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[KafkaConnection] = set()
        # -- security: one login throttle for the broker, SASL settings per listener
        self.login_throttle = LoginThrottle(cfg.get("connection.failed.authentication.delay.ms"))
        self.authentication_timeout_s: float = cfg.get("connection.authentication.timeout.ms") / 1000
        self.sasl_max_receive_size: int = cfg.get("sasl.server.max.receive.size")
        self.sasl_configs: dict[str, SaslListenerConfig] = {}
        if any(ep.uses_sasl for ep in endpoints):
            credentials = CredentialCache(server.metadata)
            self.sasl_configs = {ep.listener_name: sasl_listener_config(cfg, ep, credentials, self.login_throttle)
                                 for ep in endpoints if ep.uses_sasl}
        self.ssl_contexts: dict[str, ssl.SSLContext] = {ep.listener_name: server_context(cfg, ep.listener_name)
                                                        for ep in endpoints if ep.uses_tls}
        self.principal_mappers: dict[str, SslPrincipalMapper] = {}
        for ep in endpoints:
            if ep.security_protocol == "SSL":
                rules = cfg.listener_config(ep.listener_name, "ssl.principal.mapping.rules")
                try:
                    self.principal_mappers[ep.listener_name] = SslPrincipalMapper(rules)
                except ValueError as exc:
                    raise ConfigError(f"listener {ep.listener_name}: {exc}") from None
        self.tls_handshake_failures = 0  # since start (a metrics hook reads it)
        self._tls_failures_unlogged = 0
        self._tls_failure_logged_at = float("-inf")
        # Metrics (read at scrape time). request_metrics is None when the metrics endpoint is off.
        # Per listener name: connections opened and closed, and SASL authentications (the SASL code counts them).
        self.request_metrics: RequestMetrics | None = server.request_metrics
        self.connections_created: collections.Counter[str] = collections.Counter()
        self.connections_closed: collections.Counter[str] = collections.Counter()
        self.failed_authentications: collections.Counter[str] = collections.Counter()
        self.successful_authentications: collections.Counter[str] = collections.Counter()

    @property
    def kafka_server(self) -> KafkaServer:
        return self._server

    @property
    def port(self) -> int:
        assert self._sockets
        return self.bound_ports[self.endpoints[0].listener_name]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            for endpoint in self.endpoints:
                await self._bind(endpoint)
        except OSError:
            self._close_listeners()
            raise
        for sock in self._sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)
        self._sweeper = loop.create_task(self._sweep_loop(), name="connection-sweeper")

    async def _bind(self, endpoint: EndPoint) -> None:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(endpoint.host or None, endpoint.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        bound = 0
        for family, type_, proto, _, addr in dict.fromkeys(infos):
            if bound and endpoint.port == 0:
                addr = (addr[0], bound, *addr[2:])  # every address of a port-0 listener on the same port
            try:
                sock = socket.socket(family, type_, proto)
            except OSError:
                continue  # an address family this host lacks (as asyncio's create_server does)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(addr)
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                raise OSError(exc.errno, f"cannot listen on {endpoint.connection_string()}: {exc.strerror}") from exc
            self._sockets.append(sock)
            self._socket_endpoints[sock] = endpoint
            bound = sock.getsockname()[1]
        if not bound:
            raise OSError(f"no usable address to listen on for {endpoint.connection_string()}")
        self.bound_ports[endpoint.listener_name] = bound

    def _close_listeners(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
        self._socket_endpoints.clear()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._close_listeners()
        tasks = [c.close() for c in list(self.connections)]
        await asyncio.gather(*[t for t in tasks if t is not None], return_exceptions=True)

    # -- accepting ----------------------------------------------------------------------
    def _accept(self, sock: socket.socket) -> None:
        """Accept what is queued. Our own loop because asyncio's logs every EMFILE and keeps retrying."""
        loop = asyncio.get_running_loop()
        for _ in range(MAX_ACCEPTS_PER_WAKEUP):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRNOS:
                    log.warning("accepting a connection failed: %s", exc)
                    return
                self._pause_accepting(exc)
                return
            self._accept_backoff = ACCEPT_BACKOFF_MIN_S
            conn.setblocking(False)
            loop.create_task(self._attach(conn, self._socket_endpoints[sock]))

    async def _attach(self, conn: socket.socket, endpoint: EndPoint) -> None:
        """Hand the socket to a KafkaConnection; on a TLS listener once the handshake has succeeded."""
        context = self.ssl_contexts.get(endpoint.listener_name)
        loop = asyncio.get_running_loop()
        try:
            if context is None:
                await loop.connect_accepted_socket(lambda: KafkaConnection(self, endpoint), sock=conn)
            else:
                await loop.connect_accepted_socket(lambda: KafkaConnection(self, endpoint), sock=conn, ssl=context,
                                                   ssl_handshake_timeout=self.authentication_timeout_s)
        except OSError as exc:  # ssl.SSLError and a handshake timeout are OSErrors too
            conn.close()
            if context is None:
                log.warning("setting up an accepted connection failed: %s", exc)
            else:
                self._tls_handshake_failed(endpoint, exc)

    def _tls_handshake_failed(self, endpoint: EndPoint, exc: OSError) -> None:
        """No stack trace and no line per attempt: a plaintext client retrying would flood the log."""
        self.tls_handshake_failures += 1
        self._tls_failures_unlogged += 1
        log.debug("TLS handshake on listener %s failed: %s", endpoint.listener_name, exc)
        now = time.monotonic()
        if now - self._tls_failure_logged_at >= TLS_FAILURE_LOG_INTERVAL_S:
            log.info("TLS handshake on listener %s failed: %s (%d failed handshake(s) since the last report; "
                     "a plaintext client on a TLS port looks like this)", endpoint.listener_name,
                     getattr(exc, "reason", None) or exc, self._tls_failures_unlogged)
            self._tls_failures_unlogged = 0
            self._tls_failure_logged_at = now

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of descriptors (or memory): stop accepting for a while; existing connections keep being served.

        Pending clients wait in the listen backlog. One log line per interval says how often it happened.
        """
        loop = asyncio.get_running_loop()
        self._accept_errors += 1
        now = time.monotonic()
        if now - self._accept_error_logged_at >= ACCEPT_ERROR_LOG_INTERVAL_S:
            log.error("cannot accept connections: %s (failed %d time(s) since the last report; "
                      "%d connections open); retrying with back-off up to %.1f s. "
                      "Raise `ulimit -n` or use fewer connections.",
                      exc.strerror, self._accept_errors, len(self.connections), ACCEPT_BACKOFF_MAX_S)
            self._accept_errors = 0
            self._accept_error_logged_at = now
        for sock in self._sockets:
            loop.remove_reader(sock.fileno())
        loop.call_later(self._accept_backoff, self._resume_accepting)
        self._accept_backoff = min(self._accept_backoff * 2, ACCEPT_BACKOFF_MAX_S)

    def _resume_accepting(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            if sock.fileno() >= 0:
                loop.add_reader(sock.fileno(), self._accept, sock)

    # -- idle connections -----------------------------------------------------------------
    def sweep_interval_s(self) -> float:
        if self.max_idle_ms <= 0:
            return MAX_SWEEP_INTERVAL_S
        return min(max(self.max_idle_ms / 4000, 0.01), MAX_SWEEP_INTERVAL_S)

    async def _sweep_loop(self) -> None:
        interval = self.sweep_interval_s()
        while True:
            await asyncio.sleep(interval)
            try:
                self.sweep(interval)
            except Exception:
                log.exception("connection sweep failed")

    def sweep(self, interval_s: float) -> None:
        """Close connections idle beyond connections.max.idle.ms; give quiet ones their small buffer back."""
        now = time.monotonic()
        max_idle_s = self.max_idle_ms / 1000 if self.max_idle_ms > 0 else None
        closed = 0
        for conn in list(self.connections):
            quiet_s = conn.idle_seconds(now)
            if quiet_s is None:
                continue
            if max_idle_s is not None and quiet_s > max_idle_s:
                log.debug("closing connection from %s: idle for %.1f s", conn.client_host, quiet_s)
                conn.close()
                closed += 1
            elif quiet_s >= interval_s:
                conn.shrink_buffers()
        if closed:
            log.info("closed %d connection(s) idle for longer than connections.max.idle.ms=%d",
                     closed, self.max_idle_ms)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


class _Close(Exception):
    """Raised inside the request loop when the connection must be dropped (Kafka closes it)."""


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, socket_server: SocketServer, endpoint: EndPoint) -> None:
        self._socket_server = socket_server
        self.endpoint = endpoint
        self.session = Session.for_connection(endpoint, "unknown")
        self._pool = socket_server.memory_pool
        self._max_request = socket_server.max_request_bytes
        self._auth_deadline: asyncio.TimerHandle | None = None
        # Fetch answers go out with sendfile (zero copy) in plaintext; TLS must encrypt them, so they are copied.
        self._zero_copy = not endpoint.uses_tls
        if endpoint.uses_sasl:
            self.session.authenticator = SaslServerAuthenticator(socket_server.sasl_configs[endpoint.listener_name],
                                                                 self.session)
            # Until authenticated, frames are capped at sasl.server.max.receive.size (as Kafka).
            self._max_request = min(self._max_request, socket_server.sasl_max_receive_size)
        self._scratch = bytearray()  # allocated when the first bytes arrive: idle clients hold none
        self._scratch_len = 0
        self._big: bytearray | None = None  # a large frame being received in place
        self._big_pos = 0
        self._big_size = 0  # declared size of the large frame; len(_big) may still be smaller
        self._big_held = 0  # pool bytes charged for the large frame's buffer
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
        self.client_host = "unknown"
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
            self._abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._auth_deadline is not None:
            self._auth_deadline.cancel()
        if self in self._socket_server.connections:
            self._socket_server.connections_closed[self.endpoint.listener_name] += 1
        self._socket_server.connections.discard(self)
        self._pool.forget(self)
        if self._big_held:
            self._pool.give_back(self._big_held)
            self._big_held = 0
        self._big = None
        self._writable.set()
        self._wakeup.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            if self._big_pos == len(self._big):  # not reached while paused for memory; never hand out nothing
                self._grow_big(force=True)
            return memoryview(self._big)[self._big_pos :]
        if not self._scratch:
            self._scratch = bytearray(INITIAL_RECEIVE_BUFFER_BYTES)
        return memoryview(self._scratch)[self._scratch_len :]

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = time.monotonic()
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
        if filled and len(self._scratch) < RECEIVE_BUFFER_BYTES and not self._closed:
            # A busy client: read more per system call. The sweep shrinks the buffer once it is quiet.
            grown = bytearray(len(self._scratch) * 2)
            memoryview(grown)[: self._scratch_len] = memoryview(self._scratch)[: self._scratch_len]
            self._scratch = grown

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
                                self.client_host, size, self._max_request)
                    self._abort()
                    return
                available = end - pos - 4
                if available >= size:
                    self._enqueue(bytes(data[pos + 4 : pos + 4 + size]), charge=True)
                    pos += 4 + size
                    continue
                if size > len(self._scratch) // 2:
                    first = size if size <= EAGER_FRAME_BYTES else min(size, max(FIRST_FRAME_CHUNK_BYTES,
                                                                                  2 * available))
                    if not self._pool.try_take(first):
                        # The header stays here until handled requests give memory back.
                        self._wait_for_memory(to_grow=False)
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
        elif not self._pool.try_grow(self, new - have):
            self._wait_for_memory(to_grow=True)
            return
        grown = bytearray(new)
        memoryview(grown)[:have] = self._big
        self._big = grown
        self._big_held += new - have

    def _finish_big(self) -> None:
        assert self._big is not None
        frame, held = self._big, self._big_held
        self._big, self._big_held = None, 0
        self._held += held  # the charge moves with the frame
        self._pool.frame_done(self)
        self._enqueue(frame, charge=False)

    def _enqueue(self, frame: bytes | bytearray, charge: bool) -> None:
        if self._closed:
            if not charge:
                self._pool.give_back(len(frame))
            return
        if charge:
            self._pool.take(len(frame))
            self._held += len(frame)
        self._frames.append(frame)
        if self._metrics is not None:
            self._received.append(self._last_active)  # set when these bytes arrived
        self._queued_bytes += len(frame)
        if self._queued_bytes > MAX_QUEUED_BYTES or len(self._frames) > MAX_QUEUED_FRAMES:
            self._queue_paused = True
            self._update_reading()
        if self._pool.exhausted:
            self._wait_for_memory(to_grow=False)
        self._wakeup.set()

    # -- flow control ---------------------------------------------------------------------
    def _wait_for_memory(self, to_grow: bool) -> None:
        self._pool_paused = True
        self._pool.wait_for_room(self, to_grow)
        self._update_reading()

    def pool_has_room(self) -> None:
        """Called by the pool when handled requests gave memory back: carry on where reading stopped."""
        if self._closed:
            return
        self._pool_paused = False
        if self._big is not None:
            if self._big_pos == len(self._big):
                self._grow_big(force=False)
        elif self._scratch_len >= 4:
            self._extract_frames()
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
        if self._scratch and self._scratch_len == 0:
            self._scratch = bytearray()

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
        pending: list[bytes] = []  # complete answers to consecutive Produce requests, written together
        pending_bytes = 0
        # Once a Produce waits (acks=all), its answer and every later one queue here, in request order:
        # Kafka answers a connection's requests in order. Empty whenever pending is not.
        deferred: collections.deque[bytes | asyncio.Future[bytes]] = collections.deque()
        frame: bytes | bytearray | None = None
        view: memoryview | None = None
        metrics = self._metrics
        received = started = local_done = 0.0  # monotonic times of the request in hand (metrics only)
        clock = time.monotonic
        try:
            while not self._closed:
                if deferred and _answer_ready(deferred[0]):
                    await self._write_deferred(deferred, wait=False)
                if self._quota_muted:
                    if pending:
                        await self._write(pending)
                        pending, pending_bytes = [], 0
                    await self._hold_throttled(deferred)
                    continue
                if not self._frames:
                    if pending:
                        await self._write(pending)
                        pending, pending_bytes = [], 0
                    if self._handling and not deferred:
                        self._handling = False
                        self._last_active = time.monotonic()
                        frame = view = None  # only _last_frame keeps the last request now
                    self._wakeup.clear()
                    if not self._frames and not (deferred and _answer_ready(deferred[0])):
                        await self._wakeup.wait()  # a new frame, or a waiting Produce completed
                    continue
                frame = self._frames.popleft()
                if metrics is not None:
                    received = self._received.popleft()
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
                view = memoryview(frame)
                if self.session.authenticator is not None and self.session.authenticator.raw_tokens:
                    try:
                        await self._raw_sasl_token(frame)  # after SaslHandshake v0: a bare token, no header
                    finally:
                        self._release(len(frame))
                    continue
                header, body_pos = self._parse_header(view)
                coalesce = header.api_key in COALESCED_APIS
                if not coalesce:
                    # This handler may wait (long poll, rebalance): earlier answers must not wait with it.
                    if pending:
                        await self._write(pending)
                        pending, pending_bytes = [], 0
                    if deferred:
                        await self._write_deferred(deferred, wait=True)
                elif len(deferred) >= MAX_DEFERRED_ANSWERS:
                    await self._write_deferred(deferred, wait=True)  # bound what a pipelining client holds
                if metrics is not None:
                    started = clock()
                try:
                    response = await self._dispatch(header, view[body_pos:])
                finally:
                    self._release(len(frame))  # handled: its bytes no longer count against the broker budget
                if metrics is not None:
                    local_done = clock()
                    if coalesce and type(response) is bytes:  # gathered with the next answers: measured now
                        metrics.record_quick(header.api_key, header.api_version, received, started, local_done)
                    else:
                        self._measure_handed_over(metrics, header, response, coalesce, received, started,
                                                  local_done)
                if response is None:
                    continue
                if isinstance(response, RawResponse):
                    if isinstance(response, DeferredResponse):
                        # Phase 1 is done, phase 2 waits: send what is ready, keep reading requests.
                        if pending:
                            await self._write(pending)
                            pending, pending_bytes = [], 0
                        response.ready.add_done_callback(self._answer_done)
                        deferred.append(response.ready)
                        continue
                    if pending:
                        await self._write(pending)
                        pending, pending_bytes = [], 0
                    await self._send_raw(header, response)
                    if metrics is not None:
                        metrics.record_raw(header.api_key, header.api_version, received, started, local_done,
                                           response, clock())
                    continue
                if deferred:
                    deferred.append(response)
                    continue
                pending.append(response)
                pending_bytes += len(response)
                if pending_bytes >= FLUSH_BYTES or not coalesce:
                    await self._write(pending)
                    pending, pending_bytes = [], 0
                    if metrics is not None and not coalesce:
                        metrics.record(header.api_key, header.api_version, received, started, local_done, 0.0,
                                       clock())
        except _Close:
            if pending:
                await self._write(pending)
            self._abort()
        except (ConnectionError, asyncio.CancelledError):
            self._abort()
        except Exception:
            log.exception("connection from %s failed; closing it", self.client_host)
            self._abort()
        finally:
            self._frames.clear()
            self._received.clear()
            self._last_frame = None
            self._queued_bytes = 0
            self._release(self._held)

    def _throttle(self, throttle_ms: int) -> None:
        """Mute the connection for a quota violation: stop reading and handling until the time is up."""
        until = asyncio.get_running_loop().time() + throttle_ms / 1000
        self._muted_until = max(self._muted_until, until)
        if not self._quota_muted:
            self._quota_muted = True
            self._update_reading()

    async def _hold_throttled(self, deferred: collections.deque[bytes | asyncio.Future[bytes]]) -> None:
        """Wait out the throttle time, still writing answers that complete meanwhile (acks=all produces)."""
        loop = asyncio.get_running_loop()
        while not self._closed and (remaining := self._muted_until - loop.time()) > 0:
            if deferred and _answer_ready(deferred[0]):
                await self._write_deferred(deferred, wait=False)
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
                             response: bytes | RawResponse | None, coalesce: bool, received: float,
                             started: float, local_done: float) -> None:
        """Request metrics of answers not sent right away: none (acks=0), gathered (Produce: their shared
        write is not split among them) or waiting for the ISR (remote time = until the answer is ready).
        Answers written at once are measured after their write, by the request loop."""
        api_key, version = header.api_key, header.api_version
        if response is None or (coalesce and not isinstance(response, RawResponse)):
            metrics.record_quick(api_key, version, received, started, local_done)
        elif isinstance(response, DeferredResponse):
            def ready(_: asyncio.Future[bytes]) -> None:
                now = time.monotonic()
                metrics.record(api_key, version, received, started, local_done, now - local_done, now)

            response.ready.add_done_callback(ready)

    async def _write_deferred(self, deferred: collections.deque[bytes | asyncio.Future[bytes]], wait: bool) -> None:
        """Write queued answers in order: the ready ones at the head, or (wait) all of them."""
        chunks: list[bytes] = []
        while deferred:
            head = deferred[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    if not wait:
                        break
                    if chunks:
                        await self._write(chunks)
                        chunks = []
                    await head
                chunks.append(head.result())
            else:
                chunks.append(head)
            deferred.popleft()
        if chunks:
            await self._write(chunks)

    def _parse_header(self, view: memoryview) -> tuple[codec.RequestHeader, int]:
        try:
            return codec.parse_request_header(view)
        except codec.MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self.client_host, exc)
            raise _Close from exc

    async def _dispatch(self, header: codec.RequestHeader, body: memoryview) -> bytes | RawResponse | None:
        server = self._socket_server.kafka_server
        session = self.session
        if not session.authenticated or session.expires_at:
            self._check_session(header)
        ctx = RequestContext(header, server.services, self.client_host, session)
        try:
            response = await server.apis.handle(ctx, body)
        except codec.MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self.client_host, exc)
            raise _Close from exc
        except CloseConnection as exc:
            raise _Close from exc
        if header.api_key in _SASL_APIS and session.authenticator is not None:
            self._count_sasl_outcome()
            self._after_sasl_step()
            if session.authenticator.must_close:
                if response is not None and not isinstance(response, RawResponse):
                    await self._write([response])  # the failure reaches the client, then the connection closes
                raise _Close
        if ctx.throttle_time_ms:
            self._throttle(ctx.throttle_time_ms)
        return response

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
            self._max_request = self._socket_server.max_request_bytes
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
            else:
                pending.append(part)
        if pending:
            await self._write(pending)


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
