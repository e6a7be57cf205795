"""One module per Kafka API. Each declares API_KEY and `async def handle(ctx, request)`."""

from __future__ import annotations

import logging

import kafka.errors as Errors

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
