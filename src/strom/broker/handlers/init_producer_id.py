"""InitProducerId: hands producers an id and epoch.

Idempotent producers (no transactional id) get a fresh id from blocks reserved in the
metadata store, so ids stay unique across restarts. Transactional producers go to the
transaction coordinator, which bumps the id's epoch and so fences older instances.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer import InitProducerIdResponse

from strom.broker.handlers import fenced_error_for
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.INIT_PRODUCER_ID
MAX_EPOCH = 32767


async def handle(ctx: RequestContext, request: Any) -> InitProducerIdResponse:
    resp = InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            resp.error_code = Errors.TransactionalIdAuthorizationFailedError.errno
            return resp
        coordinator = ctx.services.transaction_coordinator
        if coordinator is None:
            resp.error_code = Errors.CoordinatorNotAvailableError.errno
            return resp
        expected = None
        if ctx.version >= 3 and request.producer_id >= 0:
            expected = (request.producer_id, request.producer_epoch)
        result = await coordinator.handle_init_producer_id(request.transactional_id,
                                                           request.transaction_timeout_ms, expected)
        error = result.error
        error = fenced_error_for(error, ctx.version, 4)
        resp.error_code, resp.producer_id, resp.producer_epoch = error, result.producer_id, result.producer_epoch
        return resp
    authorizer = ctx.services.authorizer
    if authorizer is not None and not ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE) and \
            not authorizer.authorize_by_resource_type(ctx.principal, ctx.client_host, AclOperation.WRITE,
                                                      ResourceType.TOPIC):
        # An idempotent producer needs IdempotentWrite on the cluster, or Write on some topic (KIP-679).
        resp.error_code = Errors.ClusterAuthorizationFailedError.errno
        return resp
    pid_manager = ctx.producer_id_manager
    if ctx.version >= 3 and request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        # KIP-360: an idempotent producer may bump its own epoch to reset sequences.
        resp.producer_id, resp.producer_epoch = request.producer_id, request.producer_epoch + 1
    else:
        resp.producer_id, resp.producer_epoch = await pid_manager.generate(), 0
    return resp
