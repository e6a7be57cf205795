"""Errors of the ZooKeeper layer, named after the situations Kafka's controller handles.

Callers catch these, never kazoo's exceptions: the controller must tell "someone else
is controller now" (stop writing) from "my cached version is stale" (re-read, retry).
"""

from __future__ import annotations


class KafkaZkError(Exception):
    """Base class of every error raised by `KafkaZkClient`."""


class ZkConnectionError(KafkaZkError):
    """No ZooKeeper server answered within the connection timeout (or the client is closed)."""


class ZNodeNotFoundError(KafkaZkError):
    """A znode the operation needs does not exist (e.g. the state of an unknown partition)."""


class BadVersionError(KafkaZkError):
    """A conditional write lost: the znode changed since the caller read its version."""


class ControllerMovedError(KafkaZkError):
    """`/controller_epoch` changed (or `/controller` is taken): this controller is stale and fenced."""


class BrokerIdAlreadyRegisteredError(KafkaZkError):
    """`/brokers/ids/<id>` exists and belongs to another live session (a broker with the same id)."""


class TopicExistsError(KafkaZkError):
    """`/brokers/topics/<t>` already exists."""


class NodeExistsError(KafkaZkError):
    """A znode the operation creates already exists (e.g. partition state written twice)."""
