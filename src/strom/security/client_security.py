"""How a client of this code base (a broker reaching another broker, or a `strom` tool) secures a connection:
TLS context, SASL mechanism and credentials, and the SASL exchange itself (SaslHandshake v1, SaslAuthenticate v2)."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from strom.config import BrokerConfig, ConfigError
from strom.config.jaas import JaasConfigError, parse_jaas_config
from strom.config.listeners import SECURITY_PROTOCOLS
from strom.security.sasl import PLAIN, SUPPORTED_MECHANISMS, AuthenticationFailed, plain_client_token
from strom.security.scram import MECHANISMS as SCRAM_MECHANISMS
from strom.security.scram import ScramClient

Send = Callable[[Any, int], Awaitable[Any]]


@dataclass(frozen=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def inter_broker(cls, cfg: BrokerConfig) -> ClientSecurity:
        """The inter-broker listener's protocol; SASL with sasl.mechanism.inter.broker.protocol and the
        username/password of that listener's JAAS config; TLS trusting its trust store."""
        from strom.security.ssl_factory import client_context

        name = cfg.inter_broker_listener_name()
        endpoint = next(ep for ep in cfg.listeners() if ep.listener_name == name)
        context = client_context(cfg, name) if endpoint.uses_tls else None
        if not endpoint.uses_sasl:
            return cls(endpoint.security_protocol, context)
        mechanism = cfg.get("sasl.mechanism.inter.broker.protocol")
        jaas = cfg.listener_jaas_config(name, mechanism)
        if jaas is None or not jaas.username or jaas.password is None:
            raise ConfigError(f"the inter-broker listener {name} uses {endpoint.security_protocol} with {mechanism}: "
                              f"set username and password in listener.name.{name.lower()}.{mechanism.lower()}."
                              "sasl.jaas.config (the identity this broker uses with the others)")
        return cls(endpoint.security_protocol, context, mechanism, jaas.username, jaas.password)

    @classmethod
    def from_client_properties(cls, props: dict[str, str]) -> ClientSecurity:
        """Kafka client keys (security.protocol, sasl.mechanism, sasl.jaas.config or sasl.username/password,
        ssl.ca.location / ssl.truststore.location, ssl.certificate.location + ssl.key.location)."""
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol}")
        context = None
        if protocol.endswith("SSL"):
            context = ssl.create_default_context(cafile=props.get("ssl.ca.location")
                                                 or props.get("ssl.truststore.location"))
            if props.get("ssl.endpoint.identification.algorithm", "https").lower() in ("", "none"):
                context.check_hostname = False
            cert = props.get("ssl.certificate.location") or props.get("ssl.keystore.location")
            if cert:
                context.load_cert_chain(cert, props.get("ssl.key.location") or None,
                                        password=props.get("ssl.key.password") or None)
        if not protocol.startswith("SASL_"):
            return cls(protocol, context)
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ValueError(f"sasl.mechanism {mechanism} is not supported (use one of {', '.join(SUPPORTED_MECHANISMS)})")
        username, password = props.get("sasl.username"), props.get("sasl.password")
        if props.get("sasl.jaas.config"):
            try:
                jaas = parse_jaas_config(props["sasl.jaas.config"])
            except JaasConfigError as exc:
                raise ValueError(f"sasl.jaas.config: {exc}") from None
            username, password = username or jaas.username, password or jaas.password
        if not username or password is None:
            raise ValueError("SASL needs sasl.username and sasl.password (or sasl.jaas.config)")
        return cls(protocol, context, mechanism, username, password)


async def sasl_authenticate(send: Send, security: ClientSecurity) -> int:
    """Run the SASL exchange over `send(request, version)`; returns the session lifetime in ms (0 = none)."""
    mechanism = security.sasl_mechanism or PLAIN
    assert security.username is not None and security.password is not None
    handshake = await send(SaslHandshakeRequest(mechanism=mechanism), 1)
    if handshake.error_code:
        raise AuthenticationFailed(f"the broker does not offer SASL mechanism {mechanism} "
                                   f"(it offers {', '.join(handshake.mechanisms or [])})")

    async def step(token: bytes) -> tuple[bytes, int]:
        answer = await send(SaslAuthenticateRequest(auth_bytes=token), 2)
        if answer.error_code:
            raise AuthenticationFailed(answer.error_message or f"SASL authentication failed ({answer.error_code})")
        return bytes(answer.auth_bytes or b""), answer.session_lifetime_ms

    if mechanism in SCRAM_MECHANISMS:
        client = ScramClient(mechanism, security.username, security.password)
        server_first, _ = await step(client.first())
        server_final, lifetime = await step(client.final(server_first))
        client.verify(server_final)
        return lifetime
    _, lifetime = await step(plain_client_token(security.username, security.password))
    return lifetime
