"""The controller's partition and replica state machines, without processes.

A real `KafkaController` runs against an in-memory ZooKeeper (`tests.support.fake_zk`: versions,
fenced multi-ops, ephemerals per session, watches) and a channel that records the LeaderAndIsr,
UpdateMetadata and StopReplica requests it would send. Every broker is one ZooKeeper session with
its registration; closing that session is a broker dying. Tests assert on what the rest of the
cluster would see: the partition state znodes and the requests each broker is sent.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import kafka.errors as Errors
import pytest
from tests.support.fake_zk import FakeZkClient, InMemoryZooKeeper, RecordingChannel

from strom.config import BrokerConfig
from strom.controller.controller import KafkaController
from strom.controller.pacing import STATE_CHANGE_CHUNK
from strom.metadata.zk import zk_data as zd
from strom.protocol.inter_broker import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest

BOUND_S = 10.0  # an upper bound for the controller to act (threads are involved); never an assertion
CONTROLLER_ID = 1


class Cluster:
    """Brokers as ZooKeeper sessions, an admin session, and broker 1's controller (not started)."""

    def __init__(self, brokers: Iterable[int] = (1, 2, 3), unclean: Callable[[str], bool] | None = None,
                 config: dict[str, str] | None = None) -> None:
        self.zk = InMemoryZooKeeper()
        self.admin = FakeZkClient(self.zk)
        self.sessions: dict[int, FakeZkClient] = {}
        self.epochs: dict[int, int] = {}
        for b in brokers:
            self.start_broker(b)
        self.channels: list[RecordingChannel] = []
        self.unclean_calls: list[str] = []
        self.unclean = unclean  # None: the topic's config decides, as in a broker

        def unclean_enabled(topic: str) -> bool:  # called on the controller's ZooKeeper thread
            self.unclean_calls.append(topic)
            if self.unclean is not None:
                return self.unclean(topic)
            return self.admin.get_topic_configs(topic).get("unclean.leader.election.enable") == "true"

        def channel(*args: Any) -> RecordingChannel:
            self.channels.append(RecordingChannel(*args))
            return self.channels[-1]

        overrides = {"broker.id": str(CONTROLLER_ID), "auto.leader.rebalance.enable": "false", **(config or {})}
        self.controller = KafkaController(CONTROLLER_ID, BrokerConfig(overrides), self.sessions[CONTROLLER_ID],
                                          unclean_enabled, channel_factory=channel)

    def start_broker(self, broker_id: int) -> None:
        self.sessions[broker_id] = FakeZkClient(self.zk)
        self.epochs[broker_id] = self.sessions[broker_id].register_broker(broker_id)

    def expire_session(self, broker_id: int, register: bool = True) -> None:
        """ZooKeeper expires the broker's session; the broker registers again on its new session
        (what the broker does on SessionState.CONNECTED after LOST), which gives it a new epoch.
        register=False: the new session exists but the broker has not registered in it yet."""
        session = self.sessions[broker_id]
        session.expire_session()
        if register:
            self.register_again(broker_id)

    def register_again(self, broker_id: int) -> None:
        """The broker's registration in its new session lands, then its controller may stand (as KafkaServer)."""
        self.epochs[broker_id] = self.sessions[broker_id].register_broker(broker_id)
        if broker_id == CONTROLLER_ID:
            self.controller.broker_registered()

    def kill_broker(self, broker_id: int) -> None:
        """The broker dies: its session ends, its registration disappears."""
        self.sessions.pop(broker_id).close()

    def create_topic(self, name: str, assignment: dict[int, list[int]]) -> uuid.UUID:
        topic_id = uuid.uuid4()
        self.admin.create_topic(name, topic_id, assignment)
        return topic_id

    def state(self, topic: str, partition: int) -> zd.LeaderIsrAndControllerEpoch:
        got = self.admin.get_partition_state(topic, partition)
        assert got is not None, f"{topic}-{partition} has no state znode"
        return got[0]

    def version(self, topic: str, partition: int) -> int:
        got = self.admin.get_partition_state(topic, partition)
        assert got is not None
        return got[1]

    @property
    def channel(self) -> RecordingChannel:
        return self.channels[-1]

    def mark(self) -> int:
        """Where the current channel's log is now: requests sent after this are `sent_since(mark)`."""
        return len(self.channel.sent)

    def sent_since(self, mark: int, kind: type) -> list[tuple[int, Any]]:
        return [(b, r) for b, r, _ in self.channel.sent[mark:] if isinstance(r, kind)]

    async def start(self) -> None:
        self.controller.startup()
        await settle(self.controller)

    async def stop(self) -> None:
        await self.controller.shutdown()


def partition_states(request: Any) -> dict[tuple[str, int], Any]:
    """LeaderAndIsr / UpdateMetadata / StopReplica partition states by (topic, partition)."""
    return {(t.topic_name, s.partition_index): s for t in request.topic_states for s in t.partition_states}


def leader_and_isr_by_broker(sent: list[tuple[int, Any]]) -> dict[int, dict[tuple[str, int], Any]]:
    out: dict[int, dict[tuple[str, int], Any]] = {}
    for b, request in sent:
        out.setdefault(b, {}).update(partition_states(request))
    return out


