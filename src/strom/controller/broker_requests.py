"""What the controller tells brokers: LeaderAndIsr, UpdateMetadata and StopReplica, from its context.

`KafkaController`'s state machines decide leaders and ISRs and record them in ZooKeeper; this turns
the recorded states into requests to the live brokers. A request carries at most
CONTROL_REQUEST_PARTITIONS partitions (UpdateMetadata keeps each topic whole), and its partition
states are built in passes that yield to the event loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from strom.config.listeners import SECURITY_PROTOCOL_IDS
from strom.controller.pacing import paced
from strom.protocol.inter_broker import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
    build,
    build_nested,
)
from strom.server_common.types import TopicPartition

if TYPE_CHECKING:
    from strom.controller.controller import ControllerContext
    from strom.controller.controller_channel import ControllerChannelManager
    from strom.metadata.zk import zk_data as zd

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
LEADER_DURING_DELETE = -2  # UpdateMetadata: the partition is being deleted
PLAINTEXT = SECURITY_PROTOCOL_IDS["PLAINTEXT"]
# Partition states per LeaderAndIsr / UpdateMetadata request: encoding (here) and decoding (there) one of
# 3,000 partitions held either event loop for ~0.3 s; several smaller requests, in order, say the same.
CONTROL_REQUEST_PARTITIONS = 1000
# Where a request's per-partition states sit; they are built one by one in paced passes.
_PARTITION_STATES = ("topic_states", "partition_states")


class BrokerRequests:
    """One controller term's requests to brokers: its context (partitions, live brokers, epoch) and channel."""

    def __init__(self, controller_id: int, ctx: ControllerContext, channel: ControllerChannelManager,
                 address: Callable[[zd.BrokerRegistration], tuple[str, int]],
                 on_leader_and_isr_response: Callable[[int], Callable[[Any], None]]) -> None:
        self.broker_id = controller_id
        self.ctx = ctx
        self.channel = channel
        self._address = address
        self._on_leader_and_isr_response = on_leader_and_isr_response

    async def leader_and_isr(self, tps: Iterable[TopicPartition], only: set[int] | None = None,
                                   is_new: bool = False) -> None:
        """One LeaderAndIsr per live replica broker (``only``: these brokers) with the states of ``tps`` it hosts."""
        per_broker: dict[int, dict[str, list[Any]]] = {}
        async for tp in paced(tps):
            pl = self.ctx.partitions.get(tp)
            if pl is None or pl.zk_version < 0:
                continue
            fields = dict(
                partition_index=tp[1], controller_epoch=pl.controller_epoch, leader=pl.leader,
                leader_epoch=pl.leader_epoch, isr=list(pl.isr), partition_epoch=pl.zk_version,
                replicas=list(pl.replicas), adding_replicas=list(pl.adding), removing_replicas=list(pl.removing),
                leader_recovery_state=0)
            state = build_nested(LeaderAndIsrRequest, _PARTITION_STATES, is_new=is_new, **fields)
            # A replica a reassignment adds (not in sync yet) is a new replica, as Kafka marks it: its log may be
            # created in any online dir (nothing of it is relied on yet).
            new_replica = None if is_new or not pl.adding else build_nested(
                LeaderAndIsrRequest, _PARTITION_STATES, is_new=True, **fields)
            for b in pl.replicas:
                if b in self.ctx.live_brokers and (only is None or b in only):
                    chosen = new_replica if new_replica is not None and b in pl.adding and b not in pl.isr else state
                    per_broker.setdefault(b, {}).setdefault(tp[0], []).append(chosen)
        for b, all_topics in per_broker.items():
            for topics in _in_parts(all_topics, split_topics=True):
                leaders = {s.leader for states in topics.values() for s in states}
                live_leaders = []
                for leader in sorted(leaders):
                    reg = self.ctx.live_brokers.get(leader)
                    if reg is not None:
                        host, port = self._address(reg)
                        live_leaders.append({"broker_id": leader, "host_name": host, "port": port})
                request = build(LeaderAndIsrRequest,
                    controller_id=self.broker_id, is_k_raft_controller=False, controller_epoch=self.ctx.epoch,
                    broker_epoch=self.ctx.live_brokers[b].epoch, request_type=0, ungrouped_partition_states=[],
                    topic_states=[{"topic_name": t, "topic_id": self.ctx.topic_ids.get(t, uuid.UUID(int=0)),
                                   "partition_states": states} for t, states in topics.items()],
                    live_leaders=live_leaders)
                self.channel.send(b, request, LEADER_AND_ISR_VERSION, self._on_leader_and_isr_response(b))

    async def update_metadata(self, brokers: Iterable[int], tps: Iterable[TopicPartition],
                                    deleting: bool = False) -> None:
        """UpdateMetadata with the states of ``tps`` to each broker: in requests of at most
        CONTROL_REQUEST_PARTITIONS partitions, but a topic's partitions always in one request, so a broker
        never shows half of a topic (a client would take it for a partition count that shrank)."""
        topics: dict[str, list[Any]] = {}
        async for tp in paced(tps):
            pl = self.ctx.partitions.get(tp)
            if pl is None:
                continue
            topics.setdefault(tp[0], []).append(build_nested(
                UpdateMetadataRequest, _PARTITION_STATES,
                partition_index=tp[1], controller_epoch=pl.controller_epoch,
                leader=LEADER_DURING_DELETE if deleting else pl.leader, leader_epoch=pl.leader_epoch,
                isr=list(pl.isr), zk_version=pl.zk_version, replicas=list(pl.replicas),
                offline_replicas=[b for b in pl.replicas if b not in self.ctx.live_brokers
                                  or tp in self.ctx.offline_replicas.get(b, ())]))
        live = []
        for reg in self.ctx.live_brokers.values():
            endpoints = []
            for ep in reg.endpoints:
                name, _, address = ep.partition("://")
                host, _, port = address.rpartition(":")
                protocol = reg.listener_security_protocol_map.get(name, name)
                endpoints.append({"port": int(port), "host": host.strip("[]"), "listener": name,
                                  "security_protocol": SECURITY_PROTOCOL_IDS.get(protocol, PLAINTEXT)})
            live.append({"id": reg.id, "endpoints": endpoints, "rack": reg.rack})
        parts = list(_in_parts(topics, split_topics=False)) or [{}]  # none: still one request (live brokers)
        for b in brokers:
            target = self.ctx.live_brokers.get(b)
            if target is None:
                continue
            for part in parts:
                request = build(UpdateMetadataRequest,
                    controller_id=self.broker_id, is_k_raft_controller=False, request_type=0,
                    controller_epoch=self.ctx.epoch, broker_epoch=target.epoch, ungrouped_partition_states=[],
                    topic_states=[{"topic_name": t, "topic_id": self.ctx.topic_ids.get(t, uuid.UUID(int=0)),
                                   "partition_states": states} for t, states in part.items()],
                    live_brokers=live)
                self.channel.send(b, request, UPDATE_METADATA_VERSION)

    async def stop_replica(self, tps: Iterable[TopicPartition], delete: bool,
                                 only: set[int] | None = None) -> None:
        per_broker: dict[int, dict[str, list[dict[str, Any]]]] = {}
        async for tp in paced(tps):
            pl = self.ctx.partitions.get(tp)
            if pl is None:
                continue
            for b in pl.replicas:
                if b in self.ctx.live_brokers and (only is None or b in only):
                    per_broker.setdefault(b, {}).setdefault(tp[0], []).append(
                        {"partition_index": tp[1], "leader_epoch": -2 if delete else pl.leader_epoch,
                         "delete_partition": delete})
        self._send_stop_replica(per_broker)

    def _send_stop_replica(self, per_broker: dict[int, dict[str, list[dict[str, Any]]]]) -> None:
        """One StopReplica per broker, its partitions grouped by topic."""
        for b, topics in per_broker.items():
            request = build(StopReplicaRequest,
                controller_id=self.broker_id, is_k_raft_controller=False, controller_epoch=self.ctx.epoch,
                broker_epoch=self.ctx.live_brokers[b].epoch, ungrouped_partitions=[], topics=[],
                topic_states=[{"topic_name": t, "partition_states": states} for t, states in topics.items()])
            self.channel.send(b, request, STOP_REPLICA_VERSION)

    async def stop_removed_replicas(self, removed: dict[TopicPartition, list[int]]) -> None:
        """StopReplica with deletion to replicas a reassignment took out of the replica set (they are no longer
        in the assignment, so ``stop_replica`` would not reach them)."""
        per_broker: dict[int, dict[str, list[dict[str, Any]]]] = {}
        async for tp, brokers in paced(list(removed.items())):
            for b in brokers:
                if b in self.ctx.live_brokers:
                    per_broker.setdefault(b, {}).setdefault(tp[0], []).append(
                        {"partition_index": tp[1], "leader_epoch": -2, "delete_partition": True})
        self._send_stop_replica(per_broker)


def _in_parts(topics: dict[str, list[Any]], split_topics: bool, size: int = CONTROL_REQUEST_PARTITIONS
              ) -> Iterator[dict[str, list[Any]]]:
    """Topic -> partition states, cut into pieces of at most ``size`` partitions. With ``split_topics`` a
    topic may span pieces (LeaderAndIsr: each partition stands alone); without, a topic larger than
    ``size`` is a piece of its own (UpdateMetadata: a topic is shown whole or not at all)."""
    part: dict[str, list[Any]] = {}
    count = 0
    for topic, states in topics.items():
        if not split_topics:
            if count and count + len(states) > size:
                yield part
                part, count = {}, 0
            part[topic] = list(states)
            count += len(states)
            continue
        i = 0
        while i < len(states):
            piece = states[i:i + size - count]
            part.setdefault(topic, []).extend(piece)
            count += len(piece)
            i += len(piece)
            if count == size:
                yield part
                part, count = {}, 0
    if part:
        yield part
