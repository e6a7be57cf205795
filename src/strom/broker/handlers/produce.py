"""Produce: batch-level append of v2 RecordBatches; acks=0 gets no response at all."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer import ProduceResponse

from strom.broker.handlers import error_code_of, error_message_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.PRODUCE
TopicResp = ProduceResponse.TopicProduceResponse
PartResp = TopicResp.PartitionProduceResponse


async def handle(ctx: RequestContext, request: Any) -> ProduceResponse | None:
    rm = ctx.server.replica_manager
    acks = request.acks
    if request.transactional_id is not None:
        # Transactions come later; refuse clearly instead of writing half a transaction.
        err = Errors.TransactionalIdAuthorizationFailedError.errno
    else:
        err = 0
    if acks not in (0, 1, -1):
        err = Errors.InvalidRequiredAcksError.errno
    responses = []
    for topic in request.topic_data:
        parts = []
        for pd in topic.partition_data:
            resp = PartResp(index=pd.index, error_code=err, base_offset=-1, log_append_time_ms=-1,
                            log_start_offset=-1, record_errors=[], error_message=None)
            if not err:
                try:
                    if pd.records is None:
                        raise Errors.InvalidRecordError("no records in produce request")
                    info = rm.append_records(topic.name, pd.index, pd.records, acks)
                    resp.base_offset = info.first_offset
                    resp.log_append_time_ms = info.log_append_time_ms
                    resp.log_start_offset = info.log_start_offset
                except Exception as exc:
                    resp.error_code = error_code_of(exc)
                    resp.error_message = error_message_of(exc)
            parts.append(resp)
        responses.append(TopicResp(name=topic.name, partition_responses=parts))
    if acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)
