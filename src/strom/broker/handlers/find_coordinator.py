"""FindCoordinator: which broker coordinates a group (v0-v3 one key, v4+ a batch of keys).

The coordinator is the leader of the group's ``__consumer_offsets`` partition; the
topic is created on first use. Transaction coordinators do not exist yet, so
transactional keys get COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors
from kafka.protocol.metadata import FindCoordinatorResponse

from strom.broker.request import RequestContext
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME, partition_for
from strom.coordinator.group.startup import ensure_offsets_topic
from strom.protocol.api_keys import ApiKey

API_KEY = ApiKey.FIND_COORDINATOR
VERSIONS = (0, 4)
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
Coordinator = FindCoordinatorResponse.Coordinator


async def lookup(ctx: RequestContext, key: str | None, key_type: int) -> tuple[int, str | None, int, str, int]:
    """(error, message, node id, host, port) for one key."""
    services = ctx.services
    if key_type == TRANSACTION_KEY_TYPE:
        finder = services.find_transaction_coordinator
        if finder is None:
            return Errors.CoordinatorNotAvailableError.errno, "transactions are not supported yet", -1, "", -1
        return finder(key)
    if key_type != GROUP_KEY_TYPE:
        return Errors.InvalidRequestError.errno, f"unknown coordinator key type {key_type}", -1, "", -1
    if key is None:
        return Errors.InvalidGroupIdError.errno, "null group id", -1, "", -1
    try:
        topic = await ensure_offsets_topic(services.config, services.metadata, services.admin_manager)
    except Errors.KafkaError as exc:
        return Errors.CoordinatorNotAvailableError.errno, str(exc), -1, "", -1
    if topic is None or not topic.partitions:
        return Errors.CoordinatorNotAvailableError.errno, None, -1, "", -1
    state = topic.partitions.get(partition_for(key, len(topic.partitions)))
    brokers = {b.broker_id: b for b in services.metadata.live_brokers()}
    broker = brokers.get(state.leader) if state is not None else None
    if broker is None:
        return Errors.CoordinatorNotAvailableError.errno, f"{GROUP_METADATA_TOPIC_NAME} has no live leader", \
            -1, "", -1
    return 0, None, broker.broker_id, broker.host, broker.port


async def handle(ctx: RequestContext, request: Any) -> FindCoordinatorResponse:
    key_type = request.key_type if ctx.version >= 1 else GROUP_KEY_TYPE
    if ctx.version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            err, msg, node, host, port = await lookup(ctx, key, key_type)
            coordinators.append(Coordinator(key=key, node_id=node, host=host, port=port, error_code=err,
                                             error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    err, msg, node, host, port = await lookup(ctx, request.key, key_type)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=msg, node_id=node, host=host,
                                   port=port)
