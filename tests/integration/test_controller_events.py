"""What may hold the controller's event queue: a real KafkaController against a real ZooKeeper.

A DeleteTopics is carried out by the controller's next events; nothing else the broker does may make
those (or the admin request's own ZooKeeper write) wait. Two causes were found: the controller's ZooKeeper calls queued on the event loop's
default executor behind storage and coordinator work, and every topic creation re-read the assignment
and partition states of every topic in the cluster.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import pytest

from strom.config import BrokerConfig
from strom.controller.controller import KafkaController
from strom.metadata.zk import KafkaZkClient
from strom.metadata.zk.zookeeper_server import ZooKeeperServer
from strom.metadata.zk_metadata import ZkMetadataStore

pytestmark = pytest.mark.zookeeper

WAIT = 30.0  # upper bound for the controller to act; never a timing assertion
BROKER_ID = 1


@asynccontextmanager
async def running_controller(zookeeper: ZooKeeperServer) -> AsyncIterator[tuple[KafkaController, KafkaZkClient]]:
    """Broker 1 registered (at an address nobody listens on: requests to it are retried in the background)
    and its controller elected; the test talks to ZooKeeper through a second session, as an admin would."""
    chroot = f"/strom-test-{uuid.uuid4().hex[:12]}"
    broker_zk = KafkaZkClient(zookeeper.connect_string + chroot, session_timeout_ms=6000).start()
    admin_zk = KafkaZkClient(zookeeper.connect_string + chroot, session_timeout_ms=6000).start()
    broker_zk.register_broker(BROKER_ID, ["PLAINTEXT://127.0.0.1:1"])
    controller = KafkaController(BROKER_ID, BrokerConfig({"broker.id": str(BROKER_ID)}), broker_zk, lambda _t: False)
    controller.startup()
    try:
        await wait_until(lambda: controller.active, "controller elected")
        yield controller, admin_zk
    finally:
        await controller.shutdown()
        admin_zk.close()
        broker_zk.close()


async def wait_until(predicate: Callable[[], Any], what: str) -> None:
    """Polls on the loop itself (the default executor may be the thing a test keeps busy)."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.05)


def led(zk: KafkaZkClient, topic: str, partitions: int) -> bool:
    return all((s := zk.get_partition_state(topic, p)) is not None and s[0].leader == BROKER_ID
               for p in range(partitions))


def test_a_busy_default_executor_does_not_hold_the_controller(zookeeper: ZooKeeperServer) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
        async with running_controller(zookeeper) as (_controller, zk):
            zk.create_topic("before", uuid.uuid4(), {0: [BROKER_ID]}, {})
            await wait_until(lambda: led(zk, "before", 1), "leader of the first topic")
            # Long storage work (a compaction, a flush, a coordinator load) takes every default worker.
            release = threading.Event()
            busy = [loop.run_in_executor(None, release.wait, WAIT * 3) for _ in range(2)]
            try:
                zk.mark_topic_for_deletion("before")
                zk.create_topic("during", uuid.uuid4(), {0: [BROKER_ID]}, {})
                await wait_until(lambda: not zk.topic_exists("before"), "deletion carried out")
                await wait_until(lambda: led(zk, "during", 1), "leader of a topic created meanwhile")
            finally:
                release.set()
                await asyncio.gather(*busy)

    asyncio.run(scenario())


def test_a_new_topic_makes_the_controller_read_that_topic_only(zookeeper: ZooKeeperServer) -> None:
    async def scenario() -> None:
        async with running_controller(zookeeper) as (controller, zk):
            existing = [f"t{i}" for i in range(30)]
            for name in existing:
                zk.create_topic(name, uuid.uuid4(), {0: [BROKER_ID], 1: [BROKER_ID]}, {})
            await wait_until(lambda: all(led(zk, n, 2) for n in existing), "leaders of existing topics")
            await asyncio.sleep(0.5)  # let the watches armed for those topics report

            read: list[str] = []
            read_states: list[str] = []
            assignment, states = controller.zk.get_topic_assignment, controller.zk.get_partition_states
            controller.zk.get_topic_assignment = lambda t: (read.append(t), assignment(t))[1]  # type: ignore[method-assign]
            controller.zk.get_partition_states = lambda t: (read_states.append(t), states(t))[1]  # type: ignore[method-assign]
            zk.create_topic("new", uuid.uuid4(), {0: [BROKER_ID], 1: [BROKER_ID]}, {})
            await wait_until(lambda: led(zk, "new", 2), "leaders of the new topic")
            zk.mark_topic_for_deletion("t0")
            await wait_until(lambda: not zk.topic_exists("t0"), "deletion carried out")
            await asyncio.sleep(0.5)
            # The new topic, and the deleted one (its own watch fires): not the 29 others.
            assert set(read) <= {"new", "t0"} and "new" in read, sorted(set(read))
            assert set(read_states) <= {"new"}, sorted(set(read_states))

    asyncio.run(scenario())


def test_a_busy_default_executor_does_not_hold_admin_requests(zookeeper: ZooKeeperServer) -> None:
    """The broker side of the same: CreateTopics, DeleteTopics and CreatePartitions write ZooKeeper through
    the metadata store, which must not queue behind storage work on the default executor either."""
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        zk = KafkaZkClient(f"{zookeeper.connect_string}/strom-test-{uuid.uuid4().hex[:12]}",
                           session_timeout_ms=6000).start()
        store = ZkMetadataStore(zk, BROKER_ID, "cluster")
        release = threading.Event()
        busy = loop.run_in_executor(None, release.wait, WAIT * 3)
        try:
            await asyncio.wait_for(store.create_topic_async("t", {0: [BROKER_ID]}, {}), WAIT)
            topic = await asyncio.wait_for(store.read_topic_async("t"), WAIT)
            assert topic is not None and list(topic.partitions) == [0]
            await asyncio.wait_for(store.add_partitions_async("t", {1: [BROKER_ID]}), WAIT)
            await asyncio.wait_for(store.delete_topic_async("t"), WAIT)
            assert zk.get_topic_deletions() == ["t"]
        finally:
            release.set()
            await busy
            store.close()

    asyncio.run(scenario())
