"""UpdateMetadata (controller -> broker): the partition states and live brokers clients are told.

Strom's controller sends v7; v0-v8 (Kafka 3.9's range) are read: v0 names one host and port per broker,
v1-v2 endpoints without listener names (the security protocol names the listener, as in Kafka), v0-v4 list
partitions ungrouped, v7+ carry topic ids (an older version's topic keeps the id this broker knows).
"""

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
VERSIONS = (0, 8)  # Strom's controller sends v7
_SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


async def handle(ctx: RequestContext, request: Any) -> UpdateMetadataResponse:
    cluster = ctx.services.cluster
    if cluster is None or not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return UpdateMetadataResponse(error_code=Errors.ClusterAuthorizationFailedError.errno)
    endpoints_of = {b.id: _endpoints(ctx.version, b) for b in request.live_brokers}  # parsed before any check
    topics = _topics(ctx, request)
    if request.controller_epoch < ctx.replica_manager.controller_epoch:
        return UpdateMetadataResponse(error_code=Errors.StaleControllerEpochError.errno)
    if is_stale_broker_epoch(request.broker_epoch, cluster.store.broker_epoch):
        return UpdateMetadataResponse(error_code=Errors.StaleBrokerEpochError.errno)
    listener = ctx.config.inter_broker_listener_name()
    brokers = []
    for b in request.live_brokers:
        endpoints = endpoints_of[b.id]
        endpoint = endpoints.get(listener) or next(iter(endpoints.values()), None)
        if endpoint is not None:
            brokers.append(BrokerInfo(b.id, endpoint[0], endpoint[1], b.rack, endpoints))
    await cluster.store.load_topic_configs([name for name, _, _ in topics if cluster.store.topic(name) is None])
    cluster.store.apply_update_metadata(request.controller_id, brokers, topics)
    return UpdateMetadataResponse(error_code=0)


def _endpoints(version: int, broker: Any) -> dict[str, tuple[str, int]]:
    """listener name -> (host, port) of one live broker."""
    if version == 0:
        return {"PLAINTEXT": (broker.v0_host, broker.v0_port)}
    return {(e.listener if version >= 3 else _SECURITY_PROTOCOLS.get(e.security_protocol, "PLAINTEXT")): (e.host, e.port)
            for e in broker.endpoints}


def _topics(ctx: RequestContext, request: Any) -> list[tuple[str, Any, list[PartitionState]]]:
    """(topic name, topic id, partition states) per topic, whatever the version's layout."""
    def state(p: Any) -> PartitionState:
        return PartitionState(p.partition_index, p.leader, p.leader_epoch, list(p.replicas), list(p.isr),
                              p.zk_version, list(p.offline_replicas or ()))

    if ctx.version >= 5:
        return [(t.topic_name, t.topic_id if ctx.version >= 7 else _known_topic_id(ctx, t.topic_name),
                 [state(p) for p in t.partition_states]) for t in request.topic_states]
    grouped: dict[str, list[PartitionState]] = {}
    for p in request.ungrouped_partition_states:
        grouped.setdefault(p.topic_name, []).append(state(p))
    return [(name, _known_topic_id(ctx, name), states) for name, states in grouped.items()]


def _known_topic_id(ctx: RequestContext, name: str) -> Any:
    assert ctx.services.cluster is not None
    topic = ctx.services.cluster.store.topic(name)
    return topic.topic_id if topic is not None else None
