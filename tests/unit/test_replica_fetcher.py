"""The replica fetcher's truncate-then-fetch loop against an in-process leader, without processes.

The follower is a real `Partition` on a real `Log`; so is the leader, served by `FakeLeader`, which
answers OffsetForLeaderEpoch and Fetch as a leader broker's handlers do (same fencing, records read
from its log) and round-trips every answer through the wire format the fetcher decodes. Tests
assert on the follower's log: which records it kept, which it dropped, and that it ends up a copy
of the leader's.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

import strom.storage.leader_epoch_cache as leader_epoch_cache
from strom.broker.partition import Partition
from strom.config import BrokerConfig
from strom.metadata.store import PartitionState
from strom.protocol.api_keys import ApiKey
from strom.protocol.inter_broker import build
from strom.protocol.record_batch import build_batch, iter_batches
from strom.protocol.replica_fetch import FETCH_VERSION
from strom.replication.replica_fetcher import ReplicaFetcher
from strom.server_common.types import TopicPartition
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

BOUND_S = 10.0  # an upper bound for the fetcher to converge; never an assertion
TP: TopicPartition = ("t", 0)
LEADER, FOLLOWER = 2, 1
TOPIC_ID = uuid.uuid4()


def open_log(directory: str) -> Log:
    return Log(directory, LogConfig.from_props({}), recovery_point=0, clean_shutdown=False, now_ms=0)


def replica(directory: str, local: int, leader_epoch: int) -> Partition:
    state = PartitionState(TP[1], leader=LEADER, leader_epoch=leader_epoch, replicas=[LEADER, FOLLOWER],
                           isr=[LEADER, FOLLOWER])
    return Partition(TP[0], TP[1], TOPIC_ID, state, open_log(directory), local)


def write(part: Partition, epoch: int, *values: str) -> None:
    """Records as a leader in `epoch` appended them (one batch per call)."""
    part.log.append_as_leader(build_batch([(None, v.encode(), [], 1_000) for v in values]), epoch)


def contents(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, last offset, leader epoch) of every batch: what a log's history is."""
    data = log.read(log.log_start_offset, 1 << 30, None).to_bytes()
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in iter_batches(data)]


class FollowerReplicas:
    """The replica manager's side the fetcher calls: hosted partitions and the follower append."""

    def __init__(self, *parts: Partition) -> None:
        self.partitions: dict[TopicPartition, Partition] = {(p.topic, p.index): p for p in parts}

    def append_as_follower(self, tp: TopicPartition, records: Any, leader_high_watermark: int,
                           leader_log_start_offset: int) -> None:
        part = self.partitions.get(tp)
        if part is not None and not part.is_leader:
            part.append_records_as_follower(records, leader_high_watermark, leader_log_start_offset)