async def eventually(predicate: Callable[[], Any], what: str) -> None:
    """Yield to the loop (and the controller's ZooKeeper thread) until predicate holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"not reached: {what}")
        await asyncio.sleep(0)


async def settle(controller: KafkaController) -> None:
    """Until the controller is active and has handled every event queued so far (and what they queued).

    An ElectLeaders for no partition is an event like any other: once it has run, everything queued
    before it has run too; watches fired by those events queue theirs before the handler returns."""
    while True:
        await eventually(lambda: controller.active, "the controller is active")
        await asyncio.sleep(0)  # watch callbacks hand their events over with call_soon_threadsafe
        try:
            await controller.elect_leaders([], unclean=False)
        except Errors.NotControllerError:
            continue
        if controller._events.empty():
            return


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), BOUND_S * 3))


def scenario_with(cluster_args: dict[str, Any] | None = None
                  ) -> Callable[[Callable[[Cluster], Awaitable[None]]], Callable[[], None]]:
    """Run the test body against a started cluster, shutting the controller down afterwards."""
    def wrap(body: Callable[[Cluster], Awaitable[None]]) -> Callable[[], None]:
        def test() -> None:
            async def go() -> None:
                cluster = Cluster(**(cluster_args or {}))
                try:
                    await body(cluster)
                finally:
                    await cluster.stop()
            run(go)
        test.__name__ = body.__name__
        test.__doc__ = body.__doc__
        return test
    return wrap


# -- election at startup --------------------------------------------------------------------------------

@scenario_with()
async def test_startup_elects_the_controller_and_a_leader_for_every_partition(c: Cluster) -> None:
    """The first controller bumps the epoch, writes a state per partition (first live replica
    leads, every live replica in sync) and tells each replica and every live broker."""
    topic_id = c.create_topic("t", {0: [2, 3, 1], 1: [3, 1, 2], 2: [1, 2, 3]})
    await c.start()
    assert c.admin.get_controller_id() == CONTROLLER_ID
    assert c.admin.get_controller_epoch() == (1, 1)  # created at 0, bumped by the election
    for p, replicas in enumerate([[2, 3, 1], [3, 1, 2], [1, 2, 3]]):
        state = c.state("t", p)
        assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch) == (replicas[0], 0, replicas, 1)

    by_broker = leader_and_isr_by_broker(c.sent_since(0, LeaderAndIsrRequest))
    assert sorted(by_broker) == [1, 2, 3]
    for b in (1, 2, 3):
        assert {tp: (s.leader, s.leader_epoch, list(s.isr)) for tp, s in by_broker[b].items()} == {
            ("t", 0): (2, 0, [2, 3, 1]), ("t", 1): (3, 0, [3, 1, 2]), ("t", 2): (1, 0, [1, 2, 3])}
    leader_and_isr = [r for _, r in c.sent_since(0, LeaderAndIsrRequest)]
    assert all(r.controller_epoch == 1 and r.controller_id == CONTROLLER_ID for r in leader_and_isr)
    assert all(r.topic_states[0].topic_id == topic_id for r in leader_and_isr)
    assert {b for b, _ in c.sent_since(0, UpdateMetadataRequest)} == {1, 2, 3}


@scenario_with()
async def test_a_topic_created_later_comes_online_with_is_new(c: Cluster) -> None:
    """A topic that appears while a controller runs: its watch wakes the controller, which elects and
    sends LeaderAndIsr marked is_new before UpdateMetadata (a broker serves a leader it was told of)."""
    await c.start()
    mark = c.mark()
    c.create_topic("later", {0: [2, 3], 1: [3, 2]})
    await settle(c.controller)
    assert (c.state("later", 0).leader, c.state("later", 1).leader) == (2, 3)
    kinds = [type(r) for _, r, _ in c.channel.sent[mark:]]
    assert kinds.index(LeaderAndIsrRequest) < kinds.index(UpdateMetadataRequest)
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert sorted(sent) == [2, 3]
    assert all(s.is_new for states in sent.values() for s in states.values())


@scenario_with()
async def test_partitions_added_to_a_topic_come_online(c: Cluster) -> None:
    """Adding partitions rewrites the topic's assignment znode: the controller's watch on it brings the
    new partitions online and leaves the existing ones (and their epochs) alone."""
    topic_id = c.create_topic("t", {0: [1, 2]})
    await c.start()
    before = c.state("t", 0), c.version("t", 0)
    assignment = c.admin.get_topic_assignment("t")
    assert assignment is not None
    mark = c.mark()
    c.admin.set_topic_assignment("t", topic_id, {0: [1, 2], 1: [2, 3], 2: [3, 1]}, assignment.zk_version)
    await settle(c.controller)
    assert (c.state("t", 0), c.version("t", 0)) == before
    assert [(c.state("t", p).leader, c.state("t", p).isr) for p in (1, 2)] == [(2, [2, 3]), (3, [3, 1])]
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert {b: sorted(states) for b, states in sent.items()} == {1: [("t", 2)], 2: [("t", 1)], 3: [("t", 1), ("t", 2)]}


@scenario_with()
async def test_a_second_controller_waits_for_the_seat(c: Cluster) -> None:
    """Broker 2's controller loses the election while broker 1 holds /controller, and takes over
    (epoch 2) when broker 1 dies."""
    await c.start()
    other_channels: list[RecordingChannel] = []
    other = KafkaController(2, BrokerConfig({"broker.id": "2", "auto.leader.rebalance.enable": "false"}),
                            c.sessions[2], lambda _t: False,
                            channel_factory=lambda *a: other_channels.append(RecordingChannel(*a))
                            or other_channels[-1])
    other.startup()
    try:
        c.create_topic("t", {0: [1, 2]})
        await settle(c.controller)
        assert not other.active and c.admin.get_controller_id() == CONTROLLER_ID
        c.kill_broker(1)
        await settle(other)
        assert c.admin.get_controller_epoch() is not None and c.admin.get_controller_epoch()[0] == 2
        state = c.state("t", 0)
        assert (state.leader, state.isr, state.controller_epoch) == (2, [2], 2)
    finally:
        await other.shutdown()


# -- a broker dies --------------------------------------------------------------------------------------

@scenario_with()
async def test_a_dead_broker_leaves_every_isr_and_its_partitions_move(c: Cluster) -> None:
    """Broker 3 dies: what it led moves to the next in-sync replica, it leaves every ISR, every
    changed partition's leader epoch bumps, and LeaderAndIsr goes to the remaining replicas only."""
    c.create_topic("t", {0: [3, 1, 2], 1: [1, 3, 2], 2: [2, 1]})
    await c.start()
    before = {p: c.state("t", p) for p in range(3)}
    mark = c.mark()
    c.kill_broker(3)
    await settle(c.controller)

    after = {p: c.state("t", p) for p in range(3)}
    assert (after[0].leader, after[0].isr) == (1, [1, 2])
    assert (after[1].leader, after[1].isr) == (1, [1, 2])
    assert after[2] == before[2]  # broker 3 holds no replica of it: untouched
    assert [after[p].leader_epoch for p in (0, 1)] == [before[0].leader_epoch + 1, before[1].leader_epoch + 1]

    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert sorted(sent) == [1, 2]
    for b in (1, 2):
        assert {tp: (s.leader, s.leader_epoch, list(s.isr)) for tp, s in sent[b].items()} == {
            ("t", 0): (1, after[0].leader_epoch, [1, 2]), ("t", 1): (1, after[1].leader_epoch, [1, 2])}
    metadata = c.sent_since(mark, UpdateMetadataRequest)
    assert {b for b, _ in metadata} == {1, 2}
    for _, request in metadata:
        assert sorted(lb.id for lb in request.live_brokers) == [1, 2]
        assert list(partition_states(request)[("t", 0)].offline_replicas) == [3]


