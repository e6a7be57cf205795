"""UpdateMetadata (controller -> broker): the partition states and live brokers clients are told."""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.request import RequestContext
from strom.controller.broker_epoch import is_stale_broker_epoch
from strom.metadata.store import BrokerInfo, PartitionState
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import UpdateMetadataResponse
from strom.security.acl import AclOperation

API_KEY = ApiKey.UPDATE_METADATA
VERSIONS = (7, 7)


async def handle(ctx: RequestContext, request: Any) -> UpdateMetadataResponse:
    cluster = ctx.services.cluster
    if cluster is None or not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return UpdateMetadataResponse(error_code=Errors.ClusterAuthorizationFailedError.errno)
    if request.controller_epoch < ctx.replica_manager.controller_epoch:
        return UpdateMetadataResponse(error_code=Errors.StaleControllerEpochError.errno)
    if is_stale_broker_epoch(request.broker_epoch, cluster.store.broker_epoch):
        return UpdateMetadataResponse(error_code=Errors.StaleBrokerEpochError.errno)
    listener = ctx.config.inter_broker_listener_name()
    brokers = []
    for b in request.live_brokers:
        endpoint = next((e for e in b.endpoints if e.listener == listener), b.endpoints[0] if b.endpoints else None)
        if endpoint is not None:
            brokers.append(BrokerInfo(b.id, endpoint.host, endpoint.port, b.rack,
                                      {e.listener: (e.host, e.port) for e in b.endpoints}))
    topics = [
        (t.topic_name, t.topic_id, [
            PartitionState(p.partition_index, p.leader, p.leader_epoch, list(p.replicas), list(p.isr),
                           p.zk_version, list(p.offline_replicas))
            for p in t.partition_states])
        for t in request.topic_states]
    await cluster.store.load_topic_configs([name for name, _, _ in topics if cluster.store.topic(name) is None])
    cluster.store.apply_update_metadata(request.controller_id, brokers, topics)
    return UpdateMetadataResponse(error_code=0)
