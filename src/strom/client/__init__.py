"""The broker's own Kafka client: the bottom layer, shared by replication, the controller
channel and Spark tasks (which import nothing from the server packages)."""
