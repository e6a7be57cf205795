"""Kafka message definitions (JSON) that kafka-python does not ship: the ZooKeeper-mode
inter-broker APIs. `strom.protocol.inter_broker` loads them; see that module."""
