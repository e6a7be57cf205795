"""The broker's ZooKeeper watches are armed off the event loop: kazoo's watch constructors read
ZooKeeper synchronously (with retries), so a frozen ZooKeeper would freeze the whole broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from strom.metadata.zk_metadata import ZkMetadataStore
from strom.server_common.stall_detector import LoopStallDetector

FROZEN_S = 0.6  # how long each ZooKeeper read takes (a SIGSTOPped server answers after its SIGCONT)


class FrozenZooKeeper:
    """Stands in for KafkaZkClient against a ZooKeeper that answers late (reads block the caller)."""

    def get_config_changes(self) -> list[str]:
        time.sleep(FROZEN_S)
        return ["config_change_0000000001"]

    def watch_children(self, path: str, callback: Callable[[list[str]], object]) -> None:
        time.sleep(FROZEN_S)  # ChildrenWatch's constructor: a synchronous get_children, then the first delivery
        callback(["config_change_0000000001"])

    def get_topic_configs(self, name: str) -> dict[str, str]:
        return {}


def test_config_change_watch_is_armed_without_blocking_the_loop() -> None:
    async def main() -> tuple[int, int]:
        detector = LoopStallDetector(threshold_ms=200)
        detector.start()
        store = ZkMetadataStore(FrozenZooKeeper(), 1, "cluster")  # type: ignore[arg-type]
        reloads: list[float] = []
        store.on_config_change = lambda: reloads.append(time.monotonic())
        store.start_watches()
        deadline = time.monotonic() + 10
        while not reloads and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        detector.stop()
        return detector.stats.blocked_stalls, len(reloads)

    blocked, reloads = asyncio.run(main())
    assert blocked == 0, "arming the watch blocked the event loop"
    # The watch's first delivery re-reads the dynamic configs (a change made before it was armed counts).
    assert reloads == 1
