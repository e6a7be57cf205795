"""Replication quotas (KIP-73): a byte rate per broker that caps how fast throttled replicas catch up,
so moving a partition (a reassignment, a broker back from a long absence) leaves bandwidth to clients.

Two rates, both dynamic broker configs: ``leader.replication.throttled.rate`` bounds what this broker
as leader sends for its leader-throttled replicas, ``follower.replication.throttled.rate`` what it
fetches for its follower-throttled ones. Which replicas are throttled is a topic config,
``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``: the literal
``*`` or ``partition:broker`` entries, each read by the broker it names.

As in Kafka's ReplicationQuotaManager: the bytes of every throttled partition count against the rate,
but a partition is only held back while the rate is over its bound AND the replica concerned is out of
the ISR. A caught-up follower is never slowed down, so a throttle can never push it out of the ISR;
unthrottled partitions are never held back.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable

from strom.broker.quota.rate import Rate
from strom.config import BrokerConfig

LEADER_REPLICATION = "LeaderReplication"  # Kafka's metric groups: kafka.server:type=<this>,name=byte-rate
FOLLOWER_REPLICATION = "FollowerReplication"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
UNLIMITED = 2**63 - 1

ALL_PARTITIONS: frozenset[int] | None = None  # "*": every partition of the topic


@functools.lru_cache(maxsize=4096)
def throttled_partitions(entries: tuple[str, ...], broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas list names on ``broker_id``; None (ALL_PARTITIONS) for "*".

    Entries were validated when the config was set; one that does not parse (written into ZooKeeper by
    hand) is skipped rather than failing every fetch."""
    if entries == ("*",):
        return ALL_PARTITIONS
    out: set[int] = set()
    for entry in entries:
        partition, _, broker = entry.partition(":")
        try:
            if int(broker) == broker_id:
                out.add(int(partition))
        except ValueError:
            continue
    return frozenset(out)


def now_ms() -> float:
    return time.monotonic() * 1000.0


class ReplicationQuotaManager:
    """One side's rate (leader or follower) and whether a partition's replica is throttled here."""

    def __init__(self, replication_type: str, broker_id: int, samples: int, window_seconds: int,
                 bytes_per_second: int = UNLIMITED) -> None:
        self.replication_type = replication_type
        self.broker_id = broker_id
        self._rate = Rate(samples, window_seconds * 1000)
        self.bound: float | None = None
        self.update_quota(bytes_per_second)
        # Metrics: bytes counted against the rate, partition fetches held back, time spent over the bound.
        self.throttled_bytes_total = 0
        self.held_back_total = 0
        self.throttle_time_ms_total = 0.0
        self._exceeded_since: float | None = None

    def update_quota(self, bytes_per_second: int) -> None:
        """A new bound (the dynamic config changed); the recorded rate carries on."""
        self.bound = None if bytes_per_second >= UNLIMITED else float(bytes_per_second)

    def is_throttled(self, entries: tuple[str, ...], partition: int) -> bool:
        """Whether the topic's throttled-replicas list (the config this side reads) names this broker's
        replica of ``partition``."""
        if not entries:
            return False
        partitions = throttled_partitions(entries, self.broker_id)
        return partitions is None or partition in partitions

    def is_quota_exceeded(self) -> bool:
        """The rate over the window is above the bound (never with no bound)."""
        now = now_ms()
        exceeded = self.bound is not None and self._rate.measure(now) > self.bound
        since = self._exceeded_since
        if exceeded and since is None:
            self._exceeded_since = now
        elif not exceeded and since is not None:
            self.throttle_time_ms_total += now - since
            self._exceeded_since = None
        return exceeded

    def record(self, value: int) -> None:
        """Bytes of throttled partitions just sent (leader) or fetched (follower)."""
        if value > 0:
            self._rate.record(value, now_ms())
            self.throttled_bytes_total += value

    def held_back(self, partitions: int = 1) -> None:
        self.held_back_total += partitions

    def byte_rate(self) -> float:
        """Throttled bytes per second over the window (Kafka's ``byte-rate`` metric)."""
        return self._rate.measure(now_ms())

    def throttle_time_ms(self) -> float:
        """Time spent over the bound so far, including a stretch still going on."""
        since = self._exceeded_since
        return self.throttle_time_ms_total + (now_ms() - since if since is not None else 0.0)


class ReplicationQuotas:
    """The leader and follower managers (Kafka's QuotaFactory), kept current from the dynamic rates."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        broker_id = config.get("broker.id")
        samples = config.get("replication.quota.window.num")
        window = config.get("replication.quota.window.size.seconds")
        self.leader = ReplicationQuotaManager(LEADER_REPLICATION, broker_id, samples, window, config.get(LEADER_RATE))
        self.follower = ReplicationQuotaManager(FOLLOWER_REPLICATION, broker_id, samples, window,
                                                config.get(FOLLOWER_RATE))

    def reconfigure(self, changed: Iterable[str]) -> None:
        """A dynamic broker config changed (Kafka's Reconfigurable): pick up new rates at once."""
        keys = set(changed)
        if LEADER_RATE in keys:
            self.leader.update_quota(self.config.get(LEADER_RATE))
        if FOLLOWER_RATE in keys:
            self.follower.update_quota(self.config.get(FOLLOWER_RATE))

    def managers(self) -> tuple[ReplicationQuotaManager, ReplicationQuotaManager]:
        return self.leader, self.follower
