"""DescribeClientQuotas: the quota entities (users, client ids, both, defaults) that match a filter."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClientQuotasResponse

from strom.broker.quota.admin import INVALID_REQUEST, QuotaFilter, QuotaRequestError, describe_client_quotas
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS

Entry = DescribeClientQuotasResponse.EntryData
CLUSTER_AUTHORIZATION_FAILED = 31


async def handle(ctx: RequestContext, request: Any) -> DescribeClientQuotasResponse:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):  # as Kafka: quotas are cluster configs
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                                            error_message="Not authorized to describe client quotas "
                                                          "(DescribeConfigs on the cluster)", entries=None)
    quota_filter = QuotaFilter([(c.entity_type, c.match_type, c.match) for c in request.components], request.strict)
    try:
        found = describe_client_quotas(ctx.metadata, quota_filter)
    except QuotaRequestError as exc:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=INVALID_REQUEST, error_message=str(exc),
                                            entries=None)
    entries = [Entry(entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                     values=[Entry.ValueData(key=k, value=v) for k, v in sorted(values.items())])
               for entity, values in found]
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
