"""SaslServerAuthenticator: one connection's SASL state (Kafka's SaslServerAuthenticator).

SaslHandshake picks a mechanism; SaslAuthenticate carries its tokens until the mechanism completes; then the
session has a principal (User:<name>). A failed exchange is answered with SASL_AUTHENTICATION_FAILED after the
login throttle's delay, and the connection is closed. With `connections.max.reauth.ms` the session expires and
the client re-authenticates on the same connection (KIP-368: a new SaslHandshake, then SaslAuthenticate); the
principal may not change.

After a SaslHandshake v0 the tokens travel without Kafka headers (the pre-1.0 wire format): `raw_tokens` tells
the connection to hand the next frames here as they are.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from strom.broker.session import Session
from strom.security.login_throttle import LoginThrottle
from strom.security.principal import USER_TYPE, KafkaPrincipal
from strom.security.sasl import PLAIN, AuthenticationFailed, PlainServer, SaslServer
from strom.security.scram import CredentialLookup, ScramServer

log = logging.getLogger(__name__)

NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58


@dataclass(frozen=True)
class SaslListenerConfig:
    """What every connection of one SASL listener shares."""

    listener_name: str
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    scram_lookup: CredentialLookup
    reauth_ms: int
    throttle: LoginThrottle

    def __repr__(self) -> str:  # the PLAIN users' passwords stay out of logs
        return f"SaslListenerConfig({self.listener_name!r}, mechanisms={self.mechanisms!r})"


@dataclass(slots=True)
class AuthenticateResult:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int


class SaslServerAuthenticator:
    def __init__(self, config: SaslListenerConfig, session: Session) -> None:
        self.config = config
        self.session = session
        self._server: SaslServer | None = None
        self.raw_tokens = False  # SaslHandshake v0: the next frames are bare tokens
        self.must_close = False  # the last answer was a failure: close once it is written
        self.outcome: bool | None = None  # the last exchange ended: True logged in, False refused (metrics read it)
        self._authenticate_version = 0

    # -- SaslHandshake ------------------------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int) -> int:
        if self._server is not None and not self._server.complete:
            self.must_close = True
            return ILLEGAL_SASL_STATE
        reauthenticating = self.session.authenticated
        if reauthenticating and (version == 0 or self._authenticate_version == 0):
            self.must_close = True  # re-authentication needs SaslAuthenticate v1+ (KIP-368)
            return ILLEGAL_SASL_STATE
        if mechanism not in self.config.mechanisms:
            self.must_close = not reauthenticating
            return UNSUPPORTED_SASL_MECHANISM
        if reauthenticating and mechanism != self.session.sasl_mechanism:
            self.must_close = True
            return ILLEGAL_SASL_STATE
        if mechanism == PLAIN:
            self._server = PlainServer(self.config.plain_users)
        else:
            self._server = ScramServer(mechanism, self.config.scram_lookup)
        self.raw_tokens = version == 0
        return NONE

    # -- SaslAuthenticate (or a bare token after SaslHandshake v0) ----------------------------------------------
    async def authenticate(self, token: bytes, version: int) -> AuthenticateResult:
        server = self._server
        if server is None or server.complete:
            self.must_close = True
            return AuthenticateResult(ILLEGAL_SASL_STATE, "SaslAuthenticate without a SaslHandshake", b"", 0)
        throttle = self.config.throttle
        if throttle.blocked(self.session.client_host):
            throttle.refused()
            self.must_close = True
            self.outcome = False
            log.info("refused authentication with %s:%d on listener %s: too many failed authentications from this "
                     "host", self.session.client_host, self.session.client_port, self.session.listener_name)
            return AuthenticateResult(SASL_AUTHENTICATION_FAILED, "Too many failed authentications from this host; "
                                      "try again later", b"", 0)
        try:
            answer = server.evaluate(token)
            if server.complete:
                return self._complete(server, answer, version)
            return AuthenticateResult(NONE, None, answer, 0)
        except AuthenticationFailed as exc:
            return await self._failed(server.mechanism, str(exc))

    def _complete(self, server: SaslServer, answer: bytes, version: int) -> AuthenticateResult:
        assert server.username is not None
        principal = KafkaPrincipal(USER_TYPE, server.username)
        session = self.session
        if session.authenticated and session.principal != principal:
            self.must_close = True
            self.outcome = False
            log.info("closing connection from %s on listener %s: re-authentication as %s, not %s",
                     session.client_host, session.listener_name, principal, session.principal)
            return AuthenticateResult(SASL_AUTHENTICATION_FAILED,
                                      "Cannot change principals during re-authentication", b"", 0)
        lifetime_ms = self.config.reauth_ms
        session.principal = principal
        session.sasl_mechanism = server.mechanism
        session.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else 0.0
        session.authenticated = True
        self.outcome = True
        self.raw_tokens = False
        self._authenticate_version = version
        log.debug("authenticated %s with %s from %s on listener %s", principal, server.mechanism,
                  session.client_host, session.listener_name)
        return AuthenticateResult(NONE, None, answer, lifetime_ms)

    async def _failed(self, mechanism: str, reason: str) -> AuthenticateResult:
        self.must_close = True
        self.outcome = False
        session = self.session
        delay = self.config.throttle.failure_delay(session.client_host)
        log.info("failed authentication with %s:%d on listener %s (%s: %s)", session.client_host,
                 session.client_port, session.listener_name, mechanism, reason)
        if delay > 0:
            await asyncio.sleep(delay)
        return AuthenticateResult(SASL_AUTHENTICATION_FAILED, reason, b"", 0)