@scenario_with()
async def test_a_restarted_broker_gets_the_whole_picture(c: Cluster) -> None:
    """A broker that dies and registers again (a new broker epoch) is told every partition's
    metadata and the leadership of every replica it hosts, and is not put back into any ISR."""
    c.create_topic("t", {0: [3, 1], 1: [1, 3]})
    await c.start()
    c.kill_broker(3)
    await settle(c.controller)
    mark = c.mark()
    c.start_broker(3)
    await settle(c.controller)
    assert (c.state("t", 0).leader, c.state("t", 0).isr) == (1, [1])
    to_3 = leader_and_isr_by_broker([(b, r) for b, r in c.sent_since(mark, LeaderAndIsrRequest) if b == 3])
    assert {tp: (s.leader, list(s.isr)) for tp, s in to_3[3].items()} == {("t", 0): (1, [1]), ("t", 1): (1, [1])}
    requests = [r for b, r in c.sent_since(mark, LeaderAndIsrRequest) if b == 3]
    assert all(r.broker_epoch == c.epochs[3] for r in requests)
    assert any(b == 3 for b, _ in c.sent_since(mark, UpdateMetadataRequest))


@scenario_with()
async def test_a_broker_that_bounces_before_the_controller_looks_is_treated_as_restarted(c: Cluster) -> None:
    """Broker 3 dies and registers again before the controller reads /brokers/ids: the ids are the same,
    only the broker epoch (the registration's czxid) tells. A restarted broker lost its in-memory state,
    so it leaves leadership and every ISR, and hears LeaderAndIsr addressed to its new epoch."""
    c.create_topic("t", {0: [3, 1], 1: [1, 3]})
    await c.start()
    old_epoch = c.epochs[3]
    mark = c.mark()
    c.kill_broker(3)
    c.start_broker(3)  # both before the loop runs: the controller sees one change of /brokers/ids
    await settle(c.controller)
    assert c.epochs[3] != old_epoch
    assert [(c.state("t", p).leader, c.state("t", p).isr) for p in (0, 1)] == [(1, [1]), (1, [1])]
    to_3 = [r for b, r in c.sent_since(mark, LeaderAndIsrRequest) if b == 3]
    assert to_3 and all(r.broker_epoch == c.epochs[3] for r in to_3)


@scenario_with()
async def test_an_offline_partition_comes_back_with_its_last_in_sync_replica(c: Cluster) -> None:
    """t-0's only in-sync replica (2) died with unclean election off: offline. When 2 registers again
    it is elected (it was last in sync); the out-of-sync 3, alive all along, never was."""
    c.create_topic("t", {0: [2, 3]})
    await c.start()
    result = await c.controller.alter_partition(2, [(("t", 0), 0, [2], c.version("t", 0))])
    assert result[("t", 0)][0] == 0
    c.kill_broker(2)
    await settle(c.controller)
    assert c.state("t", 0).leader == -1
    mark = c.mark()
    c.start_broker(2)
    await settle(c.controller)
    state = c.state("t", 0)
    assert (state.leader, state.leader_epoch, state.isr) == (2, 2, [2])
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert sent[2][("t", 0)].leader == 2 and sent[3][("t", 0)].leader == 2


# -- controller failover with dead brokers ----------------------------------------------------------------

def test_a_new_controller_removes_unregistered_brokers_from_every_isr_at_once() -> None:
    """Brokers 3 and 4 died while no controller ran: the new controller takes both out of every ISR
    (and out of leadership) before it tells anyone anything, so no LeaderAndIsr ever names them in
    sync and no leader waits replica.lag.time.max.ms for them."""
    async def go() -> None:
        c = Cluster(brokers=(1, 2))
        try:
            c.create_topic("t", {0: [3, 1, 2], 1: [1, 4, 3], 2: [4, 3]})
            # The state an earlier controller (epoch 5) left when every broker was alive.
            version = c.admin.set_controller_epoch(5)
            c.admin.create_partition_states("t", {
                0: zd.LeaderIsrAndControllerEpoch(3, 7, [3, 1, 2], 5),
                1: zd.LeaderIsrAndControllerEpoch(1, 2, [1, 4, 3], 5),
                2: zd.LeaderIsrAndControllerEpoch(4, 1, [4, 3], 5)}, version)
            await c.start()

            assert c.admin.get_controller_epoch() is not None and c.admin.get_controller_epoch()[0] == 6
            s0, s1, s2 = (c.state("t", p) for p in range(3))
            assert (s0.leader, s0.leader_epoch, s0.isr, s0.controller_epoch) == (1, 8, [1, 2], 6)
            assert (s1.leader, s1.leader_epoch, s1.isr, s1.controller_epoch) == (1, 3, [1], 6)
            # No live replica at all: offline, but the ISR keeps who was last in sync.
            assert (s2.leader, s2.leader_epoch, s2.isr) == (-1, 2, [4, 3])

            sent = c.sent_since(0, LeaderAndIsrRequest)
            assert {b for b, _ in sent} == {1, 2}
            for _, request in sent:
                for tp, s in partition_states(request).items():
                    if tp != ("t", 2):
                        assert not {3, 4} & set(s.isr), f"{tp} sent with a dead broker in sync: {list(s.isr)}"
            # One write per changed partition, all by the new controller: "at once", not one by one later.
            for p in (0, 1):
                writes = c.zk.writes_to(zd.partition_state_path("t", p))
                assert len(writes) == 2  # the earlier controller's create, then this controller's update
        finally:
            await c.stop()
    run(go)


