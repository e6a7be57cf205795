"""The controller's reassignment state machine against an in-memory ZooKeeper (no processes).

What is asserted is what the cluster would see: ``/brokers/topics/<t>`` (with adding/removing replicas as
Kafka writes them), the partition state znodes, ``/admin/reassign_partitions``, and the LeaderAndIsr /
StopReplica / UpdateMetadata requests each broker is sent.
"""

from __future__ import annotations

import kafka.errors as Errors
from tests.support.fake_zk import RecordingChannel
from tests.unit.test_controller_state_machine import (
    CONTROLLER_ID,
    Cluster,
    leader_and_isr_by_broker,
    partition_states,
    scenario_with,
    settle,
)

from strom.config import BrokerConfig
from strom.controller.controller import KafkaController
from strom.metadata.zk import zk_data as zd
from strom.protocol.inter_broker import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest


def assignment(c: Cluster, topic: str) -> zd.TopicAssignment:
    got = c.admin.get_topic_assignment(topic)
    assert got is not None
    return got


async def grow_isr(c: Cluster, controller: KafkaController, topic: str, partition: int, isr: list[int]) -> None:
    """The leader's AlterPartition adding a caught-up replica, as a broker sends it."""
    state, version = c.admin.get_partition_state(topic, partition) or (None, -1)
    assert state is not None
    result = await controller.alter_partition(state.leader, [((topic, partition), state.leader_epoch, isr, version)])
    assert result[(topic, partition)][0] == 0
    await settle(controller)


def stop_replicas(sent: list[tuple[int, object]]) -> dict[int, dict[tuple[str, int], bool]]:
    out: dict[int, dict[tuple[str, int], bool]] = {}
    for b, request in sent:
        for t in request.topic_states:  # type: ignore[attr-defined]
            for s in t.partition_states:
                out.setdefault(b, {})[(t.topic_name, s.partition_index)] = s.delete_partition
    return out


@scenario_with()
async def test_a_move_starts_wide_and_completes_once_the_new_replica_is_in_sync(c: Cluster) -> None:
    """[1, 2] -> [2, 3]: RS [2, 3, 1] with adding [3] and removing [1] in the topic znode, the leader epoch
    bumped and LeaderAndIsr (with the adding/removing lists) to all three; when 3 joins the ISR the
    assignment becomes [2, 3], the leader moves off broker 1, which is told to delete its replica."""
    c.create_topic("t", {0: [1, 2]})
    await c.start()
    before = c.state("t", 0)
    mark = c.mark()
    results = await c.controller.alter_partition_reassignments({("t", 0): [2, 3]})
    assert results == {("t", 0): (0, None)}
    a = assignment(c, "t")
    assert (a.partitions, a.adding_replicas, a.removing_replicas) == ({0: [2, 3, 1]}, {0: [3]}, {0: [1]})
    started = c.state("t", 0)
    assert (started.leader, started.leader_epoch, started.isr) == (1, before.leader_epoch + 1, [1, 2])
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert sorted(sent) == [1, 2, 3]
    s = sent[3][("t", 0)]
    assert (list(s.replicas), list(s.adding_replicas), list(s.removing_replicas)) == ([2, 3, 1], [3], [1])
    assert [sent[b][("t", 0)].is_new for b in (1, 2, 3)] == [False, False, True]  # 3 is a new replica
    assert c.sent_since(mark, StopReplicaRequest) == []
    listed = await c.controller.list_partition_reassignments(None)
    assert {tp: (a.replicas, a.adding, a.removing) for tp, a in listed.items()} == {("t", 0): ([2, 3, 1], [3], [1])}

    mark = c.mark()
    await grow_isr(c, c.controller, "t", 0, [1, 2, 3])
    a = assignment(c, "t")
    assert (a.partitions, a.adding_replicas, a.removing_replicas) == ({0: [2, 3]}, {}, {})
    done = c.state("t", 0)
    assert (done.leader, done.isr, done.leader_epoch) == (2, [2, 3], started.leader_epoch + 1)
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert sorted(sent) == [2, 3] and list(sent[2][("t", 0)].adding_replicas) == []
    assert stop_replicas(c.sent_since(mark, StopReplicaRequest)) == {1: {("t", 0): True}}
    updates = [partition_states(r).get(("t", 0)) for _, r in c.sent_since(mark, UpdateMetadataRequest)]
    assert any(u is not None and list(u.replicas) == [2, 3] for u in updates)
    assert await c.controller.list_partition_reassignments(None) == {}


