"""Metadata: brokers, controller, topics with stable IDs, partition leaders and ISR.

Auto-creates unknown topics when `auto.create.topics.enable` and the client allow it. A topic that
exists but has no leaders in this broker's cache yet (being created) is answered LEADER_NOT_AVAILABLE,
as Kafka does, so clients retry; it never flips back to UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import uuid
from collections.abc import Container
from typing import Any

import kafka.errors as Errors
from kafka.protocol.metadata import MetadataResponse

from strom.broker.handlers import error_code_of
from strom.broker.request import RequestContext
from strom.metadata.store import TopicMetadata
from strom.protocol.api_keys import ApiKey
from strom.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = ApiKey.METADATA
ZERO_UUID = uuid.UUID(int=0)
TOPIC_AUTHORIZATION_FAILED = Errors.TopicAuthorizationFailedError.errno
Topic = MetadataResponse.MetadataResponseTopic
Part = Topic.MetadataResponsePartition


def _topic_response(topic: TopicMetadata, offline: Container[int] = (), local_id: int = -1) -> Any:
    """``offline``: partitions whose log dir failed here; shown leaderless with KAFKA_STORAGE_ERROR while
    this broker (``local_id``) is still their leader, else led elsewhere with this replica offline."""
    parts = [
        Part(error_code=0, partition_index=p.partition, leader_id=p.leader, leader_epoch=p.leader_epoch,
             replica_nodes=p.replicas, isr_nodes=p.isr,
             offline_replicas=[local_id] if p.partition in offline and local_id in p.replicas else [])
        if p.partition not in offline or (local_id >= 0 and p.leader != local_id) else
        Part(error_code=Errors.KafkaStorageError.errno, partition_index=p.partition, leader_id=-1,
             leader_epoch=p.leader_epoch, replica_nodes=p.replicas, isr_nodes=[r for r in p.isr if r != p.leader],
             offline_replicas=[p.leader])
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
    ]
    return Topic(error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=topic.is_internal,
                 partitions=parts, authorized_operations=None)


def _error_topic(name: str | None, error_code: int, topic_id: uuid.UUID = ZERO_UUID) -> Any:
    return Topic(error_code=error_code, name=name, topic_id=topic_id, is_internal=False, partitions=[],
                 authorized_operations=None)


async def handle(ctx: RequestContext, request: Any) -> MetadataResponse:
    services = ctx.services
    store = services.metadata
    version = ctx.version
    requested = request.topics
    if version == 0 and not requested:
        requested = None  # v0: an empty list means all topics
    allow_auto = request.allow_auto_topic_creation if version >= 4 else True
    offline: dict[str, set[int]] = {}
    for name, index in services.replica_manager.offline_partitions:
        offline.setdefault(name, set()).add(index)

    authorizer = services.authorizer
    with_topic_ops = version >= 8 and request.include_topic_authorized_operations

    def topic_response(t: TopicMetadata) -> Any:
        answer = _topic_response(t, offline.get(t.name, ()), ctx.broker_id if services.cluster is not None else -1)
        if with_topic_ops:
            answer.authorized_operations = ctx.authorized_operations(ResourceType.TOPIC, t.name)
        return answer

    def may_describe(name: str) -> bool:
        return authorizer is None or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    topics: list[Any] = []
    if requested is None:
        # All topics: those the principal may not describe are left out, as if they did not exist.
        topics = [topic_response(t) for t in store.topics().values() if may_describe(t.name)]
    else:
        for req in requested:
            name = req.name
            if name is None and req.topic_id not in (None, ZERO_UUID):
                t = store.topic_by_id(req.topic_id)
                if t is not None and not may_describe(t.name):
                    topics.append(_error_topic(None, TOPIC_AUTHORIZATION_FAILED, req.topic_id))
                    continue
                topics.append(topic_response(t) if t else _error_topic(None, Errors.UnknownTopicIdError.errno,
                                                                          req.topic_id))
                continue
            if not may_describe(name):
                topics.append(_error_topic(name, TOPIC_AUTHORIZATION_FAILED))
                continue
            t = store.topic(name)
            if (t is None and not store.being_created(name) and allow_auto
                    and services.config.get("auto.create.topics.enable")):
                if authorizer is not None and not ctx.authorize_cluster(AclOperation.CREATE) and not ctx.authorize(
                        AclOperation.CREATE, ResourceType.TOPIC, name):
                    topics.append(_error_topic(name, TOPIC_AUTHORIZATION_FAILED))
                    continue
                try:
                    await services.admin_manager.create_topic(name)
                except Errors.TopicAlreadyExistsError:
                    pass
                except Errors.KafkaError as exc:
                    topics.append(_error_topic(name, error_code_of(exc)))
                    continue
                t = store.topic(name)  # a single node has it at once; a cluster once the controller told us
            if t is not None:
                topics.append(topic_response(t))
            elif store.being_created(name):
                # As Kafka: the topic exists but this broker has no leaders for it yet. Never its partitions
                # without leaders, nor UNKNOWN_TOPIC_OR_PARTITION afterwards (metadata must not go backwards).
                topics.append(_error_topic(name, Errors.LeaderNotAvailableError.errno))
            else:
                topics.append(_error_topic(name, Errors.UnknownTopicOrPartitionError.errno))
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=b.broker_id, host=ep[0], port=ep[1], rack=b.rack)
               for b in store.live_brokers() if (ep := b.endpoint(ctx.listener_name)) is not None]
    cluster_ops = ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) \
        if 8 <= version <= 10 and request.include_cluster_authorized_operations else None
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=store.cluster_id,
                            controller_id=store.controller_id(), topics=topics,
                            authorized_operations=cluster_ops, error_code=0)