# -- ZooKeeper session loss -------------------------------------------------------------------------------

@scenario_with()
async def test_a_controller_that_loses_its_session_drops_queued_events_and_resigns(c: Cluster) -> None:
    """Requests queued when the session expires were decided on the dead session's picture: they fail
    with NOT_CONTROLLER and write nothing; the controller then resigns and, /controller being free,
    is elected again on its new session with a new epoch."""
    c.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3]})
    await c.start()
    epoch_before = c.admin.get_controller_epoch()
    assert epoch_before is not None
    writes_before = len(c.zk.writes)
    queued = [
        c.controller.alter_partition(1, [(("t", 0), 0, [1, 2], c.version("t", 0))]),
        c.controller.controlled_shutdown(2, c.epochs[2]),
        c.controller.elect_leaders(None, unclean=False),
    ]
    first_channel = c.channel
    c.expire_session(CONTROLLER_ID)  # kazoo's thread would see this; the loop has not run since the requests
    results = await asyncio.gather(*queued, return_exceptions=True)
    assert all(isinstance(r, Errors.NotControllerError) for r in results), results

    await settle(c.controller)
    partition_writes = [w for w in c.zk.writes[writes_before:] if w.path.startswith(zd.TOPICS_PATH)]
    assert all(zd.decode_partition_state(w.data or b"").controller_epoch == epoch_before[0] + 1
               for w in partition_writes), "a partition state was written by the expired term"
    assert c.state("t", 0).isr == [1, 2, 3]  # the dropped AlterPartition wrote nothing
    assert c.admin.get_controller_epoch() is not None
    assert c.admin.get_controller_epoch()[0] == epoch_before[0] + 1
    assert first_channel.closed and c.channel is not first_channel


@scenario_with()
async def test_a_write_after_session_loss_is_refused(c: Cluster) -> None:
    """The session expires while the controller handles a broker failure, between reading the
    cluster and writing its decision. Nobody else was elected, so /controller_epoch's version still
    matches: only the controller's own session check stands between it and a write decided on the
    expired session's picture. The write must not happen; the re-elected controller decides afresh."""
    c.create_topic("t", {0: [2, 3]})
    await c.start()
    # Broker 3 falls out of sync (its leader shrinks the ISR), then the leader dies: unclean is
    # the only way to a leader, and the controller asks for the topic's config first.
    result = await c.controller.alter_partition(2, [(("t", 0), 0, [2], c.version("t", 0))])
    assert result[("t", 0)][0] == 0
    epoch = c.admin.get_controller_epoch()
    assert epoch is not None
    expired = False

    def unclean(_topic: str) -> bool:
        nonlocal expired
        if not expired:  # the first decision: the session expires right after the read
            expired = True
            c.expire_session(CONTROLLER_ID)
        return True

    c.unclean = unclean
    mark = len(c.zk.writes)
    c.kill_broker(2)
    await eventually(lambda: expired, "the controller asked for the unclean setting")
    await settle(c.controller)

    writes = [zd.decode_partition_state(w.data or b"") for w in c.zk.writes[mark:]
              if w.path == zd.partition_state_path("t", 0)]
    assert writes, "the re-elected controller elected no leader"
    assert all(w.controller_epoch == epoch[0] + 1 for w in writes), \
        f"the expired term (epoch {epoch[0]}) wrote partition state: {writes}"
    assert (c.state("t", 0).leader, c.state("t", 0).isr) == (3, [3])


@scenario_with()
async def test_a_deposed_controller_is_fenced_and_answers_not_controller(c: Cluster) -> None:
    """/controller went away and broker 2 won the next election (epoch + 1) before broker 1's
    controller heard of it. Requests broker 1 had queued are decided on its stale picture: its
    writes fail on /controller_epoch's version and the requesters hear NOT_CONTROLLER (and retry
    with the new controller), not an unknown partition or an unknown server error."""
    c.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3]})
    await c.start()
    state0, state1 = c.state("t", 0), c.state("t", 1)
    # An operator deletes /controller (zkCli) and broker 2 is elected at once, all before broker 1's loop runs.
    c.admin.delete(zd.CONTROLLER_PATH)
    epoch, _ = c.sessions[2].register_controller_and_increment_controller_epoch(2)
    alter = c.controller.alter_partition(1, [(("t", 0), 0, [1, 2], c.version("t", 0))])
    shutdown = c.controller.controlled_shutdown(2, c.epochs[2])
    results = await asyncio.gather(alter, shutdown, return_exceptions=True)
    assert all(isinstance(r, Errors.NotControllerError) for r in results), results
    await eventually(lambda: not c.controller.active, "the deposed controller resigned")
    assert (c.state("t", 0), c.state("t", 1)) == (state0, state1)
    got = c.admin.get_controller_epoch()
    assert c.admin.get_controller_id() == 2 and got is not None and got[0] == epoch


# -- AlterPartition ---------------------------------------------------------------------------------------

@scenario_with()
async def test_alter_partition_shrinks_and_expands_the_isr(c: Cluster) -> None:
    """A leader's ISR change is written with the same leader epoch and a new partition epoch, the
    answer carries the new state, and every live broker gets UpdateMetadata."""
    c.create_topic("t", {0: [1, 2, 3]})
    await c.start()
    version = c.version("t", 0)
    mark = c.mark()
    result = await c.controller.alter_partition(1, [(("t", 0), 0, [1, 2], version)])
    code, pl = result[("t", 0)]
    assert code == 0 and pl is not None
    assert (pl.isr, pl.leader_epoch, pl.zk_version) == ([1, 2], 0, version + 1)
    state = c.state("t", 0)
    assert (state.leader, state.leader_epoch, state.isr) == (1, 0, [1, 2])
    assert c.version("t", 0) == version + 1
    assert {b for b, _ in c.sent_since(mark, UpdateMetadataRequest)} == {1, 2, 3}
    assert not c.sent_since(mark, LeaderAndIsrRequest)  # an ISR change is not a leadership change

    result = await c.controller.alter_partition(1, [(("t", 0), 0, [1, 2, 3], version + 1)])
    assert result[("t", 0)][0] == 0 and c.state("t", 0).isr == [1, 2, 3]


