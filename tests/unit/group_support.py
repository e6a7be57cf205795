"""Test doubles for the group coordinator: real storage Logs behind a tiny replica manager."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, TypeVar

from tests.unit.fake_clock import ManualClock

from strom.broker.partition import Partition
from strom.coordinator.clock import SYSTEM_CLOCK
from strom.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from strom.coordinator.group.group_metadata_manager import GROUP_METADATA_TOPIC_NAME, GroupMetadataManager
from strom.metadata.store import PartitionState
from strom.server_common.purgatory import TimerDriver
from strom.server_common.timing_wheel import Timer
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.validator import AppendOrigin

T = TypeVar("T")
TOPIC_ID = uuid.uuid4()


class LogBackedReplicaManager:
    """Just what GroupMetadataManager uses of the ReplicaManager, over real Logs on disk."""

    def __init__(self, directory: str, props: dict[str, str] | None = None) -> None:
        self.directory = directory
        self.config = LogConfig.from_props({"cleanup.policy": "compact", **(props or {})})
        self.logs: dict[int, Log] = {}
        self.appends = 0

    def log(self, partition: int) -> Log:
        if partition not in self.logs:
            path = os.path.join(self.directory, f"{GROUP_METADATA_TOPIC_NAME}-{partition}")
            os.makedirs(path, exist_ok=True)
            self.logs[partition] = Log(path, self.config)
        return self.logs[partition]

    def append_records(self, entries: dict[tuple[str, int], bytes], acks: int,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        results = {}
        for (topic, partition), records in entries.items():
            assert topic == GROUP_METADATA_TOPIC_NAME
            plog = self.log(partition)
            info = plog.append_as_leader(records, 0, origin=origin)
            plog.update_high_watermark(plog.log_end_offset)
            self.appends += 1
            results[(topic, partition)] = SimpleNamespace(error_code=0, error_message=None,
                                                          base_offset=info.first_offset)
        return results, None

    def get_partition(self, topic: str, partition: int) -> Partition:
        """A real Partition led here (broker 0) over the partition's Log, as the ReplicaManager hands out."""
        state = PartitionState(partition, leader=0, leader_epoch=0, replicas=[0], isr=[0])
        return Partition(topic, partition, TOPIC_ID, state, self.log(partition), local_broker_id=0)

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()
        self.logs.clear()


class Harness:
    """A GroupCoordinator on the running loop, owning every offsets partition."""

    def __init__(self, directory: str, num_partitions: int = 4, config: GroupConfig | None = None,
                 retention_ms: int = 7 * 24 * 3600 * 1000, log_props: dict[str, str] | None = None,
                 clock: ManualClock | None = None) -> None:
        """With a ``clock``, time moves only when the test advances it (no timer driver runs)."""
        self.replicas = LogBackedReplicaManager(directory, log_props)
        self.driver: TimerDriver | None = None
        if clock is None:
            self.timer = Timer(tick_ms=1, wheel_size=20)
            self.driver = TimerDriver(self.timer, asyncio.get_running_loop())
            self.driver.start()
        else:
            self.timer = clock.timer()
        self.manager = GroupMetadataManager(0, self.replicas, num_partitions=num_partitions,
                                            retention_ms=retention_ms, clock=clock or SYSTEM_CLOCK)
        self.coordinator = GroupCoordinator(
            0, self.manager,
            config or GroupConfig(min_session_timeout_ms=10, max_session_timeout_ms=60_000,
                                  initial_rebalance_delay_ms=0),
            self.timer)
        for p in range(num_partitions):
            self.coordinator.on_election(p)

    def close(self) -> None:
        self.coordinator.shutdown()
        if self.driver is not None:
            self.driver.stop()
        self.replicas.close()


def run(fn: Callable[[], Awaitable[T]], timeout: float = 20.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(fn(), timeout)

    return asyncio.run(bounded())
