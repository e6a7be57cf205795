"""GroupCoordinator state machine against real __consumer_offsets logs (no network)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.unit.fake_clock import ManualClock
from tests.unit.group_support import Harness, run

from strom.coordinator.group.consumer_protocol import encode_assignment, encode_subscription
from strom.coordinator.group.group_coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupConfig,
    GroupCoordinator,
    MemberIdentity,
)
from strom.coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from strom.coordinator.group.member_metadata import JoinGroupResult

SUB = encode_subscription(["t"])


async def settle() -> None:
    """Let every task that can run, run (parked requests reach their wait)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def join(c: GroupCoordinator, group: str, member_id: str = "", instance: str | None = None,
               protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000,
               rebalance_ms: int = 10_000, protocol_type: str = "consumer",
               require_known: bool = True) -> JoinGroupResult:
    return await c.handle_join_group(group, member_id, instance, require_known, "client", "/127.0.0.1",
                                     rebalance_ms, session_ms, protocol_type,
                                     protocols if protocols is not None else [("range", SUB)])


async def join_new(c: GroupCoordinator, group: str, **kw: Any) -> JoinGroupResult:
    """KIP-394 two-step join: get a member id, then join with it."""
    first = await join(c, group, **kw)
    assert first.error_code == MEMBER_ID_REQUIRED
    return await join(c, group, member_id=first.member_id, **kw)


async def sync(c: GroupCoordinator, group: str, r: JoinGroupResult, assignments: dict[str, bytes] | None = None
               ) -> Any:
    return await c.handle_sync_group(group, r.generation_id, r.member_id, None, None, None, assignments or {})


def test_single_member_join_sync_heartbeat(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        r = await join_new(c, "g")
        assert r.error_code == 0 and r.generation_id == 1 and r.leader_id == r.member_id
        assert r.protocol_name == "range" and [m[0] for m in r.members] == [r.member_id]
        group = h.manager.get_group("g")
        assert group is not None and group.is_in(GroupState.COMPLETING_REBALANCE)
        asg = encode_assignment({"t": [0, 1]})
        s = await sync(c, "g", r, {r.member_id: asg})
        assert s.error_code == 0 and s.assignment == asg
        assert group.is_in(GroupState.STABLE)
        assert await c.handle_heartbeat("g", r.member_id, None, r.generation_id) == 0
        assert await c.handle_heartbeat("g", r.member_id, None, r.generation_id + 1) == ILLEGAL_GENERATION
        assert await c.handle_heartbeat("g", "nobody", None, r.generation_id) == UNKNOWN_MEMBER_ID
        assert await c.handle_heartbeat("nope", "x", None, 1) == UNKNOWN_MEMBER_ID
        h.close()

    run(main)


def test_second_member_triggers_rebalance_and_both_get_assignments(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path), clock=ManualClock())
        c = h.coordinator
        r1 = await join_new(c, "g")
        await sync(c, "g", r1, {r1.member_id: encode_assignment({"t": [0, 1]})})
        # A second member arrives: the first learns about it from its heartbeat.
        first = await join(c, "g")
        j2 = asyncio.create_task(join(c, "g", member_id=first.member_id))
        await settle()
        assert await c.handle_heartbeat("g", r1.member_id, None, r1.generation_id) == REBALANCE_IN_PROGRESS
        j1 = await join(c, "g", member_id=r1.member_id)
        r2 = await j2
        assert j1.generation_id == r2.generation_id == 2
        assert j1.leader_id == r1.member_id and len(j1.members) == 2 and r2.members == []
        a1, a2 = encode_assignment({"t": [0]}), encode_assignment({"t": [1]})
        s2 = asyncio.create_task(sync(c, "g", r2))
        s1 = await sync(c, "g", j1, {r1.member_id: a1, r2.member_id: a2})
        assert s1.assignment == a1 and (await s2).assignment == a2
        assert h.manager.get_group("g").is_in(GroupState.STABLE)  # type: ignore[union-attr]
        h.close()

    run(main)


