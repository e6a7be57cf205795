"""ZooKeeper: Kafka's znode layout, the kazoo-based client, the server launcher."""
