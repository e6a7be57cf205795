"""ACLs in ZooKeeper through two metadata stores (two brokers' views of one cluster), against a real server:
changes reach the other store through the notifications, concurrent writers to one resource both win (the
write is a compare-and-set on the znode version), and old notifications are purged."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strom.metadata import zk_metadata
from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.kafka_zk_client import KafkaZkClient
from strom.metadata.zk.zookeeper_server import ZooKeeperServer
from strom.metadata.zk_metadata import ZkMetadataStore
from strom.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
)
from strom.security.acl import ResourceType as Res

pytestmark = pytest.mark.zookeeper

PATTERN = ResourcePattern(Res.TOPIC, "orders-", PatternType.PREFIXED)


def entry(user: str) -> AccessControlEntry:
    return AccessControlEntry(f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW)


async def until(predicate, what: str, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_two_brokers_share_acls(zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    connect = f"{zookeeper.connect_string}/acl-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        clients = [KafkaZkClient(connect, session_timeout_ms=6000) for _ in range(2)]
        for c in clients:
            await loop.run_in_executor(None, c.start)
        a, b = (ZkMetadataStore(c, i, "cluster") for i, c in enumerate(clients))
        seen: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        try:
            await loop.run_in_executor(None, a.watch_acls, lambda p, e: None)
            await loop.run_in_executor(None, b.watch_acls, lambda p, e: seen.__setitem__(p, e))
            await a.update_acls_async(PATTERN, lambda cur: cur | {entry("alice")})
            await until(lambda: seen.get(PATTERN) == {entry("alice")}, "broker b to see alice's ACL")

            # Two writers at once on the same znode: neither loses the other's entry.
            await asyncio.gather(*(s.update_acls_async(PATTERN, lambda cur, u=u: cur | {entry(u)})
                                   for s, u in ((a, "bob"), (b, "carol"))))
            assert clients[0].get_acls(PATTERN) == {entry("alice"), entry("bob"), entry("carol")}
            await until(lambda: seen.get(PATTERN) == {entry("alice"), entry("bob"), entry("carol")},
                        "broker b to see every entry")
            assert await loop.run_in_executor(None, b.load_acls) == {PATTERN: seen[PATTERN]}

            # Every notification older than the expiration goes once a later one is processed.
            before = clients[0].get_children(zd.EXTENDED_ACL_CHANGES_PATH)
            assert len(before) == 3
            monkeypatch.setattr(zk_metadata, "ACL_CHANGE_EXPIRATION_MS", -1)
            await a.update_acls_async(PATTERN, lambda cur: frozenset())  # removes the znode, notifies
            await until(lambda: PATTERN not in seen or not seen[PATTERN], "broker b to see the removal")
            await until(lambda: not set(before) & set(clients[0].get_children(zd.EXTENDED_ACL_CHANGES_PATH)),
                        "old notifications to be purged")
            assert clients[0].get_data(zd.acl_path(PATTERN)) is None
        finally:
            for c in clients:
                c.close()

    asyncio.run(scenario())
