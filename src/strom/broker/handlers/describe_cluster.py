"""DescribeCluster: cluster id, controller and brokers (used by AdminClient).

As in Kafka, any authenticated principal may ask: the answer is what Metadata already tells every
client. Only the cluster's authorized operations are guarded: asked for by a principal without
Describe on the cluster, they come back empty.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClusterResponse

from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = ApiKey.DESCRIBE_CLUSTER


async def handle(ctx: RequestContext, request: Any) -> DescribeClusterResponse:
    store = ctx.metadata
    brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=b.broker_id, host=ep[0], port=ep[1],
                                                             rack=b.rack, is_fenced=False)
               for b in store.live_brokers() if (ep := b.endpoint(ctx.listener_name)) is not None]
    operations: set[int] | None = None  # None: not asked for
    if request.include_cluster_authorized_operations:
        operations = ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) \
            if ctx.authorize_cluster(AclOperation.DESCRIBE) else set()
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1,
                                   cluster_id=store.cluster_id, controller_id=store.controller_id(),
                                   brokers=brokers, authorized_operations=operations)
