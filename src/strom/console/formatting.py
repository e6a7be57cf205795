"""Pure helpers that turn Kafka data into what a page shows: sizes, times, record bytes, lag."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Records can be large; the browser gets at most this much of one key, value or header.
DISPLAY_LIMIT = 64 * 1024
_HEX_LIMIT = 4 * 1024
_TIMESTAMP_TYPES = {0: "", 1: "CreateTime", 2: "LogAppendTime"}


def human_bytes(size: int | None) -> str:
    """1536 -> '1.5 KiB'; None (unknown) -> '–'."""
    if size is None or size < 0:
        return "–"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # unreachable


def format_timestamp(ms: int | None) -> str:
    """Milliseconds since the epoch -> '2024-01-31 12:00:00.123 UTC'; unknown -> '–'."""
    if ms is None or ms < 0:
        return "–"
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def timestamp_type_name(kind: int) -> str:
    """librdkafka's TIMESTAMP_CREATE_TIME (1) / TIMESTAMP_LOG_APPEND_TIME (2) as Kafka names them."""
    return _TIMESTAMP_TYPES.get(kind, "")


@dataclass(frozen=True)
class RenderedBytes:
    """How one key, value or header value is shown.

    kind: "null" (absent), "empty", "json" (pretty-printed), "text" (UTF-8, control
    characters escaped), "binary" (hex dump) or "base64". `text` is plain text; templates escape it.
    `preview` is one line for the compact row; `note` says why a chosen format could not be used.
    """

    kind: str
    text: str
    size: int
    truncated: bool = False
    preview: str = ""
    note: str = ""


# What the message browser can show bytes as; "auto" picks JSON, text or hex from the content.
DISPLAY_FORMATS = ("auto", "text", "json", "hex", "base64")
PREVIEW_LIMIT = 160


def one_line(text: str, limit: int = PREVIEW_LIMIT) -> str:
    """Whitespace runs folded to one space and cut at `limit` characters (with an ellipsis)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def parse_json_document(text: str) -> Any | None:
    """The parsed JSON object or array if `text` is one, else None (bare strings/numbers stay text)."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def escape_controls(text: str) -> str:
    """Make control characters visible (\\x00, \\x1b...) but keep newlines and tabs."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\r":
            out.append("\\r")
        elif (code < 0x20 and ch not in "\n\t") or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def hex_dump(data: bytes, limit: int = _HEX_LIMIT) -> str:
    """Classic 16-bytes-per-line dump with an ASCII column (non-printables as '.')."""
    lines = []
    for start in range(0, min(len(data), limit), 16):
        chunk = data[start:start + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{start:08x}  {hexes:<47}  |{ascii_}|")
    return "\n".join(lines)


def _mostly_controls(text: str) -> bool:
    """Valid UTF-8 that is still binary at heart (e.g. small integers): over 10% control characters."""
    sample = text[:4096]
    controls = sum(1 for ch in sample if (ord(ch) < 0x20 and ch not in "\n\t\r") or ord(ch) == 0x7F)
    return controls * 10 > len(sample)


def render_bytes(data: bytes | None, limit: int = DISPLAY_LIMIT, fmt: str = "auto") -> RenderedBytes:
    """Show record bytes as asked: "auto" (pretty JSON, escaped text or a hex dump), text, json, hex, base64."""
    if data is None:
        return RenderedBytes("null", "null", 0, preview="null")
    if not data:
        return RenderedBytes("empty", "", 0, preview="(empty)")
    size = len(data)
    if fmt == "hex":
        return _as_hex(data)
    if fmt == "base64":
        shown = base64.b64encode(data[:limit]).decode("ascii")
        return RenderedBytes("base64", shown, size, truncated=size > limit, preview=one_line(shown))
    if fmt == "text":
        shown = escape_controls(data[:limit].decode("utf-8", errors="replace"))
        return RenderedBytes("text", shown, size, truncated=size > limit, preview=one_line(shown))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if fmt == "json":
        document = _json_value(text) if text is not None and size <= limit else _NOT_JSON
        if document is not _NOT_JSON:
            return _as_json(document, size)
        fallback = render_bytes(data, limit)
        return RenderedBytes(fallback.kind, fallback.text, size, fallback.truncated, fallback.preview,
                             note="not JSON")
    if text is None or _mostly_controls(text):
        return _as_hex(data)
    if size <= limit:
        document = parse_json_document(text)
        if document is not None:
            return _as_json(document, size)
    truncated = size > limit
    shown = escape_controls(text[:limit] if truncated else text)
    return RenderedBytes("text", shown, size, truncated=truncated, preview=one_line(shown))


_NOT_JSON = object()


def _json_value(text: str) -> Any:
    """Any JSON value (also a bare string or number, when JSON was asked for), else _NOT_JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


