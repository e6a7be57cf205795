"""Acceptor: the listening sockets of every listener, and how accepted sockets become connections.

Our own accept loop rather than asyncio's server: asyncio logs every EMFILE and keeps retrying,
where a broker out of file descriptors should pause accepting with back-off (pending clients
wait in the listen backlog) and keep serving the connections it has.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable

from strom.config.listeners import EndPoint

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 128
MAX_ACCEPTS_PER_WAKEUP = 64
# Out of file descriptors: accepting pauses for a back-off doubling from min to max;
# one log line per interval at most.
ACCEPT_BACKOFF_MIN_S = 0.05
ACCEPT_BACKOFF_MAX_S = 1.0
ACCEPT_ERROR_LOG_INTERVAL_S = 10.0
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Failed TLS handshakes (a plaintext client on a TLS port, scanners) are summed up in one line per interval.
TLS_FAILURE_LOG_INTERVAL_S = 60.0

ProtocolFactory = Callable[[EndPoint], asyncio.BaseProtocol]


class Acceptor:
    """Binds every listener and hands each accepted socket to ``protocol_factory(endpoint)``; on a TLS
    listener once the handshake has succeeded."""

    def __init__(self, endpoints: list[EndPoint], ssl_contexts: dict[str, ssl.SSLContext],
                 handshake_timeout_s: float, protocol_factory: ProtocolFactory,
                 open_connections: Callable[[], int]) -> None:
        self.endpoints = endpoints
        self._ssl_contexts = ssl_contexts
        self._handshake_timeout_s = handshake_timeout_s
        self._protocol_factory = protocol_factory
        self._open_connections = open_connections  # for the out-of-descriptors log line
        self._sockets: list[socket.socket] = []
        self._socket_endpoints: dict[socket.socket, EndPoint] = {}
        self.bound_ports: dict[str, int] = {}  # listener name -> port actually bound (port 0 = any)
        self._accept_backoff = ACCEPT_BACKOFF_MIN_S
        self._accept_errors = 0  # failures since the last log line
        self._accept_error_logged_at = float("-inf")
        self._tls_failures_unlogged = 0
        self._tls_failure_logged_at = float("-inf")

    @property
    def listening(self) -> bool:
        return bool(self._sockets)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            for endpoint in self.endpoints:
                await self._bind(endpoint)
        except OSError:
            self.close()
            raise
        for sock in self._sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)

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

    def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
        self._socket_endpoints.clear()

    def _accept(self, sock: socket.socket) -> None:
        """Accept what is queued, at most MAX_ACCEPTS_PER_WAKEUP at a time."""
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
        context = self._ssl_contexts.get(endpoint.listener_name)
        loop = asyncio.get_running_loop()
        try:
            if context is None:
                await loop.connect_accepted_socket(lambda: self._protocol_factory(endpoint), sock=conn)
            else:
                await loop.connect_accepted_socket(lambda: self._protocol_factory(endpoint), sock=conn,
                                                   ssl=context, ssl_handshake_timeout=self._handshake_timeout_s)
        except OSError as exc:  # ssl.SSLError and a handshake timeout are OSErrors too
            conn.close()
            if context is None:
                log.warning("setting up an accepted connection failed: %s", exc)
            else:
                self._tls_handshake_failed(endpoint, exc)

    def _tls_handshake_failed(self, endpoint: EndPoint, exc: OSError) -> None:
        """No stack trace and no line per attempt: a plaintext client retrying would flood the log."""
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
                      exc.strerror, self._accept_errors, self._open_connections(), ACCEPT_BACKOFF_MAX_S)
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
