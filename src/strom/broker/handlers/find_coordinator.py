"""FindCoordinator: which broker coordinates a group or a transactional id (v0-v3 one key, v4-v6 a batch).

The coordinator of a group is the leader of its ``__consumer_offsets`` partition, that of a
transactional id (key type 1) the leader of its ``__transaction_state`` partition; both
topics are created on first use.

While the key's partition has no live leader in this broker's metadata (the topic was just
created, or its leader is being re-elected) the answer waits for one, up to
``COORDINATOR_WAIT_MS``, before it says COORDINATOR_NOT_AVAILABLE. Kafka answers at once, and Java
clients retry until their deadline, but librdkafka sends a coordinator lookup for a transaction's
offsets (``send_offsets_to_transaction``) only three times, ~100 ms apart, then drops it without
failing the call (its timeout is not applied there): creating 50 RF 3 partitions on a busy
machine outlasts that, and the producer hung for good.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kafka.errors as Errors
from kafka.protocol.metadata import FindCoordinatorResponse

from strom.broker.handlers import denied_message
from strom.broker.request import RequestContext
from strom.coordinator.common import partition_for
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME
from strom.coordinator.group.startup import ensure_offsets_topic
from strom.coordinator.transaction.startup import ensure_transaction_state_topic
from strom.coordinator.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC_NAME
from strom.metadata.store import BrokerInfo
from strom.protocol.api_keys import ApiKey
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.FIND_COORDINATOR
VERSIONS = (0, 6)  # v5: KIP-890 TRANSACTION_ABORTABLE, v6: share groups (none here: INVALID_REQUEST)
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
# Longest wait for a coordinator partition's leader (module docstring); well within clients' request timeouts.
COORDINATOR_WAIT_MS = 5000
Coordinator = FindCoordinatorResponse.Coordinator


async def lookup(ctx: RequestContext, key: str | None, key_type: int, deadline: float | None = None
                 ) -> tuple[int, str | None, int, str, int]:
    """(error, message, node id, host, port) for one key; a missing leader is waited for until ``deadline``
    (loop time; one deadline for every key of a request)."""
    services = ctx.services
    if key_type == TRANSACTION_KEY_TYPE:
        if not key:
            return Errors.InvalidRequestError.errno, "empty transactional id", -1, "", -1
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return (Errors.TransactionalIdAuthorizationFailedError.errno,
                    denied_message(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key), -1, "", -1)
        if services.transaction_coordinator is None:
            return Errors.CoordinatorNotAvailableError.errno, None, -1, "", -1
        ensure, topic_name = ensure_transaction_state_topic, TRANSACTION_STATE_TOPIC_NAME
    elif key_type == GROUP_KEY_TYPE:
        if key is None:
            return Errors.InvalidGroupIdError.errno, "null group id", -1, "", -1
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return (Errors.GroupAuthorizationFailedError.errno,
                    denied_message(AclOperation.DESCRIBE, ResourceType.GROUP, key), -1, "", -1)
        ensure, topic_name = ensure_offsets_topic, GROUP_METADATA_TOPIC_NAME
    else:
        return Errors.InvalidRequestError.errno, f"unknown coordinator key type {key_type}", -1, "", -1
    try:
        topic = await ensure(services.config, services.metadata, services.admin_manager)
    except Errors.KafkaError as exc:
        return Errors.CoordinatorNotAvailableError.errno, str(exc), -1, "", -1
    metadata = services.metadata

    def live_leader() -> BrokerInfo | None:
        current = metadata.topic(topic_name) or topic
        if current is None or not current.partitions:
            return None
        state = current.partitions.get(partition_for(key, len(current.partitions)))
        if state is None or state.leader < 0:
            return None
        return next((b for b in metadata.live_brokers() if b.broker_id == state.leader), None)

    broker = live_leader()
    loop = asyncio.get_running_loop()
    if deadline is None:
        deadline = loop.time() + COORDINATOR_WAIT_MS / 1000
    wait_ms = int((deadline - loop.time()) * 1000)
    if broker is None and wait_ms > 0 and await metadata.await_metadata(lambda: live_leader() is not None, wait_ms):
        broker = live_leader()
    if broker is None:
        return Errors.CoordinatorNotAvailableError.errno, f"{topic_name} has no live leader", -1, "", -1
    endpoint = broker.endpoint(ctx.listener_name)
    if endpoint is None:
        return (Errors.CoordinatorNotAvailableError.errno, f"the coordinator has no listener {ctx.listener_name}",
                -1, "", -1)
    return 0, None, broker.broker_id, endpoint[0], endpoint[1]


async def handle(ctx: RequestContext, request: Any) -> FindCoordinatorResponse:
    key_type = request.key_type if ctx.version >= 1 else GROUP_KEY_TYPE
    if ctx.version >= 4:
        coordinators = []
        deadline = asyncio.get_running_loop().time() + COORDINATOR_WAIT_MS / 1000
        for key in request.coordinator_keys:
            err, msg, node, host, port = await lookup(ctx, key, key_type, deadline)
            coordinators.append(Coordinator(key=key, node_id=node, host=host, port=port, error_code=err,
                                             error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    err, msg, node, host, port = await lookup(ctx, request.key, key_type)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=msg, node_id=node, host=host,
                                   port=port)