@scenario_with()
async def test_requests_the_controller_refuses(c: Cluster) -> None:
    """Kafka's per-partition errors: unknown partition, invalid targets, cancelling nothing, a topic being deleted."""
    c.create_topic("t", {0: [1, 2]})
    c.create_topic("doomed", {0: [1, 2]})
    await c.start()
    c.controller.ctx.deleting.add("doomed")  # as while /admin/delete_topics/doomed is handled
    results = await c.controller.alter_partition_reassignments({
        ("t", 5): [1, 2], ("nope", 0): [1, 2], ("t", 0): [], ("doomed", 0): [2, 3]})
    assert {tp: code for tp, (code, _) in results.items()} == {
        ("t", 5): Errors.UnknownTopicOrPartitionError.errno, ("nope", 0): Errors.UnknownTopicOrPartitionError.errno,
        ("t", 0): Errors.InvalidReplicationAssignmentError.errno,
        ("doomed", 0): Errors.UnknownTopicOrPartitionError.errno}
    for target in ([2, 2], [2, 9], [-1, 2]):
        code, message = (await c.controller.alter_partition_reassignments({("t", 0): target}))[("t", 0)]
        assert code == Errors.InvalidReplicationAssignmentError.errno and message
    code, _ = (await c.controller.alter_partition_reassignments({("t", 0): None}))[("t", 0)]
    assert code == Errors.NoReassignmentInProgressError.errno
    # Kafka's order of checks: the target first, then a move to cancel, then whether the partition exists.
    results = await c.controller.alter_partition_reassignments({("nope", 0): None, ("nope", 1): [9]})
    assert {tp: code for tp, (code, _) in results.items()} == {
        ("nope", 0): Errors.NoReassignmentInProgressError.errno,
        ("nope", 1): Errors.InvalidReplicationAssignmentError.errno}
    assert assignment(c, "t").partitions == {0: [1, 2]}  # nothing was written


@scenario_with()
async def test_cancelling_reverts_and_deletes_the_replicas_being_added(c: Cluster) -> None:
    c.create_topic("t", {0: [1, 2]})
    await c.start()
    await c.controller.alter_partition_reassignments({("t", 0): [3, 2]})
    mark = c.mark()
    assert await c.controller.alter_partition_reassignments({("t", 0): None}) == {("t", 0): (0, None)}
    a = assignment(c, "t")
    assert (a.partitions, a.adding_replicas, a.removing_replicas) == ({0: [2, 1]}, {}, {})
    assert (c.state("t", 0).leader, c.state("t", 0).isr) == (1, [1, 2])
    assert stop_replicas(c.sent_since(mark, StopReplicaRequest)) == {3: {("t", 0): True}}
    assert await c.controller.list_partition_reassignments(None) == {}


@scenario_with(cluster_args={"brokers": (1, 2, 3, 4)})
async def test_a_new_target_keeps_the_original_replicas_and_drops_the_old_additions(c: Cluster) -> None:
    c.create_topic("t", {0: [1, 2]})
    await c.start()
    await c.controller.alter_partition_reassignments({("t", 0): [2, 3]})
    mark = c.mark()
    await c.controller.alter_partition_reassignments({("t", 0): [2, 4]})
    a = assignment(c, "t")
    assert (a.partitions, a.adding_replicas, a.removing_replicas) == ({0: [2, 4, 1]}, {0: [4]}, {0: [1]})
    assert stop_replicas(c.sent_since(mark, StopReplicaRequest)) == {3: {("t", 0): True}}


