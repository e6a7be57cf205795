"""SaslAuthenticate: one token of the SASL exchange; v1+ tells the client how long its session lasts."""

from __future__ import annotations

from typing import Any

from kafka.protocol.sasl import SaslAuthenticateResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.authenticator import ILLEGAL_SASL_STATE

API_KEY = ApiKey.SASL_AUTHENTICATE
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Any) -> SaslAuthenticateResponse:
    authenticator = ctx.session.authenticator
    if authenticator is None:
        return SaslAuthenticateResponse(error_code=ILLEGAL_SASL_STATE, error_message="not a SASL listener",
                                        auth_bytes=b"", session_lifetime_ms=0)
    result = await authenticator.authenticate(bytes(request.auth_bytes or b""), ctx.version)
    return SaslAuthenticateResponse(error_code=result.error_code, error_message=result.error_message,
                                    auth_bytes=result.auth_bytes, session_lifetime_ms=result.session_lifetime_ms)
