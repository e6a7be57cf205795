"""Broker epochs: the czxid of a broker's `/brokers/ids/<id>` registration, carried by controller requests."""

from __future__ import annotations


def is_stale_broker_epoch(in_request: int, current: int) -> bool:
    """Whether a controller request was meant for an earlier registration of this broker.

    Only an older epoch is stale: the controller sees a registration the moment ZooKeeper creates
    it and may send to the broker before the broker's own register call has returned its epoch,
    so an epoch newer than the one the broker knows is this registration (Kafka's rule too).
    Refusing it would leave the newcomer without metadata until some later change.
    """
    return in_request != -1 and in_request < current
