"""DescribeCluster: cluster id, controller and brokers (used by AdminClient)."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.admin import DescribeClusterResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = ApiKey.DESCRIBE_CLUSTER


async def handle(ctx: RequestContext, request: Any) -> DescribeClusterResponse:
    store = ctx.metadata
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return DescribeClusterResponse(throttle_time_ms=0, error_code=Errors.ClusterAuthorizationFailedError.errno,
                                       error_message=None, endpoint_type=1, cluster_id="", controller_id=-1,
                                       brokers=[], authorized_operations=None)
    brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=b.broker_id, host=ep[0], port=ep[1],
                                                             rack=b.rack, is_fenced=False)
               for b in store.live_brokers() if (ep := b.endpoint(ctx.listener_name)) is not None]
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1,
                                   cluster_id=store.cluster_id, controller_id=store.controller_id(),
                                   brokers=brokers, authorized_operations=ctx.authorized_operations(
                                       ResourceType.CLUSTER, CLUSTER_NAME)
                                   if request.include_cluster_authorized_operations else None)
