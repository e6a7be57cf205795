"""ZooKeeper-mode inter-broker APIs that kafka-python does not ship.

The controller pushes state with LeaderAndIsr, StopReplica and UpdateMetadata; brokers
leave with ControlledShutdown and leaders ask for ISR changes with AlterPartition. The
layouts are Kafka's message definitions, kept as JSON in `strom.protocol.messages` and
driven by the same generic codec as every other API.

Codec quirks worth knowing:
- a uuid field decodes the all-zero UUID as None (and encodes None as zero), so an unset
  topic id reads back as None, not `uuid.UUID(int=0)`;
- kafka-python's `type` class property ("request"/"response") is shadowed by a field named
  Type, which breaks `is_request()` and header handling, so LeaderAndIsr's and
  UpdateMetadata's `Type` field is exposed as `request_type` (the wire is unchanged).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_message import ApiMessage

from strom.protocol import messages


def _type_as_request_type(cls: type, json: dict) -> dict:
    """json_patch: expose a top-level `Type` field as `request_type` (see the module docstring)."""
    for field in json["fields"]:
        if field["name"] == "Type":
            field["name"] = "RequestType"
    return json


# kafka-python reads json_patch from each class body (it is not inherited).
class LeaderAndIsrRequest(ApiMessage, load_json=messages):
    json_patch = classmethod(_type_as_request_type)


class LeaderAndIsrResponse(ApiMessage, load_json=messages): pass  # noqa: E701
class StopReplicaRequest(ApiMessage, load_json=messages): pass  # noqa: E701
class StopReplicaResponse(ApiMessage, load_json=messages): pass  # noqa: E701


class UpdateMetadataRequest(ApiMessage, load_json=messages):
    json_patch = classmethod(_type_as_request_type)


class UpdateMetadataResponse(ApiMessage, load_json=messages): pass  # noqa: E701
class ControlledShutdownRequest(ApiMessage, load_json=messages): pass  # noqa: E701
class ControlledShutdownResponse(ApiMessage, load_json=messages): pass  # noqa: E701
class AlterPartitionRequest(ApiMessage, load_json=messages): pass  # noqa: E701
class AlterPartitionResponse(ApiMessage, load_json=messages): pass  # noqa: E701


__all__ = [
    "LeaderAndIsrRequest", "LeaderAndIsrResponse",
    "StopReplicaRequest", "StopReplicaResponse",
    "UpdateMetadataRequest", "UpdateMetadataResponse",
    "ControlledShutdownRequest", "ControlledShutdownResponse",
    "AlterPartitionRequest", "AlterPartitionResponse",
]


def build(message_cls: Any, **fields: Any) -> Any:
    """A message from plain dicts and lists: nested structures become the codec's struct classes.

    kafka-python's encoder wants its own objects all the way down; the controller and the
    replica fetcher describe requests as dicts, which read more plainly."""
    return _build_struct(message_cls, message_cls._struct, fields)


def build_nested(message_cls: Any, path: tuple[str, ...], **fields: Any) -> Any:
    """One nested struct of a message, e.g. a LeaderAndIsr partition state at path
    ``("topic_states", "partition_states")``; ``build`` takes it as it is. Lets a message of thousands
    of partitions be assembled a piece at a time (and a piece shared by several brokers' requests)."""
    cls, struct = message_cls, message_cls._struct
    for name in path:
        field = next(f for f in struct._fields if f.name == name)
        cls, struct = field.data_class or getattr(cls, field.type_str.removeprefix("[]")), field
    return _build_struct(cls, struct, fields)


def _build_struct(cls: Any, struct: Any, fields: dict[str, Any]) -> Any:
    by_name = {f.name: f for f in struct._fields}
    out: dict[str, Any] = {}
    for name, value in fields.items():
        field = by_name.get(name)
        if field is not None and value is not None and (field.is_struct_array() or field.is_struct()):
            # Shared structures get one class per place of use, found on the enclosing class.
            sub = field.data_class or getattr(cls, field.type_str.removeprefix("[]"))
            if field.is_struct_array():
                value = [_build_struct(sub, field, v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                value = _build_struct(sub, field, value)
        out[name] = value
    return cls(**out)
