"""The controller's balancer (`strom.balancer.enable`, off by default): `strom rebalance --execute`, run by
the active controller every `strom.balancer.interval.ms` and soon after a broker joins.

A round runs as a controller event. It does nothing while any reassignment is in progress (its own
previous batch, or an operator's), so no partition is moved twice at once; once nothing moves it
removes the throttles it set, elects preferred leaders for the partitions it moved, then asks the
planner (strom.balancer) for a plan from the controller's own view plus DescribeLogDirs answers, and
starts at most `strom.balancer.max.partition.movements` reassignments of it, with Kafka's replication
throttles (`strom.balancer.throttle.bytes.per.sec`) written to ZooKeeper as dynamic configs, and recorded
(`/strom/balancer_throttles`) so that a new controller removes them if this one dies mid-batch.
See docs/decisions/0042-self-balancing.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DescribeLogDirsRequest

from strom.balancer import BalancerConstraints, BrokerInfo, PartitionInfo, Plan, Reassignment, plan_rebalance
from strom.balancer.model import fold_log_dirs
from strom.server_common.types import TopicPartition

if TYPE_CHECKING:
    from strom.controller.controller import KafkaController

log = logging.getLogger(__name__)

DESCRIBE_LOG_DIRS_VERSION = 4
LOG_DIRS_TIMEOUT_S = 30.0
# A joining broker registers before its first LeaderAndIsr settles; plan a little later.
JOIN_DELAY_S = 2.0
# Goals of the controller's balancer: the hard ones plus counts of replicas and leaders. Not disk-usage
# distribution: sizes change while producers write, so a plan that evens bytes now is undone by the next
# one, and partitions would move back and forth (the disk-capacity goal still moves partitions off a
# broker past its threshold).
GOALS = ("replica-distribution", "leader-distribution", "minimal-movement")
# A partition the balancer moved is left alone for this many intervals: plans made from slightly different
# numbers must not move it again and again.
COOLDOWN_INTERVALS = 10
# How often a new controller looks whether the moves its predecessor's throttles were for have ended.
STALE_THROTTLES_CHECK_S = 2.0
BROKER_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def batch_of(plan: Plan, limit: int) -> list[Reassignment]:
    """Leader-only changes (nothing to copy) plus the `limit` smallest data moves."""
    leader_only = [r for r in plan.reassignments if r.leader_only]
    moving = sorted((r for r in plan.reassignments if not r.leader_only),
                    key=lambda r: (r.bytes_to_move, r.topic, r.partition))
    return leader_only + moving[:limit]


def throttle_configs(batch: Iterable[Reassignment]) -> tuple[set[int], dict[str, dict[str, str]]]:
    """Brokers to rate-limit, and per topic Kafka's throttled-replica lists: current replicas send
    (leader side), the replicas being added receive (follower side)."""
    brokers: set[int] = set()
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for r in batch:
        if r.leader_only:
            continue
        brokers.update(r.current_replicas)
        brokers.update(r.target_replicas)
        leaders.setdefault(r.topic, []).extend(f"{r.partition}:{b}" for b in r.current_replicas)
        followers.setdefault(r.topic, []).extend(f"{r.partition}:{b}" for b in r.adding)
    return brokers, {t: {TOPIC_REPLICAS[0]: ",".join(leaders[t]), TOPIC_REPLICAS[1]: ",".join(followers[t])}
                     for t in leaders}


class AutoBalancer:
    def __init__(self, controller: KafkaController) -> None:
        self.controller = controller
        self._task: asyncio.Task[None] | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._moved: set[TopicPartition] = set()
        self._cooling: dict[TopicPartition, float] = {}  # partition -> when it may move again (loop time)

    @property
    def enabled(self) -> bool:
        return bool(self.controller.config.get("strom.balancer.enable"))

    def start(self) -> None:
        """At failover: the loop runs for this term as controller. Enabled or not, throttles a previous
        controller's balancer left (it died mid-batch) are removed once no move needs them."""
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_loop(), name="balancer-throttles")
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="auto-balancer")

    def stop(self) -> None:
        for task in (self._task, self._reaper):
            if task is not None:
                task.cancel()
        self._task = self._reaper = None

    def broker_joined(self) -> None:
        """A new broker gets its share without waiting for the next interval."""
        self._wake.set()

    async def _loop(self) -> None:
        interval = self.controller.config.get("strom.balancer.interval.ms") / 1000
        while self.controller.active:
            try:
                await asyncio.wait_for(self._wake.wait(), interval)
                await asyncio.sleep(JOIN_DELAY_S)
            except TimeoutError:
                pass
            self._wake.clear()
            if self.controller.active:
                self.controller._enqueue("auto-balance", self.run_round)

    async def _reap_loop(self) -> None:
        while self.controller.active:
            try:
                left = await self.controller._run_as_event("balancer-stale-throttles", self.clear_stale_throttles)
            except Exception as exc:  # ZooKeeper unreachable, or no longer controller: look again later
                log.warning("auto-balancer: could not check for stale replication throttles: %s", exc)
                left = True
            if not left:
                return
            await asyncio.sleep(STALE_THROTTLES_CHECK_S)

    async def clear_stale_throttles(self) -> bool:
        """A controller event: remove the recorded balancer throttles of topics no longer moving, and the
        brokers' rates once none of them moves; returns whether some are still needed."""
        controller = self.controller
        if not controller.active:
            return False
        zk = controller.zk
        brokers, topics = await controller._zk(zk.get_balancer_throttles)
        if not brokers and not topics:
            return False
        moving = {t for t in topics if controller.reassignments.moving(t)}
        existing = {t for t, _ in controller.ctx.partitions}
        for topic in sorted(topics - moving):
            if topic in existing:
                await self._merge_configs(zk.get_topic_configs, zk.set_topic_configs, topic, {}, TOPIC_REPLICAS)
        if not moving:
            for broker_id in sorted(brokers):
                await self._merge_configs(zk.get_broker_configs, zk.set_broker_configs, broker_id, {}, BROKER_RATES)
            brokers = set()
        await controller._zk(zk.set_balancer_throttles, brokers, moving)
        log.info("auto-balancer: removed the replication throttles a previous batch left%s",
                 f"; kept those of {len(moving)} topics still moving" if moving else "")
        return bool(moving)

    async def run_round(self) -> None:
        """One round (a controller event): finish the previous batch, or plan and start the next one."""
        controller = self.controller
        if not controller.active or controller.reassignments.in_progress(None):
            return
        await self._clear_throttles()
        if self._moved:
            moved, self._moved = sorted(self._moved), set()
            await controller.elect_preferred_leaders(moved)
        brokers, partitions = await self._read_cluster()
        if not brokers:
            return
        disk_threshold = controller.config.get("strom.balancer.disk.threshold.percent") / 100
        constraints = BalancerConstraints(goals=GOALS, disk_threshold=disk_threshold)
        plan = await asyncio.get_running_loop().run_in_executor(None, plan_rebalance, brokers, partitions,
                                                                 constraints)
        batch = batch_of(plan, controller.config.get("strom.balancer.max.partition.movements"))
        if not batch:
            return
        throttle = controller.config.get("strom.balancer.throttle.bytes.per.sec")
        if throttle >= 0:
            await self._set_throttles(batch, throttle)
        results = await controller.reassignments.alter({(r.topic, r.partition): list(r.target_replicas)
                                                        for r in batch})
        started = [tp for tp, (code, _) in results.items() if not code]
        self._moved.update(started)
        loop = asyncio.get_running_loop()
        until = loop.time() + COOLDOWN_INTERVALS * controller.config.get("strom.balancer.interval.ms") / 1000
        self._cooling.update(dict.fromkeys(started, until))
        log.info("auto-balancer: started %d of %d planned reassignments (%d bytes to move in this batch)",
                 len(started), len(plan.reassignments), sum(r.bytes_to_move for r in batch))
        if not controller.reassignments.in_progress(started):  # leader-only changes complete at once
            self.broker_joined()

    async def _read_cluster(self) -> tuple[list[BrokerInfo], list[PartitionInfo]]:
        ctx = self.controller.ctx
        live = sorted(b for b in ctx.live_brokers if ctx.is_live(b))
        answers = await self._describe_log_dirs(live)
        sizes: dict[TopicPartition, int] = {}
        brokers = []
        for broker_id in live:
            response = answers.get(broker_id)
            total, dir_offline = fold_log_dirs(getattr(response, "results", []), sizes)
            # A dir reported offline, or no answer: not a safe destination this round.
            offline = dir_offline or response is None or bool(ctx.offline_replicas.get(broker_id))
            brokers.append(BrokerInfo(broker_id, ctx.live_brokers[broker_id].rack, total or None, offline))
        now = asyncio.get_running_loop().time()
        self._cooling = {tp: until for tp, until in self._cooling.items() if until > now}
        # Moving, being deleted or moved lately: the planner leaves it alone.
        partitions = [PartitionInfo(tp[0], tp[1], tuple(pl.replicas), pl.leader, sizes.get(tp, 0), tuple(pl.isr),
                                    reassigning=bool(pl.adding or pl.removing) or tp[0] in ctx.deleting
                                    or tp in self._cooling)
                      for tp, pl in sorted(ctx.partitions.items()) if pl.replicas]
        return brokers, partitions

    async def _describe_log_dirs(self, brokers: list[int]) -> dict[int, Any]:
        channel = self.controller.channel
        if channel is None:
            return {}
        loop = asyncio.get_running_loop()
        futures: dict[int, asyncio.Future[Any]] = {}
        def answer(future: asyncio.Future[Any]) -> Callable[[Any], None]:
            def on_response(response: Any) -> None:
                if not future.done():
                    future.set_result(response)
            return on_response

        for broker_id in brokers:
            futures[broker_id] = loop.create_future()
            channel.send(broker_id, DescribeLogDirsRequest(topics=None), DESCRIBE_LOG_DIRS_VERSION,
                         answer(futures[broker_id]))
        done, _ = await asyncio.wait(futures.values(), timeout=LOG_DIRS_TIMEOUT_S)
        return {b: f.result() for b, f in futures.items() if f in done}

    # -- throttles (dynamic configs in ZooKeeper, as kafka-reassign-partitions writes them) ----------------
    async def _set_throttles(self, batch: list[Reassignment], rate: int) -> None:
        brokers, topics = throttle_configs(batch)
        zk = self.controller.zk
        # Recorded first: whoever is controller after a crash from here on knows to remove them.
        marked_brokers, marked_topics = await self.controller._zk(zk.get_balancer_throttles)
        await self.controller._zk(zk.set_balancer_throttles, marked_brokers | brokers, marked_topics | set(topics))
        for broker_id in sorted(brokers):
            await self._merge_configs(zk.get_broker_configs, zk.set_broker_configs, broker_id,
                                      dict.fromkeys(BROKER_RATES, str(rate)))
        for topic, configs in sorted(topics.items()):
            await self._merge_configs(zk.get_topic_configs, zk.set_topic_configs, topic, configs)

    async def _clear_throttles(self) -> None:
        """Nothing moves: remove every throttle a balancer set (this controller's or a predecessor's): all
        are recorded in ZooKeeper before they are written (``_set_throttles``)."""
        zk = self.controller.zk
        marked_brokers, marked_topics = await self.controller._zk(zk.get_balancer_throttles)
        for broker_id in sorted(marked_brokers):
            await self._merge_configs(zk.get_broker_configs, zk.set_broker_configs, broker_id, {}, BROKER_RATES)
        existing = {t for t, _ in self.controller.ctx.partitions}
        for topic in sorted(marked_topics & existing):
            await self._merge_configs(zk.get_topic_configs, zk.set_topic_configs, topic, {}, TOPIC_REPLICAS)
        if marked_brokers or marked_topics:
            await self.controller._zk(zk.set_balancer_throttles, set(), set())

    async def _merge_configs(self, get: Any, put: Any, name: Any, updates: dict[str, str],
                             remove: Iterable[str] = ()) -> None:
        """Read, change and write one entity's dynamic configs (on the controller's ZooKeeper thread)."""
        current = dict(await self.controller._zk(get, name))
        wanted = {k: v for k, v in current.items() if k not in set(remove)} | updates
        if wanted != current:
            await self.controller._zk(put, name, wanted)