def test_leave_group_and_batched_leave(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        r = await join_new(c, "g")
        await sync(c, "g", r)
        err, results = await c.handle_leave_group("g", [MemberIdentity(r.member_id), MemberIdentity("ghost")])
        assert err == 0 and [code for _, code in results] == [0, UNKNOWN_MEMBER_ID]
        group = h.manager.get_group("g")
        assert group is not None and group.is_in(GroupState.EMPTY) and group.generation_id == 2
        h.close()

    run(main)


def test_session_timeout_expires_member(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        h = Harness(str(tmp_path), clock=clock)
        c = h.coordinator
        r1 = await join_new(c, "g", session_ms=150)
        await sync(c, "g", r1)
        first = await join(c, "g", session_ms=5000)
        j2 = asyncio.create_task(join(c, "g", member_id=first.member_id, session_ms=5000))
        await clock.advance(100)
        assert not j2.done()  # member 1's session has not expired yet
        # member 1 never heartbeats again: after 150 ms it is removed and member 2 completes the join alone
        # (the timing wheel rounds expiries to its buckets, so move well past it).
        await clock.advance(100)
        r2 = await asyncio.wait_for(j2, 5)
        assert r2.error_code == 0 and r2.leader_id == r2.member_id and r2.generation_id == 2
        group = h.manager.get_group("g")
        assert group is not None and list(group.members) == [r2.member_id]
        assert await c.handle_heartbeat("g", r1.member_id, None, 1) == UNKNOWN_MEMBER_ID
        h.close()

    run(main)


def test_member_that_does_not_rejoin_is_dropped_after_rebalance_timeout(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        h = Harness(str(tmp_path), clock=clock)
        c = h.coordinator
        r1 = await join_new(c, "g", rebalance_ms=200)
        await sync(c, "g", r1)
        first = await join(c, "g", rebalance_ms=200)
        # member 1 keeps heartbeating but never rejoins
        j2 = asyncio.create_task(join(c, "g", member_id=first.member_id, rebalance_ms=200))
        for _ in range(3):
            await clock.advance(50)
            await c.handle_heartbeat("g", r1.member_id, None, 1)
        assert not j2.done()  # the rebalance still waits for member 1
        await clock.advance(100)  # past the rebalance timeout (the wheel rounds to its buckets)
        r2 = await asyncio.wait_for(j2, 5)
        assert r2.error_code == 0 and r2.generation_id == 2
        assert not h.manager.get_group("g").has(r1.member_id)  # type: ignore[union-attr]
        h.close()

    run(main)


def test_static_member_restart_keeps_generation_and_fences_old_id(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        r1 = await join(c, "g", instance="i-1")  # static members skip MEMBER_ID_REQUIRED
        assert r1.error_code == 0
        asg = encode_assignment({"t": [0]})
        await sync(c, "g", r1, {r1.member_id: asg})
        again = await join(c, "g", instance="i-1")
        assert again.error_code == 0 and again.generation_id == r1.generation_id
        assert again.member_id != r1.member_id and again.skip_assignment
        group = h.manager.get_group("g")
        assert group is not None and group.is_in(GroupState.STABLE)
        s = await c.handle_sync_group("g", again.generation_id, again.member_id, "i-1", None, None, {})
        assert s.error_code == 0 and s.assignment == asg
        assert await c.handle_heartbeat("g", r1.member_id, "i-1", r1.generation_id) == FENCED_INSTANCE_ID
        assert await c.handle_heartbeat("g", again.member_id, "i-1", again.generation_id) == 0
        err, res = await c.handle_leave_group("g", [MemberIdentity(r1.member_id, "i-1")])
        assert res[0][1] == FENCED_INSTANCE_ID
        err, res = await c.handle_leave_group("g", [MemberIdentity("", "i-1")])
        assert res[0][1] == 0 and group.is_in(GroupState.EMPTY)
        h.close()

    run(main)


def test_bad_join_requests(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        assert (await join(c, "")).error_code == INVALID_GROUP_ID
        assert (await join(c, "g", session_ms=1)).error_code == INVALID_SESSION_TIMEOUT
        assert (await join(c, "g", protocol_type="")).error_code == INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, "g", protocols=[])).error_code == INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, "g", member_id="made-up")).error_code == UNKNOWN_MEMBER_ID
        r = await join_new(c, "g")
        await sync(c, "g", r)
        # a member speaking another protocol type, or no common assignor, cannot join
        assert (await join(c, "g", protocol_type="connect")).error_code == INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, "g", protocols=[("sticky", b"")])).error_code == INCONSISTENT_GROUP_PROTOCOL
        group = h.manager.get_group("g")
        assert group is not None and group.is_in(GroupState.STABLE) and group.size == 1
        h.close()

    run(main)