@scenario_with()
async def test_alter_partition_refusals(c: Cluster) -> None:
    """Each refusal leaves the state znode untouched: an older leader epoch is fenced, a stale partition
    epoch is INVALID_UPDATE_VERSION, a dead replica cannot join, a follower cannot ask, an ISR without
    the leader, with a replica twice or with a non-replica is invalid, an unknown partition is
    UNKNOWN_TOPIC_OR_PARTITION."""
    c.create_topic("t", {0: [1, 2, 3]})
    await c.start()
    c.kill_broker(3)
    await settle(c.controller)
    state, version = c.state("t", 0), c.version("t", 0)
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, [1, 2])

    async def ask(broker: int, leader_epoch: int, isr: list[int], partition_epoch: int,
                  tp: tuple[str, int] = ("t", 0)) -> int:
        result = await c.controller.alter_partition(broker, [(tp, leader_epoch, isr, partition_epoch)])
        return result[tp][0]

    assert await ask(1, 0, [1], version) == Errors.FencedLeaderEpochError.errno
    assert await ask(1, 1, [1], version - 1) == Errors.InvalidUpdateVersionError.errno
    assert await ask(1, 1, [1, 2, 3], version) == Errors.IneligibleReplicaError.errno
    assert await ask(2, 1, [2], version) == Errors.NotLeaderForPartitionError.errno
    assert await ask(1, 1, [2], version) == Errors.InvalidRequestError.errno
    # A replica named twice would count twice towards min.insync.replicas.
    assert await ask(1, 1, [1, 2, 2], version) == Errors.InvalidRequestError.errno
    assert await ask(1, 1, [1, 9], version) == Errors.InvalidRequestError.errno  # not a replica
    assert await ask(1, 1, [1], version, ("nope", 0)) == Errors.UnknownTopicOrPartitionError.errno
    assert (c.state("t", 0), c.version("t", 0)) == (state, version)


@scenario_with()
async def test_alter_partition_after_the_state_moved_in_zookeeper(c: Cluster) -> None:
    """The state znode changed behind the controller's back (its cached version is stale): the write
    loses the conditional set, the controller re-reads, and the leader is told INVALID_UPDATE_VERSION
    instead of its change silently overwriting the newer state."""
    c.create_topic("t", {0: [1, 2, 3]})
    await c.start()
    version = c.version("t", 0)
    epoch = c.admin.get_controller_epoch()
    assert epoch is not None
    # Someone (an operator, a bug) rewrote the state with the controller's own fencing token.
    c.admin.update_partition_state("t", 0, zd.LeaderIsrAndControllerEpoch(1, 0, [1, 3], epoch[0]), version, epoch[1])
    result = await c.controller.alter_partition(1, [(("t", 0), 0, [1, 2], version)])
    assert result[("t", 0)][0] == Errors.InvalidUpdateVersionError.errno
    assert c.state("t", 0).isr == [1, 3]
    result = await c.controller.alter_partition(1, [(("t", 0), 0, [1], version + 1)])  # with the re-read epoch
    assert result[("t", 0)][0] == 0 and c.state("t", 0).isr == [1]


# -- unclean leader election --------------------------------------------------------------------------------

async def _leader_out_of_sync_dies(c: Cluster) -> None:
    """t-0 on [2, 3]: broker 3 falls out of the ISR, then the leader 2 dies."""
    c.create_topic("t", {0: [2, 3]})
    await c.start()
    result = await c.controller.alter_partition(2, [(("t", 0), 0, [2], c.version("t", 0))])
    assert result[("t", 0)][0] == 0
    c.kill_broker(2)
    await settle(c.controller)


@scenario_with()
async def test_unclean_election_off_leaves_the_partition_offline(c: Cluster) -> None:
    """No in-sync replica lives: with unclean election off the partition has no leader, its ISR
    keeps the last in-sync replica (so it can come back), and the leader epoch bumps."""
    await _leader_out_of_sync_dies(c)
    state = c.state("t", 0)
    assert (state.leader, state.leader_epoch, state.isr) == (-1, 1, [2])
    assert c.unclean_calls == ["t"]


@scenario_with()
async def test_unclean_election_turned_on_elects_the_out_of_sync_replica(c: Cluster) -> None:
    """Turning unclean.leader.election.enable on for the topic (a config change notification) makes
    the controller elect the live out-of-sync replica, alone in the ISR, and tell it."""
    await _leader_out_of_sync_dies(c)
    mark = c.mark()
    c.admin.set_topic_configs("t", {"unclean.leader.election.enable": "true"})
    await settle(c.controller)
    state = c.state("t", 0)
    assert (state.leader, state.leader_epoch, state.isr) == (3, 2, [3])
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert {tp: (s.leader, list(s.isr)) for tp, s in sent[3].items()} == {("t", 0): (3, [3])}


@scenario_with()
async def test_the_old_leader_that_returns_does_not_take_over_after_an_unclean_election(c: Cluster) -> None:
    """Once the out-of-sync replica was elected (unclean ElectLeaders), the returning old leader is a
    follower outside the ISR: the records only it had are gone, as the operator chose."""
    await _leader_out_of_sync_dies(c)
    result = await c.controller.elect_leaders([("t", 0)], unclean=True)
    assert result == {("t", 0): 0}
    assert (c.state("t", 0).leader, c.state("t", 0).isr) == (3, [3])
    assert await c.controller.elect_leaders([("t", 0)], unclean=True) == {
        ("t", 0): Errors.ElectionNotNeededError.errno}
    c.start_broker(2)
    await settle(c.controller)
    assert (c.state("t", 0).leader, c.state("t", 0).isr) == (3, [3])


