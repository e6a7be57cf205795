"""InitProducerId: hands idempotent producers an id and epoch.

Ids come in blocks reserved in the metadata store, so they stay unique across
restarts. Transactional ids are refused until the transaction coordinator exists.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer import InitProducerIdResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.INIT_PRODUCER_ID
MAX_EPOCH = 32767


async def handle(ctx: RequestContext, request: Any) -> InitProducerIdResponse:
    resp = InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:
        resp.error_code = Errors.TransactionalIdAuthorizationFailedError.errno
        return resp
    pid_manager = ctx.producer_id_manager
    if ctx.version >= 3 and request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        # KIP-360: an idempotent producer may bump its own epoch to reset sequences.
        resp.producer_id, resp.producer_epoch = request.producer_id, request.producer_epoch + 1
    else:
        resp.producer_id, resp.producer_epoch = await pid_manager.generate(), 0
    return resp
