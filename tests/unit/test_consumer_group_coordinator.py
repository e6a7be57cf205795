"""The KIP-848 consumer group coordinator over real __consumer_offsets logs: its records replay
into the same group, a failed append leaves the group as the log has it, and the assignors."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from tests.unit.group_support import Harness, run

from strom.coordinator.group.assignors import AssignmentMember, RangeAssignor, UniformAssignor
from strom.coordinator.group.consumer_group_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
)
from strom.metadata.store import PartitionState, TopicMetadata

NOT_LEADER_OR_FOLLOWER = 6


class Topics:
    """The read side of cluster metadata the coordinator uses (one topic per name)."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self._topics = {name: TopicMetadata(name, uuid.uuid4(), {p: PartitionState(p, 0, 0, [0], [0])
                                                                 for p in range(n)})
                        for name, n in partitions.items()}

    def topics(self) -> Mapping[str, TopicMetadata]:
        return self._topics

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return next((t for t in self._topics.values() if t.topic_id == topic_id), None)


def _coordinator(harness: Harness, topics: Topics) -> ConsumerGroupCoordinator:
    cgc = ConsumerGroupCoordinator(harness.coordinator, topics, ConsumerGroupConfig())  # type: ignore[arg-type]
    harness.coordinator.consumer_groups = cgc
    return cgc


def _join(member_id: str, topic: str = "t") -> HeartbeatRequest:
    return HeartbeatRequest("g", member_id, 0, rebalance_timeout_ms=30000, subscribed_topic_names=[topic], owned=[])


def test_records_replay_into_the_same_group() -> None:
    topics = Topics({"t": 4})
    with tempfile.TemporaryDirectory() as d:
        async def first() -> Any:
            h = Harness(d)
            try:
                cgc = _coordinator(h, topics)
                await cgc.heartbeat(_join("a"))
                await cgc.heartbeat(_join("b"))
                await cgc.heartbeat(_join("c"))
                await cgc.heartbeat(HeartbeatRequest("g", "c", 3, owned=[]))
                assert (await cgc.heartbeat(HeartbeatRequest("g", "c", -1))).member_epoch == -1
                # A static member leaves for a moment and comes back under a new member id.
                await cgc.heartbeat(HeartbeatRequest("g", "s", 0, instance_id="i", rebalance_timeout_ms=30000,
                                                     subscribed_topic_names=["t"], owned=[]))
                assert (await cgc.heartbeat(HeartbeatRequest("g", "s", -2, instance_id="i"))).member_epoch == -2
                back = await cgc.heartbeat(HeartbeatRequest("g", "s2", 0, instance_id="i", rebalance_timeout_ms=30000,
                                                            subscribed_topic_names=["t"], owned=[]))
                assert back.error_code == 0
                cg = h.manager.get_group("g").consumer_group
                return (cg.group_epoch, cg.target_assignment_epoch, {m: set(x.assigned) for m, x in cg.members.items()},
                        cg.target)
            finally:
                h.close()

        async def second() -> Any:
            h = Harness(d)
            try:
                cgc = _coordinator(h, topics)
                # The harness loaded the partitions before the consumer protocol was attached: resolve now.
                cgc.on_group_loaded(h.manager.get_group("g"))
                cg = h.manager.get_group("g").consumer_group
                state = (cg.group_epoch, cg.target_assignment_epoch, {m: set(x.assigned) for m, x in cg.members.items()},
                         cg.target)
                cgc.forget(h.manager.get_group("g"))
                return state
            finally:
                h.close()

        before = run(first)
        assert sorted(before[2]) == ["a", "b", "s2"]
        assert run(second) == before


def test_a_failed_append_leaves_the_group_as_the_log_has_it() -> None:
    topics = Topics({"t": 2})
    with tempfile.TemporaryDirectory() as d:
        async def scenario() -> None:
            h = Harness(d)
            try:
                cgc = _coordinator(h, topics)
                assert (await cgc.heartbeat(_join("a"))).error_code == 0
                cg = h.manager.get_group("g").consumer_group
                epoch = cg.group_epoch

                def refuse(entries: Any, acks: int, origin: Any = None) -> Any:
                    return {tp: SimpleNamespace(error_code=NOT_LEADER_OR_FOLLOWER, error_message="moved",
                                                base_offset=-1) for tp in entries}, None

                h.replicas.append_records = refuse  # type: ignore[method-assign]
                result = await cgc.heartbeat(_join("b"))
                assert result.error_code != 0
                assert (cg.group_epoch, sorted(cg.members)) == (epoch, ["a"])
                assert cg.owners == {("t", 0): "a", ("t", 1): "a"}
                cgc.forget(h.manager.get_group("g"))
            finally:
                h.close()

        run(scenario)


def test_uniform_is_balanced_and_sticky() -> None:
    partitions = {"t": 10}
    members = [AssignmentMember(f"m{i}", frozenset({"t"}), {}) for i in range(3)]
    first = UniformAssignor().assign(members, partitions)
    assert sorted(len(a["t"]) for a in first.values()) == [3, 3, 4]
    members = [AssignmentMember(m.member_id, m.subscribed_topics, first[m.member_id]) for m in members]
    members.append(AssignmentMember("m3", frozenset({"t"}), {}))
    second = UniformAssignor().assign(members, partitions)
    assert sorted(len(a.get("t", ())) for a in second.values()) == [2, 2, 3, 3]
    moved = sum(len(first[m]["t"] - second[m].get("t", set())) for m in first)
    assert moved == 2  # only what the new member needs


def test_range_gives_contiguous_ranges() -> None:
    members = [AssignmentMember(m, frozenset({"t"}), {}) for m in ("b", "a")]
    assert RangeAssignor().assign(members, {"t": 5}) == {"b": {"t": {3, 4}}, "a": {"t": {0, 1, 2}}}


def test_uniform_prefers_members_in_a_replica_rack() -> None:
    racks = {("t", 0): frozenset({"a"}), ("t", 1): frozenset({"a"}), ("t", 2): frozenset({"b"}),
             ("t", 3): frozenset({"b"})}
    members = [AssignmentMember("m1", frozenset({"t"}), {}, "a"), AssignmentMember("m2", frozenset({"t"}), {}, "b")]
    assert UniformAssignor().assign(members, {"t": 4}, racks) == {"m1": {"t": {0, 1}}, "m2": {"t": {2, 3}}}
    # Without rack ids the same members are simply balanced.
    plain = [AssignmentMember(m.member_id, m.subscribed_topics, {}) for m in members]
    assert sorted(len(a["t"]) for a in UniformAssignor().assign(plain, {"t": 4}, racks).values()) == [2, 2]