# -- controlled shutdown ----------------------------------------------------------------------------------

@scenario_with()
async def test_controlled_shutdown_moves_leadership_and_shrinks_isrs(c: Cluster) -> None:
    """Broker 2 asks to stop: what it leads moves to another in-sync replica, it leaves the ISR of
    what it follows (and is told to stop fetching those, without deleting), and the answer lists
    only the partitions it still leads (here: one with no other in-sync replica)."""
    c.create_topic("t", {0: [2, 1, 3], 1: [1, 2], 2: [3, 2], 3: [2, 3]})
    await c.start()
    # t-3: broker 3 out of sync, so nobody can take over from 2.
    result = await c.controller.alter_partition(2, [(("t", 3), 0, [2], c.version("t", 3))])
    assert result[("t", 3)][0] == 0
    mark = c.mark()
    still_led = await c.controller.controlled_shutdown(2, c.epochs[2])
    assert still_led == [("t", 3)]
    states = {p: c.state("t", p) for p in range(4)}
    assert (states[0].leader, states[0].isr) == (1, [1, 3])
    assert (states[1].leader, states[1].isr) == (1, [1])
    assert (states[2].leader, states[2].isr) == (3, [3])
    assert (states[3].leader, states[3].isr) == (2, [2])
    stops = c.sent_since(mark, StopReplicaRequest)
    assert [b for b, _ in stops] == [2]
    stopped = partition_states(stops[0][1])
    assert sorted(stopped) == [("t", 1), ("t", 2)]
    assert not any(s.delete_partition for s in stopped.values())

    # A broker that is shutting down is no candidate: it cannot rejoin an ISR nor lead.
    result = await c.controller.alter_partition(1, [(("t", 1), states[1].leader_epoch, [1, 2], c.version("t", 1))])
    assert result[("t", 1)][0] == Errors.IneligibleReplicaError.errno


def test_controlled_shutdown_with_a_stale_broker_epoch_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    """A ControlledShutdown from an earlier registration of the broker (or an unknown one) changes
    nothing; the refusal is the requester's answer, not a controller failure logged as an error."""
    async def go() -> None:
        c = Cluster()
        try:
            c.create_topic("t", {0: [2, 1]})
            await c.start()
            with caplog.at_level(logging.ERROR, logger="strom.controller.controller"):
                with pytest.raises(Errors.StaleBrokerEpochError):
                    await c.controller.controlled_shutdown(2, c.epochs[2] - 1)
                with pytest.raises(Errors.BrokerNotAvailableError):
                    await c.controller.controlled_shutdown(9, 1)
                await settle(c.controller)
            assert c.state("t", 0).leader == 2 and c.controller.active
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
        finally:
            await c.stop()
    run(go)


# -- topic deletion -----------------------------------------------------------------------------------------

@scenario_with()
async def test_topic_deletion(c: Cluster) -> None:
    """Deleting a topic: each replica is told to stop and delete, the znodes (assignment, states,
    config, marker) go in fenced writes, live brokers learn the partitions are being deleted, and
    the controller forgets the topic (a new topic with the same name starts afresh)."""
    c.create_topic("gone", {0: [1, 2], 1: [2, 3]})
    c.create_topic("kept", {0: [1, 2]})
    await c.start()
    mark = c.mark()
    c.admin.mark_topic_for_deletion("gone")
    await settle(c.controller)

    assert not c.admin.topic_exists("gone") and c.admin.get_topic_deletions() == []
    assert c.admin.get_partition_states("gone") == {}
    assert c.zk.get(zd.config_entity_path(zd.CONFIG_TYPE_TOPIC, "gone")) is None
    assert c.admin.topic_exists("kept")
    stops = {b: partition_states(r) for b, r in c.sent_since(mark, StopReplicaRequest)}
    assert {b: sorted(s) for b, s in stops.items()} == {
        1: [("gone", 0)], 2: [("gone", 0), ("gone", 1)], 3: [("gone", 1)]}
    assert all(s.delete_partition for states in stops.values() for s in states.values())
    deleting = [partition_states(r) for _, r in c.sent_since(mark, UpdateMetadataRequest)]
    assert deleting and all(s.leader == -2 for states in deleting for tp, s in states.items() if tp[0] == "gone")
    assert not any(tp[0] == "gone" for tp in c.controller.ctx.partitions)

    c.create_topic("gone", {0: [3]})
    await settle(c.controller)
    state = c.state("gone", 0)
    assert (state.leader, state.leader_epoch, state.isr) == (3, 0, [3])


# -- preferred leader election ------------------------------------------------------------------------------

@scenario_with()
async def test_preferred_leader_election(c: Cluster) -> None:
    """After broker 3 comes back and catches up (its leader adds it to the ISR), ElectLeaders moves
    leadership back to it where it is the preferred (first) replica; elsewhere the answer says why not."""
    c.create_topic("t", {0: [3, 1, 2], 1: [1, 3, 2], 2: [3, 2]})
    await c.start()
    c.kill_broker(3)
    await settle(c.controller)
    assert (c.state("t", 0).leader, c.state("t", 2).leader) == (1, 2)
    c.start_broker(3)
    await settle(c.controller)
    assert await c.controller.elect_leaders([("t", 0)], unclean=False) == {
        ("t", 0): Errors.PreferredLeaderNotAvailableError.errno}  # not in sync yet
    for p, leader in ((0, 1), (2, 2)):
        s = c.state("t", p)
        result = await c.controller.alter_partition(leader, [(("t", p), s.leader_epoch, [*s.isr, 3],
                                                                c.version("t", p))])
        assert result[("t", p)][0] == 0

    mark = c.mark()
    result = await c.controller.elect_leaders(None, unclean=False)
    assert result == {("t", 0): 0, ("t", 1): Errors.ElectionNotNeededError.errno, ("t", 2): 0}
    assert (c.state("t", 0).leader, c.state("t", 2).leader) == (3, 3)
    assert c.state("t", 0).leader_epoch == 2  # one bump for broker 3 dying, one for the move back
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert sorted(sent) == [1, 2, 3] and sent[3][("t", 2)].leader == 3


