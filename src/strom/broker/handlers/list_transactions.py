"""ListTransactions (v0-v1): the transactional ids this broker coordinates, filtered by state,
producer id and (v1) how long the transaction has been open."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin.transactions import ListTransactionsResponse

from strom.broker.request import RequestContext
from strom.coordinator.transaction.transaction_metadata import TransactionState
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.LIST_TRANSACTIONS
VERSIONS = (0, 1)
_State = ListTransactionsResponse.TransactionState


async def handle(ctx: RequestContext, request: Any) -> ListTransactionsResponse:
    coordinator = ctx.services.transaction_coordinator
    names = list(request.state_filters or [])
    unknown = [n for n in names if TransactionState.from_kafka_name(n) is None]
    states = {s for n in names if (s := TransactionState.from_kafka_name(n)) is not None}
    if names and not states:
        return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                        transaction_states=[])
    if coordinator is None:
        return ListTransactionsResponse(throttle_time_ms=0, error_code=Errors.CoordinatorNotAvailableError.errno,
                                        unknown_state_filters=unknown, transaction_states=[])
    duration = request.duration_filter if ctx.version >= 1 else -1
    err, found = coordinator.handle_list_transactions(states or None, set(request.producer_id_filters or []) or None,
                                                      duration)
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=err, unknown_state_filters=unknown,
        transaction_states=[_State(transactional_id=md.transactional_id, producer_id=md.producer_id,
                                   transaction_state=md.state.kafka_name) for md in found
                            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                             md.transactional_id)])