def test_protocol_selection_by_vote(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        # The initial delay gathers all three.
        h = Harness(str(tmp_path), config=GroupConfig(10, 60_000, 100), clock=clock)
        c = h.coordinator
        prefs = [[("roundrobin", SUB), ("range", SUB)], [("range", SUB), ("roundrobin", SUB)],
                 [("range", SUB), ("roundrobin", SUB), ("sticky", SUB)]]
        firsts = [await join(c, "g", protocols=p) for p in prefs]
        joins = asyncio.gather(*[join(c, "g", member_id=f.member_id, protocols=p)
                                 for f, p in zip(firsts, prefs, strict=True)])
        await clock.advance(50)
        assert not joins.done()  # still in the initial delay
        for _ in range(100):  # the delay restarts while members keep arriving, up to the rebalance timeout
            if joins.done():
                break
            await clock.advance(100)
        results = await joins
        assert {r.protocol_name for r in results} == {"range"}
        assert len({r.generation_id for r in results}) == 1
        h.close()

    run(main)


def test_offset_commit_rules(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        off = {("t", 0): OffsetAndMetadata(10, commit_timestamp=1)}
        # simple consumer (no group management) may commit to a new or empty group
        assert await c.handle_commit_offsets("simple", "", None, -1, off) == {("t", 0): 0}
        # a generation for a group that does not exist is stale
        assert await c.handle_commit_offsets("nogroup", "m", None, 3, off) == {("t", 0): ILLEGAL_GENERATION}
        r = await join_new(c, "g")
        assert await c.handle_commit_offsets("g", r.member_id, None, r.generation_id, off) == \
            {("t", 0): REBALANCE_IN_PROGRESS}
        await sync(c, "g", r)
        assert await c.handle_commit_offsets("g", r.member_id, None, r.generation_id, off) == {("t", 0): 0}
        assert await c.handle_commit_offsets("g", r.member_id, None, r.generation_id - 1, off) == \
            {("t", 0): ILLEGAL_GENERATION}
        assert await c.handle_commit_offsets("g", "stranger", None, r.generation_id, off) == \
            {("t", 0): UNKNOWN_MEMBER_ID}
        # a simple commit into an active group would race its members
        assert await c.handle_commit_offsets("g", "", None, -1, off) == {("t", 0): UNKNOWN_MEMBER_ID}
        big = {("t", 1): OffsetAndMetadata(1, metadata="x" * 5000)}
        assert await c.handle_commit_offsets("g", r.member_id, None, r.generation_id, big) == {("t", 1): 12}
        err, found = c.handle_fetch_offsets("g", [("t", 0), ("t", 1)])
        assert err == 0 and found[("t", 0)].offset == 10 and found[("t", 1)] is None  # type: ignore[union-attr]
        err, found = c.handle_fetch_offsets("g", None)
        assert list(found) == [("t", 0)]
        assert c.handle_fetch_offsets("unknown", [("t", 0)]) == (0, {("t", 0): None})
        h.close()

    run(main)


def test_state_survives_reload(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        r = await join(c, "g", instance="i-1")
        asg = encode_assignment({"t": [0]})
        await sync(c, "g", r, {r.member_id: asg})
        await c.handle_commit_offsets("g", r.member_id, None, r.generation_id,
                                      {("t", 0): OffsetAndMetadata(5, 3, "m", 100)})
        await c.handle_commit_offsets("g", r.member_id, None, r.generation_id,
                                      {("t", 0): OffsetAndMetadata(7, 3, "m2", 200)})
        await c.handle_commit_offsets("s", "", None, -1, {("u", 1): OffsetAndMetadata(1)})
        await c.handle_commit_offsets("dead", "", None, -1, {("u", 1): OffsetAndMetadata(1)})
        assert await c.handle_delete_groups(["dead"]) == {"dead": 0}
        h.close()

        h2 = Harness(str(tmp_path))
        c2 = h2.coordinator
        group = h2.manager.get_group("g")
        assert group is not None and group.is_in(GroupState.STABLE) and group.generation_id == r.generation_id
        assert group.offsets[("t", 0)].offset == 7 and group.offsets[("t", 0)].metadata == "m2"
        assert group.get(r.member_id).assignment == asg and group.static_member_id("i-1") == r.member_id
        assert h2.manager.get_group("s").offsets[("u", 1)].offset == 1  # type: ignore[union-attr]
        assert h2.manager.get_group("dead") is None
        # the recovered member carries on without a rebalance
        assert await c2.handle_heartbeat("g", r.member_id, "i-1", r.generation_id) == 0
        h2.close()

    run(main)


def test_offsets_of_empty_group_expire(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path), retention_ms=1000)
        c = h.coordinator
        await c.handle_commit_offsets("old", "", None, -1, {("t", 0): OffsetAndMetadata(3)})
        group = h.manager.get_group("old")
        assert group is not None
        group.offsets[("t", 0)].commit_timestamp -= 5000
        group.current_state_timestamp -= 5000
        await c.handle_commit_offsets("fresh", "", None, -1, {("t", 0): OffsetAndMetadata(3)})
        assert await c.cleanup_group_metadata() == 1
        assert h.manager.get_group("old") is None and h.manager.get_group("fresh") is not None
        h.close()
        h2 = Harness(str(tmp_path))
        assert h2.manager.get_group("old") is None
        h2.close()

    run(main)


def test_delete_groups_and_offsets(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        r = await join_new(c, "g")
        await sync(c, "g", r)
        off = {("t", 0): OffsetAndMetadata(1), ("other", 0): OffsetAndMetadata(2)}
        await c.handle_commit_offsets("g", r.member_id, None, r.generation_id, off)
        assert await c.handle_delete_groups(["g", "missing"]) == {"g": NON_EMPTY_GROUP, "missing": GROUP_ID_NOT_FOUND}
        err, res = await c.handle_delete_offsets("g", [("t", 0), ("other", 0)])
        assert err == 0 and res == {("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): 0}
        assert (await c.handle_delete_offsets("missing", [("t", 0)]))[0] == GROUP_ID_NOT_FOUND
        await c.handle_leave_group("g", [MemberIdentity(r.member_id)])
        assert await c.handle_delete_groups(["g"]) == {"g": 0}
        assert c.handle_describe_group("g").state == "Dead"
        h.close()

    run(main)


def test_not_coordinator_and_loading(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path), num_partitions=4)
        c = h.coordinator
        p = h.manager.partition_for("g")
        c.on_resignation(p)
        assert (await join(c, "g")).error_code == NOT_COORDINATOR
        h.manager.loading_partitions.add(p)
        assert (await join(c, "g")).error_code == COORDINATOR_LOAD_IN_PROGRESS
        h.close()

    run(main)


def test_oversized_member_metadata_fails_sync_but_not_the_coordinator(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path), log_props={"max.message.bytes": "10000"})
        c = h.coordinator
        r = await join_new(c, "big", protocols=[("range", b"x" * 20000)])
        s = await sync(c, "big", r)
        assert s.error_code == -1  # Kafka: UNKNOWN_SERVER_ERROR for an unstorable group record
        group = h.manager.get_group("big")
        assert group is not None and group.is_in(GroupState.PREPARING_REBALANCE)
        # other groups are unaffected
        r2 = await join_new(c, "small")
        assert (await sync(c, "small", r2)).error_code == 0
        h.close()

    run(main)


def test_list_and_describe(tmp_path: Path) -> None:
    async def main() -> None:
        h = Harness(str(tmp_path))
        c = h.coordinator
        r = await join_new(c, "g")
        asg = encode_assignment({"t": [0]})
        await sync(c, "g", r, {r.member_id: asg})
        await c.handle_commit_offsets("s", "", None, -1, {("t", 0): OffsetAndMetadata(1)})
        err, groups = c.handle_list_groups()
        assert err == 0 and {g.group_id for g in groups} == {"g", "s"}
        assert [g.group_id for g in c.handle_list_groups({"Stable"})[1]] == ["g"]
        d = c.handle_describe_group("g")
        assert d.state == "Stable" and d.protocol == "range" and d.protocol_type == "consumer"
        assert d.members[0][0].member_id == r.member_id and d.members[0][1] == SUB and d.members[0][2] == asg
        h.close()

    run(main)
