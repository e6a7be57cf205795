"""ZooKeeper-mode cluster metadata: Kafka 3.x's znode layout (`zk_data`) and client (`KafkaZkClient`)."""

from strom.cluster.zk.errors import (
    BadVersionError,
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    KafkaZkError,
    NodeExistsError,
    TopicExistsError,
    ZkConnectionError,
    ZNodeNotFoundError,
)
from strom.cluster.zk.kafka_zk_client import KafkaZkClient, SessionState
from strom.cluster.zk.zk_data import (
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