class FakeLeader:
    """The leader broker as the fetcher's connection sees it: OffsetForLeaderEpoch, Fetch, ListOffsets."""

    def __init__(self, part: Partition) -> None:
        self.part = part
        self.asked: list[str] = []
        self.fetched_from: list[int] = []  # the fetch offset of every partition of every Fetch

    async def send(self, request: Any, version: int) -> Any:
        await asyncio.sleep(0)  # a network round trip yields to the loop
        if isinstance(request, OffsetForLeaderEpochRequest):
            self.asked.append("OffsetForLeaderEpoch")
            topics = []
            for t in request.topics:
                parts = []
                for p in t.partitions:
                    try:
                        epoch, end = self.part.last_offset_for_leader_epoch(p.current_leader_epoch, p.leader_epoch)
                        parts.append({"partition": p.partition, "error_code": 0, "leader_epoch": epoch,
                                      "end_offset": end})
                    except Errors.KafkaError as exc:
                        parts.append({"partition": p.partition, "error_code": exc.errno, "leader_epoch": -1,
                                      "end_offset": -1})
                topics.append({"topic": t.topic, "partitions": parts})
            response = build(OffsetForLeaderEpochResponse, throttle_time_ms=0, topics=topics)
            return OffsetForLeaderEpochResponse.decode(response.encode(version=version), version=version)
        if isinstance(request, ListOffsetsRequest):
            self.asked.append("ListOffsets")
            response = build(ListOffsetsResponse, throttle_time_ms=0, topics=[{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1,
                 "offset": self.part.log.log_start_offset, "leader_epoch": self.part.leader_epoch}
                for p in t.partitions]} for t in request.topics])
            return ListOffsetsResponse.decode(response.encode(version=version), version=version)
        raise AssertionError(f"unexpected request {type(request).__name__}")

    async def send_raw(self, api_key: int, version: int, body: bytes) -> bytes:
        await asyncio.sleep(0)
        assert api_key == ApiKey.FETCH and version == FETCH_VERSION
        request = FetchRequest.decode(body, version=version)
        self.fetched_from += [p.fetch_offset for t in request.topics for p in t.partitions]
        responses = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                log = self.part.log
                answer = {"partition_index": p.partition, "error_code": 0, "high_watermark": log.high_watermark,
                          "last_stable_offset": log.high_watermark, "log_start_offset": log.log_start_offset,
                          "aborted_transactions": None, "preferred_read_replica": -1, "records": None}
                try:
                    self.part.check_leader_epoch(p.current_leader_epoch)
                    answer["records"] = self.part.read_records(p.fetch_offset, p.partition_max_bytes, 0, True,
                                                               replica_id=request.replica_id).to_bytes()
                except Errors.KafkaError as exc:
                    answer["error_code"] = exc.errno
                parts.append(answer)
            responses.append({"topic": t.topic, "partitions": parts})
        response = build(FetchResponse, throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
        return bytes(response.encode(version=version))

    async def close(self) -> None:
        pass


class FetcherAgainst(ReplicaFetcher):
    """A ReplicaFetcher whose connection to the source broker is the in-process leader."""

    def __init__(self, leader: FakeLeader, replicas: FollowerReplicas) -> None:
        super().__init__(FOLLOWER, LEADER, replicas, BrokerConfig({"broker.id": str(FOLLOWER)}),  # type: ignore[arg-type]
                         lambda _b: ("127.0.0.1", 1))
        self.leader = leader

    def _connection(self) -> Any:
        return self.leader


async def eventually(predicate: Callable[[], Any], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"not reached: {what}")
        await asyncio.sleep(0)


def replicate(tmp_path: str, leader_epoch: int, setup: Callable[[Partition, Partition], None],
              check: Callable[[Partition, Partition, FakeLeader], Awaitable[None]]) -> None:
    """Build both logs with setup(leader, follower), run a fetcher for the follower, then check."""
    leader = replica(os.path.join(tmp_path, "leader", "t-0"), LEADER, leader_epoch)
    follower = replica(os.path.join(tmp_path, "follower", "t-0"), FOLLOWER, leader_epoch)
    setup(leader, follower)
    leader.log.update_high_watermark(leader.log.log_end_offset)

    async def go() -> None:
        fake = FakeLeader(leader)
        fetcher = FetcherAgainst(fake, FollowerReplicas(follower))
        fetcher.start()
        fetcher.add(TP, leader_epoch)
        try:
            await check(leader, follower, fake)
        finally:
            await fetcher.stop()

    try:
        asyncio.run(asyncio.wait_for(go(), BOUND_S * 2))
    finally:
        leader.log.close()
        follower.log.close()


async def converged(leader: Partition, follower: Partition) -> None:
    await eventually(lambda: contents(follower.log) == contents(leader.log)
                     and follower.high_watermark == leader.high_watermark, "the follower copies the leader")


def test_an_empty_follower_copies_the_leader(tmp_path: str) -> None:
    """No epochs yet: nothing to ask, the follower fetches from 0 and follows the leader's HW."""
    def setup(leader: Partition, _follower: Partition) -> None:
        write(leader, 0, "a", "b")
        write(leader, 1, "c")

    async def check(leader: Partition, follower: Partition, fake: FakeLeader) -> None:
        await converged(leader, follower)
        assert contents(follower.log) == [(0, 1, 0), (2, 2, 1)]
        assert follower.log.latest_epoch == 1
        assert "OffsetForLeaderEpoch" not in fake.asked

    replicate(tmp_path, 2, setup, check)


def test_a_former_leader_drops_what_the_new_leader_never_had(tmp_path: str) -> None:
    """The follower led epoch 1 and wrote offsets 3-5, only 3 of which reached the new leader before it
    took over in epoch 2. The new leader says epoch 1 ends at 4: the follower cuts 4-5 (never
    committed) and takes the new leader's 4-6 of epoch 2, instead of keeping two histories."""
    def setup(leader: Partition, follower: Partition) -> None:
        for part in (leader, follower):
            write(part, 0, "a", "b", "c")
            write(part, 1, "d")
        write(follower, 1, "e-lost", "f-lost")
        write(leader, 2, "E", "F", "G")

    async def check(leader: Partition, follower: Partition, fake: FakeLeader) -> None:
        await converged(leader, follower)
        assert contents(follower.log) == [(0, 2, 0), (3, 3, 1), (4, 6, 2)]
        assert follower.log.end_offset_for_epoch(1) == (1, 4)
        assert fake.asked[0] == "OffsetForLeaderEpoch"
        # Cut at the divergence point, not at its (unknown, here 0) high watermark: it kept 0-3.
        assert fake.fetched_from[0] == 4

    replicate(tmp_path, 2, setup, check)


def test_a_follower_whose_latest_epoch_the_leader_never_saw(tmp_path: str) -> None:
    """The follower holds epoch 3 (a term nobody else heard of); the leader's last epoch before 3 is 0,
    which ends at 3 on the leader but at 2 on the follower. The follower cuts at the earlier of the
    two (2): cutting at the leader's 3 would keep a zombie record of epoch 3 at offset 2 under the
    leader's history from 3 on."""
    def setup(leader: Partition, follower: Partition) -> None:
        for part in (leader, follower):
            write(part, 0, "a", "b")
        write(leader, 0, "c")  # the follower missed it before it led (epoch 3) without anyone knowing
        write(leader, 4, "D", "E")
        write(follower, 3, "c-zombie")
        write(follower, 3, "d-zombie", "e-zombie")

    async def check(leader: Partition, follower: Partition, fake: FakeLeader) -> None:
        await converged(leader, follower)
        assert contents(follower.log) == [(0, 1, 0), (2, 2, 0), (3, 4, 4)]
        assert follower.log.latest_epoch == 4
        assert fake.fetched_from[0] == 2

    replicate(tmp_path, 4, setup, check)


def test_a_follower_in_step_keeps_everything(tmp_path: str) -> None:
    """Same history up to the follower's end: truncation finds nothing to cut, fetching adds the rest."""
    def setup(leader: Partition, follower: Partition) -> None:
        for part in (leader, follower):
            write(part, 0, "a", "b")
            write(part, 1, "c")
        write(leader, 1, "d", "e")

    async def check(leader: Partition, follower: Partition, fake: FakeLeader) -> None:
        await converged(leader, follower)
        assert contents(follower.log) == [(0, 1, 0), (2, 2, 1), (3, 4, 1)]
        assert fake.fetched_from[0] == 3

    replicate(tmp_path, 1, setup, check)


def test_a_follower_below_the_leaders_log_start_starts_over_there(tmp_path: str) -> None:
    """The leader deleted records (retention / DeleteRecords) past the follower's end: the follower
    starts over at the leader's log start instead of fetching an offset that no longer exists."""
    def setup(leader: Partition, _follower: Partition) -> None:
        write(leader, 0, "a", "b")
        write(leader, 0, "c", "d")
        leader.log.update_high_watermark(leader.log.log_end_offset)
        leader.log.delete_records(2)

    async def check(leader: Partition, follower: Partition, fake: FakeLeader) -> None:
        await eventually(lambda: follower.log.log_end_offset == 4 and follower.high_watermark == 4,
                         "the follower caught up from the leader's log start")
        assert follower.log.log_start_offset == 2
        assert contents(follower.log) == [(2, 3, 0)]
        assert "ListOffsets" in fake.asked

    replicate(tmp_path, 1, setup, check)


def test_a_follower_writes_the_epochs_it_fetches_off_the_event_loop(tmp_path: str, monkeypatch) -> None:  # noqa: ANN001
    """Each new leader epoch a follower fetches costs a fsynced checkpoint write: it happens on the
    storage thread before the append, never on the loop thread that serves every connection."""
    writes: list[tuple[str, str]] = []
    real_write = leader_epoch_cache.write_atomically

    def recording_write(path: str, data: bytes, fsync: bool = True) -> None:
        writes.append((path, threading.current_thread().name))
        real_write(path, data, fsync)

    def setup(leader: Partition, _follower: Partition) -> None:
        write(leader, 0, "a", "b")
        write(leader, 1, "c")
        write(leader, 3, "d", "e")
        monkeypatch.setattr(leader_epoch_cache, "write_atomically", recording_write)

    async def check(leader: Partition, follower: Partition, _fake: FakeLeader) -> None:
        await converged(leader, follower)
        assert follower.log.leader_epoch_cache.epoch_entries == leader.log.leader_epoch_cache.epoch_entries
        loop_thread = threading.current_thread().name
        by_follower = [thread for path, thread in writes if os.sep + "follower" + os.sep in path]
        assert by_follower, "the follower wrote no epoch checkpoint"
        assert loop_thread not in by_follower, by_follower

    replicate(tmp_path, 3, setup, check)
