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
