"""EndTxn: commit or abort; answered once PrepareCommit/PrepareAbort is durable (markers follow)."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer.transaction import EndTxnResponse

from strom.broker.handlers import fenced_error_for
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.END_TXN
VERSIONS = (0, 4)  # v4 (KIP-890): the client also understands TRANSACTION_ABORTABLE


async def handle(ctx: RequestContext, request: Any) -> EndTxnResponse:
    coordinator = ctx.services.transaction_coordinator
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        error = Errors.TransactionalIdAuthorizationFailedError.errno
    elif coordinator is None:
        error = Errors.CoordinatorNotAvailableError.errno
    else:
        error = await coordinator.handle_end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    error = fenced_error_for(error, ctx.version, 2)
    return EndTxnResponse(throttle_time_ms=0, error_code=error)
