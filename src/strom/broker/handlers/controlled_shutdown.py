"""ControlledShutdown (broker -> controller): move leadership off a broker before it stops.

Strom's brokers send v3; v0-v3 (Kafka 3.9's range) are served: v0-v1 carry no broker epoch (not checked),
and v0 comes with a request header without a client id (see codec.parse_request_header).
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.handlers import error_code_of
from strom.broker.request import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import ControlledShutdownResponse, build
from strom.security.acl import AclOperation

API_KEY = ApiKey.CONTROLLED_SHUTDOWN
VERSIONS = (0, 3)  # Strom's brokers send v3


async def handle(ctx: RequestContext, request: Any) -> ControlledShutdownResponse:
    cluster = ctx.services.cluster
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return build(ControlledShutdownResponse, error_code=Errors.ClusterAuthorizationFailedError.errno,
                     remaining_partitions=[])
    if cluster is None or not cluster.controller.active:
        return build(ControlledShutdownResponse, error_code=Errors.NotControllerError.errno, remaining_partitions=[])
    try:
        remaining = await cluster.controller.controlled_shutdown(request.broker_id, request.broker_epoch)
    except Errors.KafkaError as exc:
        return build(ControlledShutdownResponse, error_code=error_code_of(exc), remaining_partitions=[])
    return build(ControlledShutdownResponse, error_code=0, remaining_partitions=[
        {"topic_name": t, "partition_index": p} for t, p in remaining])
