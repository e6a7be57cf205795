"""One module per Kafka API. Each declares API_KEY and `async def handle(ctx, request)`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import kafka.errors as Errors

from strom.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.request import RequestContext

log = logging.getLogger(__name__)


def error_code_of(exc: BaseException) -> int:
    """Kafka error code for an exception; anything unexpected is UNKNOWN_SERVER_ERROR (-1)."""
    if isinstance(exc, Errors.KafkaError) and isinstance(getattr(exc, "errno", None), int):
        return exc.errno
    log.error("unexpected error while handling a request", exc_info=exc)
    return -1


def error_message_of(exc: BaseException) -> str:
    """The human sentence only: kafka-python's str() prefixes '[Error N] ClassName:'."""
    if exc.args and isinstance(exc.args[0], str) and exc.args[0]:
        return exc.args[0]
    return getattr(exc, "description", None) or type(exc).__name__


def fenced_error_for(error: int, version: int, since: int) -> int:
    """PRODUCER_FENCED exists from version ``since`` of an API (KIP-588); older clients get
    INVALID_PRODUCER_EPOCH, which they also treat as fatal."""
    if error == Errors.ProducerFencedError.errno and version < since:
        return Errors.InvalidProducerEpochError.errno
    return error


_DENIED: dict[ResourceType, type[Errors.BrokerResponseError]] = {
    ResourceType.TOPIC: Errors.TopicAuthorizationFailedError,
    ResourceType.GROUP: Errors.GroupAuthorizationFailedError,
    ResourceType.CLUSTER: Errors.ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: Errors.TransactionalIdAuthorizationFailedError,
}


def denied_message(operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> str:
    """The error_message of an authorization failure. Kafka always sends one, and some clients
    (librdkafka's DescribeUserScramCredentials) abort the process on a refusal without it."""
    return f"Not authorized to {operation.camel} {resource_type.camel} {name}"


def require_authorized(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                       name: str = CLUSTER_NAME) -> None:
    """Raise the resource type's authorization error unless the request may do `operation` on the resource."""
    if not ctx.authorize(operation, resource_type, name):
        raise _DENIED[resource_type](denied_message(operation, resource_type, name))
