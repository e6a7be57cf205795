"""Riding out a partition leader change, as Kafka's own clients do.

When a broker dies, its partitions have no reachable leader until the controller notices
(the broker's ZooKeeper session expires) and elects a new one from the ISR; clients see
NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, transport errors or time-outs meanwhile.
Kafka's consumer and admin client treat these as retriable: refresh metadata, back off and
try again, bounded by ``default.api.timeout.ms`` (60 s). The source's driver- and task-side
offset look-ups do the same here, so a leader kill is a pause, not a failed query.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

# Kafka's default.api.timeout.ms: how long a metadata or offset look-up may keep retrying.
LEADER_CHANGE_TIMEOUT_S = 60.0


def leader_moving_codes() -> frozenset[int]:
    """Error codes that mean "the leader moved or is being elected": refresh metadata and retry."""
    from confluent_kafka import KafkaError

    return frozenset({
        KafkaError.NOT_LEADER_FOR_PARTITION,  # Kafka's NOT_LEADER_OR_FOLLOWER (6)
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError._NODE_UPDATE,
        KafkaError._UNKNOWN_BROKER,
        # librdkafka drops a broker that vanished from metadata; requests in flight on it fail so.
        KafkaError._DESTROY_BROKER,
    })


def is_leader_change(exc: BaseException) -> bool:
    """Whether `exc` is a KafkaException a leader change explains (worth a metadata refresh and retry)."""
    from confluent_kafka import KafkaError, KafkaException

    if not isinstance(exc, KafkaException) or not exc.args or not isinstance(exc.args[0], KafkaError):
        return False
    err: KafkaError = exc.args[0]
    if err.fatal():
        return False
    return err.retriable() or err.code() in leader_moving_codes()


def attempts(timeout: float = LEADER_CHANGE_TIMEOUT_S, first_backoff: float = 0.1,
             max_backoff: float = 1.0) -> Iterator[int]:
    """Attempt numbers 0, 1, ... with a growing sleep between them, until `timeout` seconds have passed.

    At least one attempt is always made; the caller breaks out on success.
    """
    deadline = time.monotonic() + timeout
    backoff = first_backoff
    attempt = 0
    while True:
        yield attempt
        attempt += 1
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(backoff, left))
        backoff = min(backoff * 2, max_backoff)


def refresh_metadata(client: Any, topic: str | None = None) -> None:
    """Ask a broker for fresh metadata so the next request goes to the new leader; errors are ignored."""
    try:
        if topic is None:
            client.list_topics(timeout=5)
        else:
            client.list_topics(topic=topic, timeout=5)
    except Exception:  # noqa: BLE001 - a refresh is best effort; the retried call reports the real error
        pass