@scenario_with()
async def test_a_new_controller_resumes_a_move_from_zookeeper(c: Cluster) -> None:
    """The controller dies mid-move; broker 2's controller reads adding/removing from the topic znode and
    completes the move when the ISR allows."""
    c.create_topic("t", {0: [1, 2]})
    await c.start()
    await c.controller.alter_partition_reassignments({("t", 0): [2, 3]})
    channels: list[RecordingChannel] = []
    other = KafkaController(2, BrokerConfig({"broker.id": "2", "auto.leader.rebalance.enable": "false"}),
                            c.sessions[2], lambda _t: False,
                            channel_factory=lambda *a: channels.append(RecordingChannel(*a)) or channels[-1])
    other.startup()
    try:
        c.kill_broker(CONTROLLER_ID)  # the old controller and leader: broker 2 leads now, broker 1 is out of the ISR
        await settle(other)
        assert await other.list_partition_reassignments(None) != {}
        sent = leader_and_isr_by_broker([(b, r) for b, r, _ in channels[-1].sent if isinstance(r, LeaderAndIsrRequest)])
        assert list(sent[3][("t", 0)].adding_replicas) == [3]  # the new replica is told to keep fetching
        await grow_isr(c, other, "t", 0, [2, 3])
        a = assignment(c, "t")
        assert (a.partitions, a.adding_replicas, a.removing_replicas) == ({0: [2, 3]}, {}, {})
        assert (c.state("t", 0).leader, c.state("t", 0).isr) == (2, [2, 3])
    finally:
        await other.shutdown()


@scenario_with()
async def test_the_old_tools_znode_starts_moves_and_goes_once_they_are_done(c: Cluster) -> None:
    c.create_topic("t", {0: [1, 2], 1: [2, 3]})
    await c.start()
    c.admin.create_partition_reassignment({("t", 0): [2, 3], ("t", 1): [3, 2], ("nope", 0): [1]})
    await settle(c.controller)
    a = assignment(c, "t")
    # t-1 is only reordered: complete at once; t-0 waits for broker 3; the unknown partition is dropped.
    assert (a.partitions, a.adding_replicas) == ({0: [2, 3, 1], 1: [3, 2]}, {0: [3]})
    assert c.admin.get_partition_reassignment() == {("t", 0): [2, 3]}
    await grow_isr(c, c.controller, "t", 0, [1, 2, 3])
    assert assignment(c, "t").partitions == {0: [2, 3], 1: [3, 2]}
    assert c.admin._data(zd.REASSIGN_PARTITIONS_PATH) is None


@scenario_with()
async def test_an_api_request_takes_a_partition_out_of_the_znode(c: Cluster) -> None:
    """The latest request wins (as Kafka): an API reassignment of a partition the znode names removes it there."""
    c.create_topic("t", {0: [1, 2], 1: [1, 2]})
    await c.start()
    c.admin.create_partition_reassignment({("t", 0): [2, 3], ("t", 1): [2, 3]})
    await settle(c.controller)
    await c.controller.alter_partition_reassignments({("t", 0): [3, 1]})
    assert c.admin.get_partition_reassignment() == {("t", 1): [2, 3]}
    assert assignment(c, "t").partitions[0] == [3, 1, 2]


@scenario_with()
async def test_a_thousand_partitions_move_in_a_few_zookeeper_round_trips(c: Cluster) -> None:
    count = 1200
    c.create_topic("big", {p: [1, 2] for p in range(count)})
    await c.start()
    first = len(c.zk.writes)
    results = await c.controller.alter_partition_reassignments({("big", p): [2, 3] for p in range(count)})
    assert all(code == 0 for code, _ in results.values())
    state_writes = [w for w in c.zk.writes[first:] if w.path.endswith("/state")]
    assert len(state_writes) == count
    assert len({w.zxid for w in state_writes}) <= 3  # batched multi-ops, not one round trip per partition
    assert assignment(c, "big").adding_replicas == {p: [3] for p in range(count)}


@scenario_with()
async def test_partitions_added_meanwhile_are_kept_in_the_topic_znode(c: Cluster) -> None:
    """CreatePartitions rewrote the topic znode and the controller has not handled the watch yet: the move
    writes the znode as it is now (on its version), not the controller's older picture of the topic."""
    topic_id = c.create_topic("t", {0: [1, 2]})
    await c.start()
    current = assignment(c, "t")
    c.admin.set_topic_assignment("t", topic_id, {0: [1, 2], 1: [3, 1]}, current.zk_version)
    results = await c.controller.alter_partition_reassignments({("t", 0): [2, 3]})  # queued before the watch
    assert results == {("t", 0): (0, None)}
    a = assignment(c, "t")
    assert (a.partitions, a.adding_replicas) == ({0: [2, 3, 1], 1: [3, 1]}, {0: [3]})
    await settle(c.controller)
    assert c.state("t", 1).leader == 3  # and the added partition still comes online