@scenario_with()
async def test_after_a_lost_session_a_broker_stands_for_controller_only_once_registered_again(c: Cluster) -> None:
    """Every session expired (ZooKeeper cut off from all brokers): on its new session the old
    controller must not win /controller before it is registered again. It would see no live broker
    and write every partition offline; Kafka registers the broker first, then re-elects."""
    c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    await c.start()
    epoch_before = c.admin.get_controller_epoch()
    assert epoch_before is not None
    writes_before = len(c.zk.writes)
    for b in (2, 3):
        c.expire_session(b, register=False)
    c.expire_session(CONTROLLER_ID, register=False)
    for _ in range(50):  # the /controller watch fires on the new session; nothing may be elected yet
        await asyncio.sleep(0.01)
    assert not c.controller.active
    assert c.admin.get_controller_epoch() == epoch_before, "elected before it was registered again"
    for b in (CONTROLLER_ID, 2, 3):
        c.register_again(b)
    await settle(c.controller)
    assert c.admin.get_controller_epoch()[0] == epoch_before[0] + 1
    written = [zd.decode_partition_state(w.data or b"") for w in c.zk.writes[writes_before:]
               if w.path.startswith(zd.TOPICS_PATH) and w.data]
    assert all(s.leader != -1 for s in written), f"a partition was taken offline: {written}"
    assert c.state("t", 0).leader in (1, 2, 3) and c.state("t", 1).leader in (1, 2, 3)


# -- many partitions: batched ZooKeeper writes ----------------------------------------------------------

def count_state_writes(c: Cluster) -> dict[str, int]:
    """Count the controller session's partition-state writes: single ones and batches (multi-ops)."""
    session = c.sessions[CONTROLLER_ID]
    counts = {"single": 0, "batches": 0}
    single, batch = session.update_partition_state, session.update_partition_states

    def one(*args: Any) -> int:
        counts["single"] += 1
        return single(*args)

    def many(*args: Any) -> dict[tuple[str, int], int]:
        counts["batches"] += 1
        return batch(*args)

    session.update_partition_state = one  # type: ignore[method-assign]
    session.update_partition_states = many  # type: ignore[method-assign]
    return counts


