"""ZooKeeper mode: Kafka 3.x's znode layout (`zk_data`), the kazoo-based client (`KafkaZkClient`), the server launcher."""

from strom.metadata.zk.errors import (
    BadVersionError,
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    KafkaZkError,
    NodeExistsError,
    TopicExistsError,
    ZkConnectionError,
    ZNodeNotFoundError,
)
from strom.metadata.zk.kafka_zk_client import KafkaZkClient, SessionState
from strom.metadata.zk.zk_data import (
    BrokerRegistration,
    LeaderIsrAndControllerEpoch,
    ProducerIdsBlock,
    TopicAssignment,
)

__all__ = [
    "BadVersionError",
    "BrokerIdAlreadyRegisteredError",
    "BrokerRegistration",
    "ControllerMovedError",
    "KafkaZkClient",
    "KafkaZkError",
    "LeaderIsrAndControllerEpoch",
    "NodeExistsError",
    "ProducerIdsBlock",
    "SessionState",
    "TopicAssignment",
    "TopicExistsError",
    "ZNodeNotFoundError",
    "ZkConnectionError",
]
