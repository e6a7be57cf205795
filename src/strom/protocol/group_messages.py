"""KIP-848 consumer group APIs that kafka-python does not ship (ConsumerGroupHeartbeat and
ConsumerGroupDescribe).

The layouts are Kafka 4.x's message definitions, kept as JSON in `strom.protocol.messages` and
driven by the same generic codec as every other API. A uuid field decodes the all-zero UUID as
None (and encodes None as zero).
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from strom.protocol import messages


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=messages): pass  # noqa: E701
class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=messages): pass  # noqa: E701
class ConsumerGroupDescribeRequest(ApiMessage, load_json=messages): pass  # noqa: E701
class ConsumerGroupDescribeResponse(ApiMessage, load_json=messages): pass  # noqa: E701


__all__ = ["ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse",
           "ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse"]
