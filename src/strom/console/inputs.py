"""Validation of what users type into forms and query strings, with messages that say what is wrong."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from strom.console.errors import bad_request

# Kafka's rule (org.apache.kafka.common.internals.Topic): ASCII alphanumerics, '.', '_', '-'; at most 249.
_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249


def topic_name(raw: str | None) -> str:
    """A legal Kafka topic name, or a 400 that says why not."""
    name = (raw or "").strip()
    if not name:
        raise bad_request("A topic name is required.")
    if name in (".", ".."):
        raise bad_request(f"Invalid topic name '{name}': '.' and '..' are not allowed.")
    if len(name) > MAX_TOPIC_LENGTH:
        raise bad_request(f"Invalid topic name: longer than {MAX_TOPIC_LENGTH} characters.")
    if not _TOPIC_CHARS.match(name):
        raise bad_request(
            f"Invalid topic name '{name}': only ASCII letters, digits, '.', '_' and '-' are allowed."
        )
    return name


def integer(raw: str | None, field: str, *, minimum: int | None = None, maximum: int | None = None,
            default: int | None = None) -> int:
    """An integer form field; blank takes the default (or is refused when there is none)."""
    text = (raw or "").strip()
    if not text:
        if default is None:
            raise bad_request(f"{field} is required.")
        return default
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f"{field} must be a whole number, not '{text}'.") from None
    if minimum is not None and value < minimum:
        raise bad_request(f"{field} must be at least {minimum} (got {value}).")
    if maximum is not None and value > maximum:
        raise bad_request(f"{field} must be at most {maximum} (got {value}).")
    return value


def timestamp_ms(raw: str | None, field: str = "Timestamp") -> int:
    """Milliseconds since the epoch, or an ISO date-time (no zone = UTC), e.g. 2024-01-31T12:00:00."""
    text = (raw or "").strip()
    if not text:
        raise bad_request(f"{field} is required.")
    if re.fullmatch(r"-?\d+", text):
        value = int(text)
        if value < 0:
            raise bad_request(f"{field} must not be negative.")
        return value
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise bad_request(
            f"{field} '{text}' is neither milliseconds since the epoch nor a date-time like 2024-01-31T12:00:00."
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def headers(raw: str | None) -> list[tuple[str, bytes | None]]:
    """Record headers typed as JSON: {"k": "v"} or [["k", "v"], ...]; values are strings or null."""
    text = (raw or "").strip()
    if not text:
        return []
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise bad_request(f"Headers are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                          'expected e.g. {"source": "console"}.') from None
    if isinstance(document, dict):
        pairs = list(document.items())
    elif isinstance(document, list) and all(isinstance(p, list) and len(p) == 2 for p in document):
        pairs = [(p[0], p[1]) for p in document]
    else:
        raise bad_request('Headers must be a JSON object ({"name": "value"}) or a list of ["name", "value"] pairs.')
    result: list[tuple[str, bytes | None]] = []
    for key, value in pairs:
        if not isinstance(key, str) or not key:
            raise bad_request("Every header needs a non-empty string name.")
        if value is None:
            result.append((key, None))
        elif isinstance(value, str):
            result.append((key, value.encode("utf-8")))
        else:
            raise bad_request(f"Header '{key}': the value must be a string or null.")
    return result


def config_lines(raw: str | None) -> dict[str, str]:
    """Topic configs typed one per line as key=value (blank lines and # comments ignored)."""
    configs: dict[str, str] = {}
    for number, line in enumerate((raw or "").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise bad_request(f"Config line {number} '{line}' is not key=value.")
        configs[key.strip()] = value.strip()
    return configs


def config_key(raw: str | None) -> str:
    key = (raw or "").strip()
    if not key or not re.fullmatch(r"[a-zA-Z0-9._-]+", key):
        raise bad_request(f"Invalid config name '{key}'.")
    return key


def choice(raw: str | None, field: str, allowed: tuple[str, ...], default: str | None = None) -> str:
    value = (raw or "").strip() or (default or "")
    if value not in allowed:
        raise bad_request(f"{field} must be one of {', '.join(allowed)} (got '{value}').")
    return value
