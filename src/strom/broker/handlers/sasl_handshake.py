"""SaslHandshake: the client names its SASL mechanism; the answer lists the listener's enabled ones."""

from __future__ import annotations

from typing import Any

from kafka.protocol.sasl import SaslHandshakeResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.authenticator import ILLEGAL_SASL_STATE

API_KEY = ApiKey.SASL_HANDSHAKE
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Any) -> SaslHandshakeResponse:
    authenticator = ctx.session.authenticator
    if authenticator is None:  # not a SASL listener (Kafka answers the same)
        return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])
    error_code = authenticator.handshake(request.mechanism or "", ctx.version)
    return SaslHandshakeResponse(error_code=error_code, mechanisms=list(authenticator.config.mechanisms))