@scenario_with()
async def test_a_broker_failure_over_many_partitions_is_written_in_a_few_multi_ops(c: Cluster) -> None:
    """1,200 partitions lose broker 3 from their ISR (and 400 their leader): ZooKeeper gets a few batches
    of ZK_STATE_BATCH states, not 1,200 round trips, and every broker hears of each change."""
    from strom.controller.broker_requests import CONTROL_REQUEST_PARTITIONS
    from strom.controller.controller import ZK_STATE_BATCH

    rotations = ([1, 2, 3], [2, 3, 1], [3, 1, 2])
    c.create_topic("many", {p: rotations[p % 3] for p in range(1200)})
    await c.start()
    counts = count_state_writes(c)
    mark = c.mark()
    c.kill_broker(3)
    # the last partition is in the last batch; a cheap check, so the wait does not starve the ZooKeeper thread
    await eventually(lambda: 3 not in c.state("many", 1199).isr, "broker 3 out")
    await settle(c.controller)
    for p in range(1200):
        state = c.state("many", p)
        assert 3 not in state.isr and state.leader in (1, 2) and state.leader_epoch == 1, (p, state)
    assert counts == {"single": 0, "batches": -(-1200 // ZK_STATE_BATCH)}
    sent = leader_and_isr_by_broker(c.sent_since(mark, LeaderAndIsrRequest))
    assert len(sent[1]) == len(sent[2]) == 1200 and 3 not in sent
    # LeaderAndIsr in requests of at most CONTROL_REQUEST_PARTITIONS (encoding one of 3,000 stalled the loop);
    # UpdateMetadata never cuts a topic in two: a broker would show it with fewer partitions for a moment
    sizes = [len(partition_states(r)) for b, r in c.sent_since(mark, LeaderAndIsrRequest) if b == 1]
    assert sizes == [CONTROL_REQUEST_PARTITIONS, 1200 - CONTROL_REQUEST_PARTITIONS]
    assert [len(partition_states(r)) for b, r in c.sent_since(mark, UpdateMetadataRequest) if b == 1] == [1200]


def test_update_metadata_parts_keep_each_topic_whole() -> None:
    from strom.controller.broker_requests import _in_parts

    topics = {"a": list(range(600)), "b": list(range(600)), "c": list(range(1500)), "d": list(range(10))}
    whole = [{t: len(v) for t, v in part.items()} for part in _in_parts(topics, split_topics=False, size=1000)]
    assert whole == [{"a": 600}, {"b": 600}, {"c": 1500}, {"d": 10}]
    cut = [{t: len(v) for t, v in part.items()} for part in _in_parts(topics, split_topics=True, size=1000)]
    assert cut == [{"a": 600, "b": 400}, {"b": 200, "c": 800}, {"c": 700, "d": 10}]


@scenario_with()
async def test_a_batch_that_meets_a_changed_state_is_written_one_by_one(c: Cluster) -> None:
    """A leader's ISR change lands between the controller's read and its batch: ZooKeeper refuses the whole
    multi-op; the controller writes those partitions one at a time, re-deciding the raced one from what it
    reads back, so the other leader's change is kept and broker 3 still leaves every ISR."""
    c.create_topic("t", {p: [1, 2, 3] for p in range(6)})
    await c.start()
    session = c.sessions[CONTROLLER_ID]
    real = session.update_partition_states
    raced = zd.LeaderIsrAndControllerEpoch(1, 0, [1, 3], 1)  # partition 4's leader dropped broker 2 meanwhile

    def racing(*args: Any) -> dict[tuple[str, int], int]:
        session.update_partition_states = real  # type: ignore[method-assign]
        c.admin.update_partition_state("t", 4, raced, c.version("t", 4), c.admin.get_controller_epoch()[1])
        return real(*args)

    session.update_partition_states = racing  # type: ignore[method-assign]
    c.kill_broker(3)
    await eventually(lambda: all(3 not in c.state("t", p).isr for p in range(6)), "broker 3 out of every ISR")
    await settle(c.controller)
    for p in range(6):
        assert c.state("t", p).isr == ([1] if p == 4 else [1, 2]), p


@scenario_with()
async def test_a_leader_shrinking_and_growing_many_isrs_is_written_in_batches(c: Cluster) -> None:
    """AlterPartition for 700 partitions (a follower fell behind, then came back): two multi-ops each way,
    partition epochs move, leader epochs do not; entries that are refused get their own error codes."""
    c.create_topic("t", {p: [1, 2, 3] for p in range(700)})
    await c.start()
    counts = count_state_writes(c)
    shrink = [(("t", p), 0, [1, 3], c.version("t", p)) for p in range(700)]
    shrink.append((("t", 700), 0, [1], 0))  # no such partition
    result = await c.controller.alter_partition(1, shrink)
    assert result[("t", 700)][0] == Errors.UnknownTopicOrPartitionError.errno
    assert all(result[("t", p)][0] == 0 for p in range(700))
    assert all(c.state("t", p).isr == [1, 3] and c.state("t", p).leader_epoch == 0 for p in range(0, 700, 50))
    grow = [(("t", p), 0, [1, 3, 2], c.version("t", p)) for p in range(700)]
    grow[5] = (("t", 5), 0, [1, 3, 2], 0)  # a stale partition epoch
    result = await c.controller.alter_partition(1, grow)
    assert result[("t", 5)][0] == Errors.InvalidUpdateVersionError.errno
    assert all(result[("t", p)][0] == 0 for p in range(700) if p != 5)
    assert c.state("t", 5).isr == [1, 3] and c.state("t", 6).isr == [1, 3, 2]
    assert counts == {"single": 0, "batches": 4}


# -- many partitions: the loop stays free -------------------------------------------------------------

MANY = 5_000  # a failover's passes touch every partition


class LoopShare:
    """Turns another coroutine (standing for every client of the broker) gets while the controller tells
    brokers of a change: between its first request and its last one it builds the next requests from
    every partition, writing nothing to ZooKeeper, so without yielding in that pass nobody else runs."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._sent_per_turn: list[int] = []
        self._sent_at_arm = 0

    def _sent(self) -> int:
        return len(self.cluster.channel.sent) if self.cluster.channels else 0

    def arm(self) -> None:
        self._sent_per_turn.clear()
        self._sent_at_arm = self._sent()

    def turns_between_requests(self) -> int:
        """Turns taken after the first request sent since ``arm`` and before the last."""
        last = self._sent()
        return sum(1 for sent in self._sent_per_turn if self._sent_at_arm < sent < last)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self._sent_per_turn.append(self._sent())


def test_telling_brokers_about_many_partitions_lets_other_coroutines_run() -> None:
    """A new controller over 5,000 partitions whose leaders live (one UpdateMetadata per broker, then a
    LeaderAndIsr to each replica), then a broker joining (UpdateMetadata for it, a pass for the replicas
    it hosts): the passes that build these requests yield between chunks of partitions."""
    async def go() -> None:
        c = Cluster(brokers=(1, 2, 3))
        share = LoopShare(c)
        other = asyncio.create_task(share.run())
        try:
            c.create_topic("many", {p: [1 + p % 2, 2 - p % 2] for p in range(MANY)})
            version = c.admin.set_controller_epoch(3)
            c.admin.create_partition_states("many", {
                p: zd.LeaderIsrAndControllerEpoch(1 + p % 2, 4, [1, 2], 3) for p in range(MANY)}, version)
            share.arm()
            await c.start()
            during_failover = share.turns_between_requests()
            sent = leader_and_isr_by_broker(c.sent_since(0, LeaderAndIsrRequest))
            assert {b: len(states) for b, states in sent.items()} == {1: MANY, 2: MANY}

            mark = c.mark()
            share.arm()
            c.start_broker(4)
            await settle(c.controller)
            during_join = share.turns_between_requests()
            metadata = dict(c.sent_since(mark, UpdateMetadataRequest))
            assert len(partition_states(metadata[4])) == MANY  # the newcomer gets the whole picture
            assert c.state("many", 0).leader_epoch == 4  # nothing to elect
        finally:
            other.cancel()
            await c.stop()
        chunks = MANY // STATE_CHANGE_CHUNK  # a pass over all partitions yields this often
        assert during_failover >= chunks // 2
        assert during_join >= chunks // 2

    run(go)


@scenario_with()
async def test_preferred_election_of_many_partitions_is_written_in_batches(c: Cluster) -> None:
    """Broker 3 is back in every ISR of the 600 partitions it prefers to lead: ElectLeaders moves them all
    in two multi-ops; partitions that need nothing, or are unknown, say so."""
    c.create_topic("t", {p: [3, 1, 2] for p in range(600)} | {600: [1, 3, 2]})
    await c.start()
    c.kill_broker(3)
    await eventually(lambda: c.state("t", 599).leader == 1, "leadership off broker 3")
    await settle(c.controller)
    c.start_broker(3)
    await settle(c.controller)
    back = [(("t", p), c.state("t", p).leader_epoch, [1, 2, 3], c.version("t", p)) for p in range(600)]
    assert all(code == 0 for code, _ in (await c.controller.alter_partition(1, back)).values())
    counts = count_state_writes(c)
    result = await c.controller.elect_leaders([*[("t", p) for p in range(601)], ("gone", 0)], unclean=False)
    assert all(result[("t", p)] == 0 and c.state("t", p).leader == 3 for p in range(600))
    assert result[("t", 600)] == Errors.ElectionNotNeededError.errno
    assert result[("gone", 0)] == Errors.UnknownTopicOrPartitionError.errno
    assert counts == {"single": 0, "batches": 2}