def _as_json(document: Any, size: int) -> RenderedBytes:
    compact = json.dumps(document, ensure_ascii=False, separators=(", ", ": "))
    return RenderedBytes("json", json.dumps(document, indent=2, ensure_ascii=False), size,
                         preview=one_line(compact))


def _as_hex(data: bytes) -> RenderedBytes:
    head = " ".join(f"{b:02x}" for b in data[:32]) + (" …" if len(data) > 32 else "")
    return RenderedBytes("binary", hex_dump(data), len(data), truncated=len(data) > _HEX_LIMIT, preview=head)


def searchable_text(data: bytes | None) -> str:
    """What a search looks into: the bytes decoded leniently, lower-cased."""
    if not data:
        return ""
    return data.decode("utf-8", errors="replace").lower()


def partition_lag(committed: int | None, end_offset: int | None) -> int | None:
    """Kafka's LAG: log end offset minus committed offset; unknown without a commit; never negative."""
    if committed is None or committed < 0 or end_offset is None or end_offset < 0:
        return None
    return max(end_offset - committed, 0)


def total_lag(lags: list[int | None]) -> int:
    """Sum of the known lags (partitions without a committed offset count as unknown, not zero)."""
    return sum(lag for lag in lags if lag is not None)


# -- config values ------------------------------------------------------------------------------------

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
_DURATIONS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))
_SIZES = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
# Configs in milliseconds or bytes whose names do not say so.
_MS_CONFIGS = {"log.roll.ms", "retention.ms"}
_BYTES_CONFIGS = {"retention.bytes", "segment.bytes", "max.message.bytes", "segment.index.bytes",
                  "index.interval.bytes"}


def _scaled(value: int, units: tuple[tuple[str, int], ...], base: str) -> str:
    """The largest unit the value reaches, as a whole number when exact ('7 d'), else one decimal ('1.5 h')."""
    for unit, size in units:
        if abs(value) >= size:
            whole, rest = divmod(abs(value), size)
            sign = "-" if value < 0 else ""
            return f"{sign}{whole} {unit}" if rest == 0 else f"{value / size:.1f} {unit}"
    return f"{value} {base}"


def human_duration_ms(ms: int) -> str:
    """604800000 -> '7 d', 90000 -> '1.5 min', 250 -> '250 ms'."""
    return _scaled(ms, _DURATIONS, "ms")


def human_size(size: int) -> str:
    """1073741824 -> '1 GiB', 1536 -> '1.5 KiB', 100 -> '100 B' (exact sizes without a decimal)."""
    return _scaled(size, _SIZES, "B")


_TIME_SUFFIXES = {".hours": 3_600_000, ".minutes": 60_000, ".seconds": 1000}


def config_unit(name: str) -> str | None:
    """The unit of a config's value when it is a time or a size ('ms', 'hours', 'bytes'...), from its name."""
    if name.endswith(".ms") or name in _MS_CONFIGS:
        return "ms"
    for suffix in _TIME_SUFFIXES:
        if name.endswith(suffix):
            return suffix[1:]
    if name.endswith(".bytes") or name in _BYTES_CONFIGS:
        return "bytes"
    return None


def human_config_value(name: str, value: str | None) -> str | None:
    """A config value in units a person reads ('7 d', '1 GiB', 'unlimited'); None when the raw value says it all."""
    unit = config_unit(name)
    if unit is None or value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    if number == LONG_MAX or (unit == "bytes" and number == INT_MAX) or number == -1:
        return "unlimited"
    if number < 0:
        return None
    if unit == "bytes":
        return human_size(number)
    return human_duration_ms(number * _TIME_SUFFIXES.get("." + unit, 1))


_SOURCE_LABELS = {
    "DYNAMIC_TOPIC_CONFIG": "topic override",
    "DYNAMIC_BROKER_CONFIG": "broker (dynamic)",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "cluster default (dynamic)",
    "STATIC_BROKER_CONFIG": "broker config file",
    "DEFAULT_CONFIG": "default",
    "DYNAMIC_BROKER_LOGGER_CONFIG": "broker logger",
}


def config_source_label(source: str) -> str:
    """Where a config's value comes from, as a short phrase (Kafka's ConfigSource names are in the tooltip)."""
    return _SOURCE_LABELS.get(source, source.lower().replace("_", " "))
