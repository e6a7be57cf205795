"""Session: what a connection has established about its client (listener, principal, SASL state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.config.listeners import EndPoint
from strom.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from strom.security.authenticator import SaslServerAuthenticator


@dataclass(slots=True)
class Session:
    """One per connection, mutable: SASL authentication or a client certificate sets the principal.

    `authenticated` is False on SASL listeners until the exchange succeeds; until then the connection may only
    send ApiVersions, SaslHandshake and SaslAuthenticate. `expires_at` (time.monotonic(), 0 = never) ends a SASL
    session after `connections.max.reauth.ms`: a later request other than a re-authentication closes the
    connection.
    """

    endpoint: EndPoint
    client_host: str
    client_port: int = 0
    principal: KafkaPrincipal = ANONYMOUS
    authenticated: bool = True
    sasl_mechanism: str | None = None
    expires_at: float = 0.0
    authenticator: SaslServerAuthenticator | None = None  # SASL listeners only

    @property
    def listener_name(self) -> str:
        return self.endpoint.listener_name

    @property
    def security_protocol(self) -> str:
        return self.endpoint.security_protocol

    @classmethod
    def for_connection(cls, endpoint: EndPoint, client_host: str, client_port: int = 0) -> Session:
        return cls(endpoint, client_host, client_port, authenticated=not endpoint.uses_sasl)
