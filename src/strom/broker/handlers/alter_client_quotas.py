"""AlterClientQuotas: set or remove quotas of users, client ids and (user, client id) pairs, every broker
applying them as the change reaches it."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterClientQuotasResponse

from strom.broker.quota.admin import QuotaAlteration, alter_client_quotas
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS

Entry = AlterClientQuotasResponse.EntryData
CLUSTER_AUTHORIZATION_FAILED = 31


async def handle(ctx: RequestContext, request: Any) -> AlterClientQuotasResponse:
    if not ctx.authorize_cluster(AclOperation.ALTER_CONFIGS):  # as Kafka: quotas are cluster configs
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
            Entry(error_code=CLUSTER_AUTHORIZATION_FAILED, error_message="Not authorized to alter client quotas "
                  "(AlterConfigs on the cluster)",
                  entity=[Entry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                          for e in entry.entity])
            for entry in request.entries])
    alterations = [QuotaAlteration([(e.entity_type, e.entity_name) for e in entry.entity],
                                   [(op.key, op.value, op.remove) for op in entry.ops])
                   for entry in request.entries]
    await alter_client_quotas(ctx.metadata, alterations, request.validate_only)
    entries = [Entry(error_code=a.error_code, error_message=a.error_message,
                     entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in a.entity])
               for a in alterations]
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=entries)
