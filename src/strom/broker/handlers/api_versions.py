"""ApiVersions: tells the client exactly which API versions Strom implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.metadata import ApiVersionsResponse

from strom.broker.request import RequestContext
from strom.protocol import codec
from strom.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from strom.broker.apis import KafkaApis

API_KEY = ApiKey.API_VERSIONS
UNSUPPORTED_VERSION = 35


def _body(apis: KafkaApis, error_code: int) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(apis.advertised().items())]
    return ApiVersionsResponse(error_code=error_code, api_keys=keys, throttle_time_ms=0)


async def handle(ctx: RequestContext, request: Any) -> ApiVersionsResponse:
    return _body(ctx.services.apis, 0)


def unsupported_version_response(ctx: RequestContext, apis: KafkaApis) -> bytes:
    """A v0 body and v0 header with UNSUPPORTED_VERSION, as Kafka answers newer clients."""
    body = bytes(_body(apis, UNSUPPORTED_VERSION).encode(version=0))
    head = codec.response_header(ctx.header.correlation_id, flexible=False)
    return len(head + body).to_bytes(4, "big") + head + body
