"""Listeners: named endpoints, each with a security protocol (Kafka's `listeners`,
`listener.security.protocol.map`, `advertised.listeners`, `inter.broker.listener.name`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The ids UpdateMetadata carries (Kafka's SecurityProtocol ids).
SECURITY_PROTOCOL_IDS = {name: i for i, name in enumerate(SECURITY_PROTOCOLS)}
_LISTENER = re.compile(r"([A-Za-z0-9_.-]+)://(\[[^\]]*\]|[^:\[\]]*):(\d+)")


class ListenerError(ValueError):
    """A listener setting that cannot work; the message names the key and the value."""


@dataclass(frozen=True, slots=True)
class EndPoint:
    listener_name: str
    security_protocol: str
    host: str
    port: int

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


def parse_protocol_map(items: list[str]) -> dict[str, str]:
    protocols: dict[str, str] = {}
    for pair in items:
        name, sep, proto = pair.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in SECURITY_PROTOCOLS:
            raise ListenerError(f"Invalid value '{pair}' for configuration 'listener.security.protocol.map': "
                                f"expected NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        protocols[name] = proto
    return protocols


def parse_listeners(items: list[str], protocols: Mapping[str, str], key: str) -> list[EndPoint]:
    """`NAME://host:port,...`; a bare `host:port` (some tools write it) is a PLAINTEXT listener."""
    endpoints: list[EndPoint] = []
    for item in items:
        item = item.strip()
        if "://" not in item:
            item = f"PLAINTEXT://{item}"
        m = _LISTENER.fullmatch(item)
        if not m:
            raise ListenerError(f"Invalid value '{item}' for configuration '{key}': expected NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ListenerError(f"Invalid value '{item}' for configuration '{key}': port must be 0..65535")
        protocol = protocols.get(name)
        if protocol is None:
            raise ListenerError(f"Invalid value '{item}' for configuration '{key}': listener {name} has no "
                                f"security protocol in listener.security.protocol.map")
        if any(e.listener_name == name for e in endpoints):
            raise ListenerError(f"Invalid value '{','.join(items)}' for configuration '{key}': "
                                f"listener {name} appears more than once")
        endpoints.append(EndPoint(name, protocol, host, port))
    return endpoints