@scenario_with()
async def test_a_move_found_in_sync_at_failover_completes_then(c: Cluster) -> None:
    """The controller died after the ISR grew but before it completed the move: the next one completes it
    when it loads the cluster (Kafka checks at failover too), without waiting for another ISR change."""
    c.create_topic("t", {0: [1, 2]})
    await c.start()
    await c.controller.alter_partition_reassignments({("t", 0): [3, 2]})
    await c.controller.shutdown()  # its seat stays taken until broker 1's session ends
    state, version = c.admin.get_partition_state("t", 0) or (None, -1)
    assert state is not None
    epoch = c.admin.get_controller_epoch()
    assert epoch is not None
    c.admin.update_partition_state("t", 0, zd.LeaderIsrAndControllerEpoch(1, state.leader_epoch, [1, 2, 3],
                                                                          state.controller_epoch), version, epoch[1])
    channels: list[RecordingChannel] = []
    other = KafkaController(2, BrokerConfig({"broker.id": "2", "auto.leader.rebalance.enable": "false"}),
                            c.sessions[2], lambda _t: False,
                            channel_factory=lambda *a: channels.append(RecordingChannel(*a)) or channels[-1])
    other.startup()
    try:
        c.kill_broker(CONTROLLER_ID)
        await settle(other)
        a = assignment(c, "t")
        assert (a.partitions, a.adding_replicas, a.removing_replicas) == ({0: [3, 2]}, {}, {})
        assert (c.state("t", 0).leader, c.state("t", 0).isr) == (3, [2, 3])
    finally:
        await other.shutdown()


@scenario_with()
async def test_an_unreadable_znode_asks_for_nothing_and_goes(c: Cluster) -> None:
    c.create_topic("t", {0: [1, 2]})
    await c.start()
    c.admin._multi([("create", zd.REASSIGN_PARTITIONS_PATH, b'{"version":1,"partitions":7}', False, False)])
    await settle(c.controller)
    assert c.admin._data(zd.REASSIGN_PARTITIONS_PATH) is None
    assert assignment(c, "t").partitions == {0: [1, 2]} and c.controller.active


@scenario_with()
async def test_a_topic_queued_for_deletion_mid_move_waits_for_the_move_across_a_failover(c: Cluster) -> None:
    """Deleting a topic whose partition moves is deferred (the topic is ineligible for deletion), also by the
    next controller: the move completes through the ISR change it needs, then the topic is deleted."""
    c.create_topic("t", {0: [1, 2]})
    await c.start()
    await c.controller.alter_partition_reassignments({("t", 0): [2, 3]})
    c.admin.mark_topic_for_deletion("t")
    await settle(c.controller)
    assert c.admin.get_topic_assignment("t") is not None
    assert c.admin.get_topic_deletions() == ["t"]
    refused = await c.controller.alter_partition_reassignments({("t", 0): [1, 3]})
    assert refused[("t", 0)][0] == Errors.UnknownTopicOrPartitionError.errno
    channels: list[RecordingChannel] = []
    other = KafkaController(2, BrokerConfig({"broker.id": "2", "auto.leader.rebalance.enable": "false"}),
                            c.sessions[2], lambda _t: False,
                            channel_factory=lambda *a: channels.append(RecordingChannel(*a)) or channels[-1])
    other.startup()
    try:
        c.kill_broker(CONTROLLER_ID)
        await settle(other)
        assert c.admin.get_topic_assignment("t") is not None  # the new controller waits too
        await grow_isr(c, other, "t", 0, [2, 3])  # allowed: the topic is not being deleted yet
        await settle(other)
        assert c.admin.get_topic_assignment("t") is None
        assert c.admin.get_topic_deletions() == []
        deleted = stop_replicas([(b, r) for b, r, _ in channels[-1].sent if isinstance(r, StopReplicaRequest)])
        assert deleted[3][("t", 0)] is True
    finally:
        await other.shutdown()
