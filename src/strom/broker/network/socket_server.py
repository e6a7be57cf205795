"""SocketServer: every listener's connections, their shared limits and security settings, the idle sweep.

Resource limits: all received-but-unhandled request bytes are charged to one broker-wide
RequestMemoryPool (`queued.max.request.bytes`); connections idle for `connections.max.idle.ms` are
closed by one periodic sweep; and when the process runs out of file descriptors, the Acceptor pauses
with back-off instead of spinning.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import time
from typing import TYPE_CHECKING

from strom.broker.network.acceptor import Acceptor
from strom.broker.network.connection import KafkaConnection
from strom.broker.network.memory_pool import RequestMemoryPool
from strom.config import ConfigError
from strom.config.listeners import EndPoint
from strom.metrics.request_metrics import RequestMetrics
from strom.security.authenticator import SaslListenerConfig
from strom.security.credential_cache import CredentialCache
from strom.security.listener_security import sasl_listener_config
from strom.security.login_throttle import LoginThrottle
from strom.security.ssl_factory import server_context
from strom.security.ssl_principal_mapper import SslPrincipalMapper

if TYPE_CHECKING:
    from strom.broker.server import KafkaServer

log = logging.getLogger(__name__)

# The idle sweep runs this often at most (and at least a few times per connections.max.idle.ms).
MAX_SWEEP_INTERVAL_S = 30.0


class SocketServer:
    """Binds every listener; a connection remembers which one it came in on (its EndPoint)."""

    def __init__(self, server: KafkaServer, endpoints: list[EndPoint], max_request_bytes: int) -> None:
        self._server = server
        self.endpoints = endpoints
        self.max_request_bytes = max_request_bytes
        cfg = server.config
        self.max_idle_ms: int = cfg.get("connections.max.idle.ms")
        self.memory_pool: RequestMemoryPool = RequestMemoryPool(cfg.get("queued.max.request.bytes"))
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
        self.acceptor = Acceptor(endpoints, self.ssl_contexts, self.authentication_timeout_s,
                                 lambda endpoint: KafkaConnection(self, endpoint), lambda: len(self.connections))
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
        assert self.acceptor.listening
        return self.acceptor.bound_ports[self.endpoints[0].listener_name]

    @property
    def bound_ports(self) -> dict[str, int]:
        """Listener name -> port actually bound (port 0 = any free port)."""
        return self.acceptor.bound_ports

    async def start(self) -> None:
        await self.acceptor.start()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(), name="connection-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.acceptor.close()
        tasks = [c.close() for c in list(self.connections)]
        await asyncio.gather(*[t for t in tasks if t is not None], return_exceptions=True)

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

