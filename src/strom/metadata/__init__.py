"""Cluster metadata: the store interface, the single-node (embedded) and ZooKeeper stores, the
publisher, replica placement, and the ZooKeeper client and launcher."""
