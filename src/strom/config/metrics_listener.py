"""The `metrics.listener` setting: `http://host:port` (empty = no endpoint)."""

from __future__ import annotations

import re
from typing import Any

_ADDRESS = re.compile(r"(?:http://)?(\[[^\]]*\]|[^:/\[\]]*):(\d+)/?")


def parse_metrics_listener(value: str) -> tuple[str, int] | None:
    """(host, port), or None when off. Raises ValueError saying what is wrong."""
    value = (value or "").strip()
    if not value:
        return None
    m = _ADDRESS.fullmatch(value)
    if not m:
        raise ValueError("expected http://host:port")
    host, port = m.group(1).strip("[]"), int(m.group(2))
    if not 0 <= port <= 65535:
        raise ValueError("port must be 0..65535")
    return host, port


def validate_metrics_listener(value: Any) -> str | None:
    """A config validator: None when the value is usable, else the reason."""
    try:
        parse_metrics_listener(value or "")
    except ValueError as exc:
        return str(exc)
    return None
