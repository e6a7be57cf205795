"""Moved to :mod:`strom.config.listeners` (configuration is the bottom layer); kept so older imports work."""

from strom.config.listeners import (
    SECURITY_PROTOCOL_IDS,
    SECURITY_PROTOCOLS,
    EndPoint,
    ListenerError,
    parse_listeners,
    parse_protocol_map,
)

__all__ = ["SECURITY_PROTOCOLS", "SECURITY_PROTOCOL_IDS", "EndPoint", "ListenerError", "parse_listeners",
           "parse_protocol_map"]
