"""Codec facade over kafka-python's message-definition driven encoder/decoder.

Everything else in Strom goes through this module, so the library can be
swapped (or a hot API hand-encoded) without touching handlers.
"""

from __future__ import annotations

import inspect
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin as _admin
import kafka.protocol.consumer as _consumer
import kafka.protocol.metadata as _metadata
import kafka.protocol.producer as _producer
import kafka.protocol.sasl as _sasl
from kafka.protocol.api_message import ApiMessage

from strom.protocol import group_messages as _group_messages
from strom.protocol import inter_broker as _inter_broker
from strom.protocol.api_keys import ApiKey

_REQUESTS: dict[int, type[ApiMessage]] = {}
_RESPONSES: dict[int, type[ApiMessage]] = {}
for _mod in (_admin, _consumer, _metadata, _producer, _sasl, _inter_broker, _group_messages):
    for _name, _cls in inspect.getmembers(_mod, inspect.isclass):
        if issubclass(_cls, ApiMessage) and _cls is not ApiMessage and _cls.json is not None:
            if _name.endswith("Request"):
                _REQUESTS[_cls.API_KEY] = _cls
            elif _name.endswith("Response"):
                _RESPONSES[_cls.API_KEY] = _cls


CONTROLLED_SHUTDOWN = int(ApiKey.CONTROLLED_SHUTDOWN)  # a plain int: compared on every request header


class MalformedRequest(Exception):
    """The frame could not be parsed; Kafka closes the connection in this case."""


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool


def request_class(api_key: int) -> type[ApiMessage] | None:
    return _REQUESTS.get(api_key)


def response_class(api_key: int) -> type[ApiMessage]:
    return _RESPONSES[api_key]


def is_flexible(api_key: int, version: int) -> bool:
    cls = _REQUESTS.get(api_key)
    return cls is not None and cls.flexible_version_q(version)  # not `cls and`: a message class has a len()


def skip_tagged_fields(frame: memoryview, pos: int) -> int:
    """Position after a tagged-field section (flexible versions); raises MalformedRequest past the end."""
    count, pos = read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(frame, pos)
        size, pos = read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise MalformedRequest("tagged field runs past the end of the frame")
    return pos


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise MalformedRequest("bad unsigned varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def parse_request_header(frame: memoryview) -> tuple[RequestHeader, int]:
    """Parse request header v0-v2 by hand: it decides how the body is parsed."""
    if len(frame) < 8:
        raise MalformedRequest("frame shorter than a request header")
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    pos = 8
    client_id: str | None = None
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        # Kafka's one exception: ControlledShutdown v0 uses request header v0 (no client id).
        return RequestHeader(api_key, api_version, correlation_id, None, False), pos
    if len(frame) >= 10:
        (n,) = struct.unpack_from(">h", frame, pos)
        pos += 2
        if n >= 0:
            if pos + n > len(frame):
                raise MalformedRequest("client id runs past the end of the frame")
            client_id = bytes(frame[pos : pos + n]).decode("utf-8", "replace")
            pos += n
    flexible = is_flexible(api_key, api_version)
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible), pos


def decode_request(header: RequestHeader, body: memoryview) -> Any:
    key = (header.api_key, header.api_version)
    decoder = _decoders.get(key) or _request_decoder(*key)
    try:
        request, _ = decoder.decode(body, 0)
    except Exception as exc:  # the codec raises many types on garbage
        raise MalformedRequest(f"cannot decode {decoder.name} v{header.api_version}: {exc!r}") from exc
    _reject_nulls(request, decoder.null_plan, decoder.name)
    return request


@dataclass(frozen=True, slots=True)
class _RequestDecoder:
    """What decoding one request version takes, looked up once: ``ApiMessage.decode`` would find the
    class, its flexibility and its compiled decoder again for every request."""

    decode: Callable[[memoryview, int], tuple[Any, int]]  # the library's compiled decoder
    null_plan: _NullPlan
    name: str


_decoders: dict[tuple[int, int], _RequestDecoder] = {}


def _request_decoder(api_key: int, version: int) -> _RequestDecoder:
    cls = _REQUESTS[api_key]
    if not 0 <= version <= cls.max_version:
        raise MalformedRequest(f"cannot decode {cls.__name__} v{version}: no such version")
    flexible = cls.flexible_version_q(version)
    decode = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls[None])
    decoder = _decoders[(api_key, version)] = _RequestDecoder(decode, _null_plan(cls._struct, version),
                                                              cls.__name__)
    return decoder


# Per (schema, version): fields that must not be null, and struct fields to descend into (those with
# something to check: a produce request with many partitions costs no more to check than one).
_NullPlan = tuple[tuple[str, ...], tuple[tuple[str, bool, "_NullPlan"], ...]]
_null_plans: dict[tuple[int, int], _NullPlan] = {}
_NOTHING_TO_CHECK: _NullPlan = ((), ())


def _null_plan(struct: Any, version: int) -> _NullPlan:
    key = (id(struct), version)
    plan = _null_plans.get(key)
    if plan is None:
        required: list[str] = []
        nested: list[tuple[str, bool, _NullPlan]] = []
        for field in struct._fields:
            if not field.for_version_q(version) or field.tagged_field_q(version):
                continue
            nullable = field.nullable_for_version_q(version)
            if (field.is_array() or field.is_struct() or field.type_str in ("string", "bytes", "records")) \
                    and not nullable:
                required.append(field.name)
            if field.is_struct_array() or field.is_struct():
                sub = _null_plan(field, version)
                if sub != _NOTHING_TO_CHECK:  # e.g. Produce's partitions: no need to visit each one
                    nested.append((field.name, field.is_struct_array(), sub))
        plan = (tuple(required), tuple(nested))
        _null_plans[key] = plan
    return plan


def _reject_nulls(obj: Any, plan: _NullPlan, path: str) -> None:
    """A null where the schema forbids one is a malformed request (Kafka fails the parse too).

    The decoder accepts a -1 length for any array or string; after this check handlers may
    rely on the schema. The per-version plan keeps it to a few attribute reads per request.
    """
    required, nested = plan
    for name in required:
        if getattr(obj, name) is None:
            raise MalformedRequest(f"{path}.{name} is null but not nullable")
    for name, is_array, sub in nested:
        value = getattr(obj, name)
        if value is None:
            continue
        try:
            for item in value if is_array else (value,):
                _reject_nulls(item, sub, name)
        except MalformedRequest as exc:  # the path is spelled out only on failure: this runs per request
            raise MalformedRequest(f"{path}.{exc}") from None


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (correlation id) or v1 (plus empty tagged fields)."""
    if flexible:
        return struct.pack(">ib", correlation_id, 0)
    return struct.pack(">i", correlation_id)


def encode_response(header: RequestHeader, response: ApiMessage) -> bytes:
    """Encode a framed response; ApiVersions always uses response header v0."""
    return frame_response(header, response.encode(version=header.api_version))


def frame_response(header: RequestHeader, body: bytes | bytearray) -> bytes:
    """Size prefix + response header + body, for bodies encoded by hand on hot paths."""
    flexible = header.flexible and header.api_key != 18
    head = response_header(header.correlation_id, flexible)
    return struct.pack(">i", len(head) + len(body)) + head + bytes(body)
