"""Typed config values: the types and sources DescribeConfigs reports, parsing, formatting, validators.

Everything a key definition needs and nothing that knows a particular key, so the broker and topic
tables, the dynamic layers and the listener settings can all build on it.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid (Kafka's ConfigException)."""


class DynamicUpdateError(ConfigError):
    """Keys that cannot change at run time, or not at this level (Kafka answers INVALID_REQUEST)."""


class ConfigType(enum.IntEnum):
    """Config value types with the codes DescribeConfigs v3+ puts on the wire."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs config sources (v1+), telling an admin where a value came from."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    GROUP_CONFIG = 8  # a consumer group's own config (KIP-848; 7 is client metrics, not served)


Validator = Callable[[Any], str | None]
"""Returns None when the parsed value is acceptable, else the reason it is not."""


# --------------------------------------------------------------------------- validators


def at_least(lo: float) -> Validator:
    def check(v: Any) -> str | None:
        return None if v is None or v >= lo else f"must be at least {lo}"

    return check


def between(lo: float, hi: float) -> Validator:
    def check(v: Any) -> str | None:
        return None if v is None or lo <= v <= hi else f"must be between {lo} and {hi}"

    return check


def one_of(*choices: str) -> Validator:
    def check(v: Any) -> str | None:
        return None if v is None or v in choices else f"must be one of {', '.join(choices)}"

    return check


def list_of(*choices: str) -> Validator:
    def check(v: Any) -> str | None:
        bad = [x for x in (v or []) if x not in choices]
        return f"each item must be one of {', '.join(choices)}" if bad else None

    return check


# ------------------------------------------------------------------------ type handling

_INT_RE = re.compile(r"[+-]?\d+\Z")


def parse_value(ctype: ConfigType, raw: str) -> tuple[Any, str | None]:
    """Parse a string into the config type; returns (value, error reason or None)."""
    text = raw.strip()
    if ctype in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        if not _INT_RE.match(text):
            return None, "must be an integer"
        n = int(text)
        lo, hi, what = {
            ConfigType.INT: (INT_MIN, INT_MAX, "a 32-bit integer"),
            ConfigType.SHORT: (SHORT_MIN, SHORT_MAX, "a 16-bit integer"),
            ConfigType.LONG: (LONG_MIN, LONG_MAX, "a 64-bit integer"),
        }[ctype]
        return (n, None) if lo <= n <= hi else (None, f"must be {what}")
    if ctype is ConfigType.BOOLEAN:
        low = text.lower()
        if low in ("true", "false"):
            return low == "true", None
        return None, "must be true or false"
    if ctype is ConfigType.DOUBLE:
        try:
            d = float(text)
        except ValueError:
            return None, "must be a number"
        if d != d or d in (float("inf"), float("-inf")):
            return None, "must be a finite number"
        return d, None
    if ctype is ConfigType.LIST:
        return [p.strip() for p in text.split(",") if p.strip()], None
    return text, None


def format_value(ctype: ConfigType, value: Any) -> str | None:
    """Render a parsed value the way Kafka shows it in DescribeConfigs."""
    if value is None:
        return None
    if ctype is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if ctype is ConfigType.LIST:
        return ",".join(value)
    return str(value)


def unknown_key(key: str, known: Iterable[str], what: str = "configuration") -> ConfigError:
    near = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    return ConfigError(f"Unknown {what} '{key}'{hint}")


def invalid_value(key: str, raw: str, reason: str) -> ConfigError:
    return ConfigError(f"Invalid value '{raw}' for configuration '{key}': {reason}")


def parse_checked(name: str, ctype: ConfigType, validator: Validator | None, raw: str) -> Any:
    """Parse and validate one key's raw value; ConfigError names the key and the value."""
    value, reason = parse_value(ctype, raw)
    if reason is None and validator is not None:
        reason = validator(value)
    if reason is not None:
        raise invalid_value(name, raw.strip(), reason)
    return value


# ----------------------------------------------------------------------- config entries


@dataclass(frozen=True)
class ConfigSynonym:
    """A DescribeConfigs synonym: another key that feeds this one, with its own source."""

    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    """One row of a DescribeConfigs response (all fields any version needs)."""

    name: str
    value: str | None
    source: int
    is_default: bool
    read_only: bool
    is_sensitive: bool
    config_type: int
    documentation: str
    synonyms: tuple[ConfigSynonym, ...] = field(default_factory=tuple)
