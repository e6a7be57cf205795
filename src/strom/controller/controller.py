"""KafkaController: the one broker that decides leaders and ISRs, elected through ZooKeeper.

Every broker runs one; the broker holding the ephemeral ``/controller`` znode is active. Its
work is a single queue of events handled one at a time (Kafka's ControllerEventManager), so
the controller's view of the cluster (``ControllerContext``) is never changed concurrently:
ZooKeeper watches (kazoo's thread) and requests from brokers (AlterPartition,
ControlledShutdown) only enqueue events.

Every partition-state write is a conditional set on the znode version inside a multi-op that
also checks ``/controller_epoch``'s version, so a controller that lost its seat (SIGSTOP, a
partition from ZooKeeper) cannot overwrite its successor's decisions; every request it sends
carries its epoch, and brokers refuse older epochs.

A controller is a controller only while the ZooKeeper session that won the election lives: on
losing it (Kafka's ``onControllerResignation`` on session expiry) the controller drops its queued
events and resigns before it does anything else, so an expired controller never reads "every
broker left" from a new session and rewrites ISRs on that picture.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kafka.errors as Errors

from strom.config import BrokerConfig
from strom.controller.auto_balancer import AutoBalancer
from strom.controller.broker_requests import BrokerRequests
from strom.controller.controller_channel import ControllerChannelManager
from strom.controller.controller_zk import ControllerZk
from strom.controller.pacing import paced
from strom.controller.reassignment_manager import PartitionResult, ReassignmentManager
from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.errors import BadVersionError, ControllerMovedError, KafkaZkError, ZNodeNotFoundError
from strom.metadata.zk.kafka_zk_client import SessionState
from strom.security.client_security import ClientSecurity
from strom.server_common.types import TopicPartition

log = logging.getLogger(__name__)

NO_LEADER = -1
# Partition states per ZooKeeper multi-op: one round trip per batch instead of per partition, and far
# below ZooKeeper's 1 MB request limit (jute.maxbuffer) at ~150 bytes of path and state per partition.
ZK_STATE_BATCH = 500

T = TypeVar("T")
# A new leader, ISR and whether the election is unclean; None: the partition needs no change.
Decision = tuple[int, list[int], bool]
Decide = Callable[[TopicPartition, "PartitionLeadership"], Awaitable[Decision | None]]
@dataclass(slots=True)
class PartitionLeadership:
    """A partition as the controller knows it: assignment plus the state znode (and its version)."""

    replicas: list[int]
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = 0
    zk_version: int = -1  # -1: no state znode yet (new partition)
    # While the partition is being reassigned (KIP-455): replicas joining and leaving the replica set.
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)


@dataclass(slots=True)
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, zd.BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionLeadership] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    # Replicas a live broker reported in an offline log dir (KIP-112); forgotten when it restarts.
    offline_replicas: dict[int, set[TopicPartition]] = field(default_factory=dict)

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.partitions if tp[0] == topic)

    def is_live(self, broker_id: int) -> bool:
        return broker_id in self.live_brokers and broker_id not in self.shutting_down


class ControllerMoved(Exception):
    """Another broker is controller now: stop acting."""


@dataclass(slots=True)
class ControllerEvent:
    """One unit of the controller's work; ``reply`` is failed if the event is dropped unrun."""

    name: str
    run: Callable[[], Awaitable[Any]]
    reply: asyncio.Future[Any] | None = None

    def drop(self, broker_id: int) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_exception(Errors.NotControllerError(f"broker {broker_id} is no longer the controller"))


class KafkaController:
    def __init__(self, broker_id: int, config: BrokerConfig, zk: ControllerZk,
                 unclean_election_enabled: Callable[[str], bool], security: ClientSecurity | None = None,
                 channel_factory: Callable[..., ControllerChannelManager] = ControllerChannelManager) -> None:
        self.broker_id = broker_id
        # How requests reach brokers: (controller id, timeout ms, security) -> channel; tests record them.
        self._channel_factory = channel_factory
        self.security = security  # how the controller reaches brokers (the inter-broker listener)
        self.config = config
        self.zk = zk
        self._unclean_enabled = unclean_election_enabled
        self.ctx = ControllerContext()
        self.active = False
        self.channel: ControllerChannelManager | None = None
        self._requests: BrokerRequests | None = None  # this term's requests to brokers (context + channel)
        self._events: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        # The controller's own ZooKeeper thread (Kafka's controller calls ZooKeeper from its event thread):
        # the loop's default executor also runs the cleaner, retention, flushes and coordinator loads.
        self._zk_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"controller-{broker_id}-zk")
        self._task: asyncio.Task[None] | None = None
        # Watches of one term as controller check this and stop once it moved on (kazoo: return False).
        self._term = 0
        self._watched_topics: set[str] = set()
        self._rebalance_task: asyncio.Task[None] | None = None
        # The ZooKeeper session that won the election: a controller acts only while it lives.
        self._elected_session: int | None = None
        # After a lost session: not a candidate until this broker is registered in the new one.
        self._awaiting_registration = False
        self.reassignments = ReassignmentManager(self, ZK_STATE_BATCH)
        self.auto_balancer = AutoBalancer(self)  # strom.balancer.enable, off by default

    # -- lifecycle -----------------------------------------------------------------------------------
    def startup(self) -> None:
        self._task = self._loop.create_task(self._process_events(), name="controller-events")
        self.zk.add_state_listener(self._on_session_state)
        # kazoo's watch constructors read the znode at once (retried while ZooKeeper is away): on the
        # controller's ZooKeeper thread, never on the loop.
        watch = self._loop.run_in_executor(self._zk_executor, self.zk.watch_data, zd.CONTROLLER_PATH,
                                           self._on_controller_znode)
        watch.add_done_callback(self._watch_started)

    @staticmethod
    def _watch_started(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.error("controller: cannot watch %s: %s", zd.CONTROLLER_PATH, future.exception())

    def _on_session_state(self, state: SessionState) -> None:
        """kazoo's thread: a lost session ends this term as controller before anything else runs."""
        if state is SessionState.LOST:
            # Set here, before kazoo opens the new session: no election until this broker is registered
            # again in it (the new session could otherwise win /controller, see no broker at all, and
            # take every partition offline).
            self._awaiting_registration = True
            self._loop.call_soon_threadsafe(self._on_session_lost)

    def broker_registered(self) -> None:
        """Loop: this broker is registered again after a lost session; stand for election now, as
        Kafka's RegisterBrokerAndReElect does (the ``/controller`` watch may have fired meanwhile)."""
        if self._awaiting_registration:
            self._awaiting_registration = False
            self._enqueue("elect", self._elect)

    def _on_session_lost(self) -> None:
        """Drop every queued event (they were decided on the dead session's picture) and resign;
        it stands for election again once this broker is registered in a new session."""
        if not self.active:
            return
        dropped = self._events.qsize()
        while not self._events.empty():
            self._events.get_nowait().drop(self.broker_id)
        log.warning("controller %d lost its ZooKeeper session: resigning (%d queued events dropped)",
                    self.broker_id, dropped)
        self._events.put_nowait(ControllerEvent("resign", self._resign))

    def _session_current(self) -> bool:
        """Whether the session that elected this controller still lives (cheap: no round trip)."""
        return self._elected_session is not None and self.zk.session_id == self._elected_session

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._resign()
        self._zk_executor.shutdown(wait=False, cancel_futures=True)

    def _enqueue(self, name: str, handler: Callable[[], Awaitable[Any]]) -> None:
        """Thread-safe: ZooKeeper watches call this on kazoo's thread."""
        self._loop.call_soon_threadsafe(self._events.put_nowait, ControllerEvent(name, handler))

    def _term_watch(self, name: str, handler: Callable[[], Awaitable[Any]]) -> Callable[..., bool | None]:
        """A ZooKeeper watch callback (kazoo's thread) that enqueues handler while this term lasts."""
        term = self._term

        def fire(*_args: Any) -> bool | None:
            if term != self._term:
                return False  # a watch of an earlier term as controller: kazoo stops it
            self._enqueue(name, handler)
            return None

        return fire

    async def _process_events(self) -> None:
        while True:
            event = await self._events.get()
            name = event.name
            if event.reply is not None and not self.active:
                event.drop(self.broker_id)  # a request queued before this controller resigned: NOT_CONTROLLER
                continue
            try:
                if self.active and name not in ("resign", "elect") and not self._session_current():
                    event.drop(self.broker_id)
                    raise ControllerMoved(f"the ZooKeeper session that elected controller {self.broker_id} ended")
                await event.run()
            except asyncio.CancelledError:
                raise
            except (ControllerMoved, ControllerMovedError):
                log.warning("controller %d lost the controllership while handling %s", self.broker_id, name)
                await self._resign()
                self._enqueue("elect", self._elect)
            except KafkaZkError as exc:
                log.error("controller event %s failed on ZooKeeper: %s; re-electing", name, exc)
                await self._resign()
                self._enqueue("elect", self._elect)
            except Exception:
                log.exception("controller event %s failed", name)

    async def _zk(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """ZooKeeper round trips run off the event loop, on the controller's ZooKeeper thread."""
        return await self._loop.run_in_executor(self._zk_executor, lambda: fn(*args, **kwargs))

    # -- election ------------------------------------------------------------------------------------
    def _on_controller_znode(self, data: bytes | None, _stat: Any) -> None:
        if data is None:
            self._enqueue("elect", self._elect)
        else:
            try:
                holder = zd.decode_controller(data)
            except Exception:  # noqa: BLE001 - garbage in the znode: treat as someone else
                holder = -1
            if holder != self.broker_id and self.active:
                self._enqueue("resign", self._resign)

    async def _elect(self) -> None:
        if self.active or self._awaiting_registration:
            return
        try:
            epoch, version = await self._zk(self.zk.register_controller_and_increment_controller_epoch,
                                            self.broker_id)
        except ControllerMovedError:
            return  # someone else won; the /controller watch tells us when it goes
        except KafkaZkError as exc:
            log.info("controller election failed: %s", exc)
            return
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=version)
        self._elected_session = self.zk.session_id
        self.active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        await self._on_controller_failover()

    async def _resign(self) -> None:
        if not self.active:
            return
        self.active = False
        self._elected_session = None
        self._term += 1
        self._watched_topics.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        self.auto_balancer.stop()
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
            self._requests = None
        log.info("broker %d resigned as controller", self.broker_id)

    async def _on_controller_failover(self) -> None:
        """Load the cluster from ZooKeeper, bring every partition online, tell every broker."""
        self.channel = self._channel_factory(self.broker_id, self.config.get("controller.socket.timeout.ms"),
                                             self.security)
        self._requests = BrokerRequests(self.broker_id, self.ctx, self.channel, self._address,
                                        self._on_leader_and_isr_response)
        brokers = await self._zk(self.zk.get_all_brokers)
        for b in brokers.values():
            self._add_live_broker(b)
        for topic in await self._zk(self.zk.get_all_topics):
            await self._load_topic(topic)
        self.ctx.deleting = {t for t in await self._zk(self.zk.get_topic_deletions)
                             if not self.reassignments.moving(t)}  # a topic being moved waits (its moves go on)
        for path, name, handler in (
                (zd.BROKER_IDS_PATH, "brokers", self._on_broker_change),
                (zd.TOPICS_PATH, "topics", self._on_topic_change),
                (zd.DELETE_TOPICS_PATH, "deletions", self._on_topic_deletion),
                (zd.CONFIG_CHANGES_PATH, "config-change", self._on_config_change),
                (zd.LOG_DIR_EVENT_NOTIFICATION_PATH, "log-dir-event", self._on_log_dir_events)):
            await self._zk(self.zk.watch_children, path, self._term_watch(name, handler))  # reads at once
        await self._zk(self.zk.watch_data, zd.REASSIGN_PARTITIONS_PATH,  # fires at once too: the old tools' moves
                       self._term_watch("reassign-partitions", self.reassignments.on_zk_request))
        # Kafka's onBrokerFailure at failover: a replica whose broker is not registered is offline,
        # so it leaves every ISR now, not after the leaders' replica.lag.time.max.ms.
        hosted: set[int] = set()
        async for pl in paced(list(self.ctx.partitions.values())):
            hosted.update(pl.replicas, pl.isr)
        dead = hosted - set(self.ctx.live_brokers)
        if dead:
            log.info("controller: brokers %s are not registered; removing them from every ISR", sorted(dead))
            await self._on_brokers_failed(dead)
        await self._elect_offline_partitions(list(self.ctx.partitions))
        all_tps = list(self.ctx.partitions)
        await self.requests.update_metadata(list(self.ctx.live_brokers), all_tps)
        await self.requests.leader_and_isr(all_tps)
        await self.reassignments.resume()  # moves recorded in the topic znodes go on
        if self.config.get("auto.leader.rebalance.enable"):
            self._rebalance_task = self._loop.create_task(self._auto_rebalance_loop(), name="leader-rebalance")
        self.auto_balancer.start()

    def _add_live_broker(self, reg: zd.BrokerRegistration) -> None:
        self.ctx.live_brokers[reg.id] = reg
        self.ctx.offline_replicas.pop(reg.id, None)  # a (re)started broker reports its dirs afresh
        host, port = self._address(reg)
        assert self.channel is not None
        self.channel.add_broker(reg.id, host, port)

    @property
    def requests(self) -> BrokerRequests:
        """Requests to brokers, for the controller's current term (set up at failover)."""
        if self._requests is None:
            raise ControllerMoved(f"broker {self.broker_id} is not acting as controller")
        return self._requests

    def _address(self, reg: zd.BrokerRegistration) -> tuple[str, int]:
        listener = self.config.inter_broker_listener_name()
        return reg.endpoint(listener) or (reg.host or "127.0.0.1", reg.port)

    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment and states; returns partitions the controller had not known."""
        assignment = await self._zk(self.zk.get_topic_assignment, topic)
        if assignment is None:
            return []
        if assignment.topic_id is not None:
            self.ctx.topic_ids[topic] = assignment.topic_id
        added = any((topic, p) not in self.ctx.partitions for p in assignment.partitions)
        # Partition states are only needed for partitions the controller does not know yet.
        states = await self._zk(self.zk.get_partition_states, topic) if added else {}
        new: list[TopicPartition] = []
        async for p, replicas in paced(list(assignment.partitions.items())):
            tp = (topic, p)
            known = self.ctx.partitions.get(tp)
            if known is not None:
                known.replicas = list(replicas)
                known.adding = list(assignment.adding_replicas.get(p, ()))
                known.removing = list(assignment.removing_replicas.get(p, ()))
                continue
            pl = PartitionLeadership(list(replicas), adding=list(assignment.adding_replicas.get(p, ())),
                                     removing=list(assignment.removing_replicas.get(p, ())))
            if p in states:
                st, version = states[p]
                pl.leader, pl.leader_epoch, pl.isr = st.leader, st.leader_epoch, list(st.isr)
                pl.controller_epoch, pl.zk_version = st.controller_epoch, version
            self.ctx.partitions[tp] = pl
            new.append(tp)
        return new

    # -- leader election -----------------------------------------------------------------------------
    async def _choose_leader(self, tp: TopicPartition, pl: PartitionLeadership, exclude: Iterable[int] = ()
                             ) -> tuple[int, list[int], bool]:
        """(leader, isr, unclean): first live replica in assignment order that is in the ISR; with
        none, the first live replica if unclean election is enabled, else no leader.

        The unclean flag is read from ZooKeeper when needed (off the loop), not from a cache that a
        config change may not have reached yet."""
        excluded = set(exclude) | self._offline_replicas_of(tp)
        live = [b for b in pl.replicas if self.ctx.is_live(b) and b not in excluded]
        if pl.zk_version < 0:  # a new partition: every live replica starts in sync
            return (live[0] if live else NO_LEADER), (live or list(pl.isr) or list(pl.replicas[:1])), False
        in_isr = [b for b in live if b in pl.isr]
        if in_isr:
            return in_isr[0], [b for b in pl.isr if b in in_isr], False
        if live and bool(await self._zk(self._unclean_enabled, tp[0])):
            return live[0], [live[0]], True
        # Offline: keep the ISR (the last replicas known to be in sync) so one of them can come back.
        return NO_LEADER, list(pl.isr), False

    async def _write_state(self, tp: TopicPartition, pl: PartitionLeadership, leader: int, isr: list[int],
                           bump_epoch: bool = True) -> bool:
        """Write a new leader/ISR for tp, fenced; returns False if the znode moved under us (re-read)."""
        if not self._session_current():
            raise ControllerMoved(f"the ZooKeeper session that elected controller {self.broker_id} ended")
        epoch = pl.leader_epoch + 1 if bump_epoch else pl.leader_epoch
        state = zd.LeaderIsrAndControllerEpoch(leader, epoch, list(isr), self.ctx.epoch)
        try:
            if pl.zk_version < 0:
                versions = await self._zk(self.zk.create_partition_states, tp[0], {tp[1]: state},
                                          self.ctx.epoch_zk_version)
                new_version = versions[tp[1]]
            else:
                new_version = await self._zk(self.zk.update_partition_state, tp[0], tp[1], state, pl.zk_version,
                                             self.ctx.epoch_zk_version)
        except BadVersionError:
            got = await self._zk(self.zk.get_partition_state, *tp)
            if got is not None:
                st, version = got
                pl.leader, pl.leader_epoch, pl.isr = st.leader, st.leader_epoch, list(st.isr)
                pl.controller_epoch, pl.zk_version = st.controller_epoch, version
            return False
        except ZNodeNotFoundError:
            return False
        pl.leader, pl.leader_epoch, pl.isr = leader, epoch, list(isr)
        pl.controller_epoch, pl.zk_version = self.ctx.epoch, new_version
        return True

    async def _decide_and_write(self, tps: Iterable[TopicPartition], decide: Decide, attempts: int = 3
                                ) -> list[TopicPartition]:
        """Decide every partition's new leader and ISR, then record the decisions in fenced multi-ops of
        ZK_STATE_BATCH partitions (Kafka pipelines these writes; one round trip per partition made a
        failover of 1,000 partitions take seconds). ZooKeeper rolls a batch back whole when one state
        changed under it (a leader's AlterPartition won the race); that batch is then written a partition
        at a time, re-deciding from the state read back, `attempts` times at most. Returns what changed."""
        decided: list[tuple[TopicPartition, PartitionLeadership, Decision]] = []
        async for tp in paced(tps):
            pl = self.ctx.partitions.get(tp)
            if pl is None or tp[0] in self.ctx.deleting:
                continue
            decision = await decide(tp, pl)
            if decision is not None:
                decided.append((tp, pl, decision))
        changed: list[TopicPartition] = []
        for i in range(0, len(decided), ZK_STATE_BATCH):
            chunk = decided[i:i + ZK_STATE_BATCH]
            existing = [entry for entry in chunk if entry[1].zk_version >= 0]
            one_by_one = [entry for entry in chunk if entry[1].zk_version < 0]  # new partitions: created, not set
            if existing and await self._write_elections(existing):
                changed += [tp for tp, _, _ in existing]
            else:
                one_by_one = chunk
            for tp, pl, decision in one_by_one:
                for attempt in range(attempts):
                    if attempt:
                        retried = await decide(tp, pl)
                        if retried is None:
                            break
                        decision = retried
                    if await self._write_election(tp, pl, *decision):
                        changed.append(tp)
                        break
        return changed

    async def _write_elections(self, batch: list[tuple[TopicPartition, PartitionLeadership, Decision]],
                               bump_epoch: bool = True) -> bool:
        """One fenced multi-op for the batch's new states (leader epochs bumped unless it is only an ISR change
        a leader asked for); False if ZooKeeper refused it because some state changed since it was read
        (nothing was written then)."""
        if not self._session_current():
            raise ControllerMoved(f"the ZooKeeper session that elected controller {self.broker_id} ended")
        bump = 1 if bump_epoch else 0
        updates = [(tp[0], tp[1], zd.LeaderIsrAndControllerEpoch(leader, pl.leader_epoch + bump, list(isr),
                                                                 self.ctx.epoch), pl.zk_version)
                   for tp, pl, (leader, isr, _) in batch]
        try:
            versions = await self._zk(self.zk.update_partition_states, updates, self.ctx.epoch_zk_version)
        except (BadVersionError, ZNodeNotFoundError):
            return False
        for tp, pl, (leader, isr, unclean) in batch:
            if unclean:
                log.error("unclean leader election for %s-%d: broker %d was not in the ISR %s; records "
                          "it lacks are lost", *tp, leader, pl.isr)
            pl.leader, pl.leader_epoch, pl.isr = leader, pl.leader_epoch + bump, list(isr)
            pl.controller_epoch, pl.zk_version = self.ctx.epoch, versions[tp]
            if leader == NO_LEADER:
                log.warning("partition %s-%d is offline: no live replica in its ISR %s", *tp, isr)
        return True

    async def _elect_offline_partitions(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Elect leaders for partitions without a live leader; returns those that changed."""
        async def decide(tp: TopicPartition, pl: PartitionLeadership) -> Decision | None:
            if pl.zk_version >= 0 and self.ctx.is_live(pl.leader):
                return None
            leader, isr, unclean = await self._choose_leader(tp, pl)
            if leader == NO_LEADER and pl.leader == NO_LEADER and pl.zk_version >= 0:
                return None  # still offline, nothing to write
            return leader, isr, unclean

        return await self._decide_and_write(tps, decide)

    async def _write_election(self, tp: TopicPartition, pl: PartitionLeadership, leader: int, isr: list[int],
                     unclean: bool) -> bool:
        """Write an election's outcome (fenced); says so when it loses records or leaves tp offline."""
        if unclean:
            log.error("unclean leader election for %s-%d: broker %d was not in the ISR %s; records "
                      "it lacks are lost", *tp, leader, pl.isr)
        if not await self._write_state(tp, pl, leader, isr):
            return False
        if leader == NO_LEADER:
            log.warning("partition %s-%d is offline: no live replica in its ISR %s", *tp, isr)
        return True

    # -- events ----------------------------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        if not self.active:
            return
        current = await self._zk(self.zk.get_all_brokers)
        known = self.ctx.live_brokers
        # A broker that re-registered (new epoch) restarted: it lost its state, so treat it as dead and new.
        bounced = {b for b in current if b in known and current[b].epoch != known[b].epoch}
        dead = (set(known) - set(current)) | bounced
        new = (set(current) - set(known)) | bounced
        if not dead and not new:
            return
        log.info("controller: brokers joined %s, left %s", sorted(new), sorted(dead))
        assert self.channel is not None
        for b in dead:
            known.pop(b, None)
            self.ctx.shutting_down.discard(b)
            self.channel.remove_broker(b)
        for b in new:
            self._add_live_broker(current[b])
        changed: set[TopicPartition] = set()
        if dead:
            changed |= set(await self._on_brokers_failed(dead))
        if new:
            changed |= set(await self._elect_offline_partitions(list(self.ctx.partitions)))
        live = list(self.ctx.live_brokers)
        if new:  # newcomers need the whole picture, and leadership of every replica they host
            await self.requests.update_metadata(sorted(new), list(self.ctx.partitions))
            await self.requests.leader_and_isr(list(self.ctx.partitions), only=new)
        if changed:
            await self.requests.leader_and_isr(sorted(changed))
        await self.requests.update_metadata([b for b in live if b not in new], sorted(changed))
        if new:
            self.auto_balancer.broker_joined()

    async def _on_brokers_failed(self, dead: set[int]) -> list[TopicPartition]:
        """New leaders for what the dead brokers led; drop them from every ISR (leader epoch bumps)."""
        async def decide(tp: TopicPartition, pl: PartitionLeadership) -> Decision | None:
            if not (set(pl.isr) & dead or pl.leader in dead):
                return None
            if pl.leader in dead or pl.leader == NO_LEADER:
                leader, isr, unclean = await self._choose_leader(tp, pl, exclude=dead)
                if leader == NO_LEADER:
                    isr = list(pl.isr)  # keep who was last in sync
            else:
                leader, unclean = pl.leader, False
                isr = [b for b in pl.isr if b not in dead] or [leader]
            return None if leader == pl.leader and isr == pl.isr else (leader, isr, unclean)

        return await self._decide_and_write(sorted(self.ctx.partitions), decide)

    async def _on_topic_change(self) -> None:
        if not self.active:
            return
        topics = set(await self._zk(self.zk.get_all_topics))
        known = {t for t, _ in self.ctx.partitions}
        for gone in known - topics:
            for tp in self.ctx.partitions_of(gone):
                del self.ctx.partitions[tp]
        new_tps: list[TopicPartition] = []
        for topic in sorted(topics):
            if topic not in self._watched_topics:  # also topics loaded at failover: partitions may be added
                self._watched_topics.add(topic)  # kept after a deletion: the watch sees a re-creation too
                await self._zk(self.zk.watch_data, zd.topic_path(topic), self._term_watch(  # reads at once
                    f"partitions-{topic}", functools.partial(self._on_partition_change, topic)))
            if topic not in known:  # Kafka's TopicChange reads new topics only; the watch covers the rest
                new_tps += await self._load_topic(topic)
        await self._bring_online(new_tps)

    async def _on_partition_change(self, topic: str) -> None:
        if self.active and topic not in self.ctx.deleting:
            await self._bring_online(await self._load_topic(topic))

    async def _bring_online(self, new_tps: list[TopicPartition]) -> None:
        if not new_tps:
            return
        changed = await self._elect_offline_partitions(new_tps)
        log.info("controller: %d new partitions online", len(changed))
        # LeaderAndIsr first, as Kafka: a broker shows a leader to clients only after the leader was told.
        await self.requests.leader_and_isr(changed, is_new=True)
        await self.requests.update_metadata(list(self.ctx.live_brokers), changed)

    async def _on_config_change(self) -> None:
        """A config changed (Kafka's TopicConfigChange): a topic may now allow unclean election,
        so offline partitions get another chance; the controller otherwise re-elects only when
        brokers come and go."""
        if not self.active:
            return
        offline = [tp for tp, pl in self.ctx.partitions.items()
                   if pl.zk_version >= 0 and not self.ctx.is_live(pl.leader)]
        changed = await self._elect_offline_partitions(offline)
        if changed:
            await self.requests.leader_and_isr(changed)
            await self.requests.update_metadata(list(self.ctx.live_brokers), changed)

    async def _on_topic_deletion(self) -> None:
        if not self.active:
            return
        queued = set(await self._zk(self.zk.get_topic_deletions))
        for topic in sorted(queued):
            if self.reassignments.defer_deletion(topic):
                continue
            tps = self.ctx.partitions_of(topic)
            self.ctx.deleting.add(topic)
            if tps:
                await self.requests.stop_replica(tps, delete=True)
            await self._zk(self.zk.delete_topic_znodes, topic, self.ctx.epoch_zk_version)
            await self._zk(self.zk.remove_topic_deletion, topic, self.ctx.epoch_zk_version)
            if tps:  # after ZooKeeper: a broker that shows the topic gone lets a client create it again
                await self.requests.update_metadata(list(self.ctx.live_brokers), tps, deleting=True)
            for tp in tps:
                self.ctx.partitions.pop(tp, None)
            self.ctx.topic_ids.pop(topic, None)
            self.ctx.deleting.discard(topic)
            log.info("controller: deleted topic %s", topic)

    # -- log dir failures (KIP-112) -------------------------------------------------------------------
    async def _on_log_dir_events(self) -> None:
        """A broker wrote ``/log_dir_event_notification/log_dir_event_<seq>``: one of its log dirs failed.

        As Kafka's controller does, ask that broker for the state of every replica it hosts (a
        LeaderAndIsr with the current states); it answers KAFKA_STORAGE_ERROR for those in an offline
        dir, and _on_replicas_offline takes them out of leadership and the ISRs. Asking, rather than
        trusting a list in the notification, also covers replicas that failed after it was written."""
        if not self.active:
            return
        events = await self._zk(self.zk.get_log_dir_events)
        if not events:
            return
        brokers = sorted({b for b in events.values() if b is not None})
        log.info("controller: log dir failure reported by brokers %s", brokers)
        for broker in brokers:
            if broker in self.ctx.live_brokers:
                hosted = [tp for tp in sorted(self.ctx.partitions) if tp[0] not in self.ctx.deleting]
                await self.requests.leader_and_isr(hosted, only={broker})
        await self._zk(self.zk.delete_log_dir_events, list(events), self.ctx.epoch_zk_version)

    def _offline_replicas_of(self, tp: TopicPartition) -> set[int]:
        return {b for b, tps in self.ctx.offline_replicas.items() if tp in tps}

    def _on_leader_and_isr_response(self, broker_id: int) -> Callable[[Any], None]:
        """Replicas a broker answers KAFKA_STORAGE_ERROR for are offline: handle that as an event."""
        term = self._term
        reg = self.ctx.live_brokers.get(broker_id)
        broker_epoch = reg.epoch if reg is not None else -1

        def on_response(response: Any) -> None:
            if term != self._term or getattr(response, "error_code", 0) != 0:
                return
            offline: list[TopicPartition] = []
            online: list[TopicPartition] = []
            for t in getattr(response, "topics", None) or []:
                name = self.topic_name(t.topic_id)
                if name is None:
                    continue
                for p in t.partition_errors:
                    if p.error_code == Errors.KafkaStorageError.errno:
                        offline.append((name, p.partition_index))
                    elif p.error_code == 0:
                        online.append((name, p.partition_index))
            if offline:
                self._events.put_nowait(ControllerEvent("replicas-offline", lambda: self._on_replicas_offline(
                    broker_id, broker_epoch, offline)))
            back = [tp for tp in online if tp in self.ctx.offline_replicas.get(broker_id, ())]
            if back:
                self._events.put_nowait(ControllerEvent("replicas-online",
                                                        lambda: self._on_replicas_online(broker_id, back)))

        return on_response

    async def _on_replicas_offline(self, broker_id: int, broker_epoch: int, tps: list[TopicPartition]) -> None:
        """Kafka's onReplicasBecomeOffline: new leaders where the broker led, the broker out of every
        ISR it was in, now rather than after replica.lag.time.max.ms; LeaderAndIsr and UpdateMetadata
        tell everyone."""
        reg = self.ctx.live_brokers.get(broker_id)
        if not self.active or reg is None or reg.epoch != broker_epoch:
            return  # the broker restarted or left meanwhile: its new registration reports afresh
        known = self.ctx.offline_replicas.setdefault(broker_id, set())
        fresh = sorted(set(tps) - known)
        known.update(tps)
        async def decide(tp: TopicPartition, pl: PartitionLeadership) -> Decision | None:
            if broker_id not in pl.replicas:
                return None
            if pl.leader == broker_id:
                leader, isr, unclean = await self._choose_leader(tp, pl, exclude={broker_id})
                if leader == NO_LEADER:
                    isr = list(pl.isr)  # keep who was last in sync, so one of them can come back
            else:
                leader, unclean = pl.leader, False
                isr = [b for b in pl.isr if b != broker_id] or list(pl.isr)
            return None if leader == pl.leader and isr == pl.isr else (leader, isr, unclean)

        changed = await self._decide_and_write(sorted(set(tps)), decide)
        if fresh:
            log.warning("controller: %d replicas of broker %d are in an offline log dir; %d partitions changed "
                        "leader or ISR", len(fresh), broker_id, len(changed))
        if changed:
            await self.requests.leader_and_isr(changed, only={b for b in self.ctx.live_brokers if b != broker_id})
        if changed or fresh:
            await self.requests.update_metadata(list(self.ctx.live_brokers), sorted(set(changed) | set(fresh)))

    async def _on_replicas_online(self, broker_id: int, tps: list[TopicPartition]) -> None:
        """The broker brought a failed log dir back: its replicas may lead and rejoin ISRs again."""
        known = self.ctx.offline_replicas.get(broker_id)
        if not self.active or not known:
            return
        back = sorted(set(tps) & known)
        known.difference_update(back)
        if back:
            log.info("controller: %d replicas of broker %d are online again", len(back), broker_id)
            changed = await self._elect_offline_partitions(back)  # those it alone could lead
            if changed:
                await self.requests.leader_and_isr(changed)
            await self.requests.update_metadata(list(self.ctx.live_brokers), back)

    # -- requests from brokers -----------------------------------------------------------------------
    def alter_partition(self, broker_id: int, changes: list[tuple[TopicPartition, int, list[int], int]]
                        ) -> asyncio.Future[dict[TopicPartition, tuple[int, PartitionLeadership | None]]]:
        """AlterPartition from a leader: (tp, leader epoch, new ISR, partition epoch) per partition."""
        future: asyncio.Future[dict[TopicPartition, tuple[int, PartitionLeadership | None]]] = \
            self._loop.create_future()

        async def handle() -> None:
            result: dict[TopicPartition, tuple[int, PartitionLeadership | None]] = {}
            updated: list[TopicPartition] = []
            try:
                result = await self._alter_partitions(broker_id, changes)
                updated = [tp for tp, (code, _) in result.items() if code == 0]
            except (ControllerMoved, KafkaZkError):
                future.set_exception(Errors.NotControllerError(f"broker {self.broker_id} is no longer the controller"))
                raise
            finally:
                if updated:
                    await self.requests.update_metadata(list(self.ctx.live_brokers), updated)
                if not future.done():
                    future.set_result(result)
                if updated:  # after the leader has its answer: a move whose targets are all in sync completes
                    self._events.put_nowait(ControllerEvent(
                        "reassignment-isr-change", lambda: self.reassignments.on_isr_changed(updated)))

        if not self.active:
            future.set_exception(Errors.NotControllerError(f"broker {self.broker_id} is not the controller"))
        else:
            self._events.put_nowait(ControllerEvent("alter-partition", handle, future))
        return future

    async def _alter_partitions(self, broker_id: int, changes: list[tuple[TopicPartition, int, list[int], int]]
                                ) -> dict[TopicPartition, tuple[int, PartitionLeadership | None]]:
        """Check every ISR change, then write the accepted ones in fenced multi-ops (a follower that comes back
        rejoins hundreds of ISRs at once); a batch that meets a state changed under it is done one by one."""
        result: dict[TopicPartition, tuple[int, PartitionLeadership | None]] = {}
        accepted: list[tuple[TopicPartition, PartitionLeadership, Decision]] = []
        asked = {tp: (leader_epoch, partition_epoch) for tp, leader_epoch, _, partition_epoch in changes}
        async for tp, leader_epoch, new_isr, partition_epoch in paced(changes):
            refused = self._check_alter(broker_id, tp, leader_epoch, new_isr, partition_epoch)
            pl = self.ctx.partitions.get(tp)
            if refused is not None or pl is None:
                result[tp] = (refused or Errors.UnknownTopicOrPartitionError.errno, None)
            elif sorted(new_isr) == sorted(pl.isr):
                result[tp] = (0, pl)
            else:
                accepted.append((tp, pl, (pl.leader, list(new_isr), False)))
        for i in range(0, len(accepted), ZK_STATE_BATCH):
            chunk = accepted[i:i + ZK_STATE_BATCH]
            if await self._write_elections(chunk, bump_epoch=False):
                for tp, pl, _ in chunk:
                    log.info("controller: ISR of %s-%d is now %s (partition epoch %d)", *tp, pl.isr, pl.zk_version)
                    result[tp] = (0, pl)
                continue
            for tp, _, (_, isr, _) in chunk:
                result[tp] = await self._alter_one(broker_id, tp, asked[tp][0], isr, asked[tp][1])
        return {tp: result[tp] for tp, _, _, _ in changes}

    def _check_alter(self, broker_id: int, tp: TopicPartition, leader_epoch: int, new_isr: list[int],
                     partition_epoch: int) -> int | None:
        """Why an AlterPartition entry is refused (an error code), or None if it may be written."""
        pl = self.ctx.partitions.get(tp)
        if pl is None or tp[0] in self.ctx.deleting:
            return Errors.UnknownTopicOrPartitionError.errno
        if pl.leader != broker_id:
            return Errors.NotLeaderForPartitionError.errno
        if leader_epoch < pl.leader_epoch:
            return Errors.FencedLeaderEpochError.errno
        if leader_epoch > pl.leader_epoch:
            return Errors.NotControllerError.errno  # the requester knows more than we do
        if partition_epoch != pl.zk_version:
            return Errors.InvalidUpdateVersionError.errno
        if sorted(new_isr) == sorted(pl.isr):
            return None
        if broker_id not in new_isr or not set(new_isr) <= set(pl.replicas) or len(set(new_isr)) < len(new_isr):
            return Errors.InvalidRequestError.errno
        joining = [b for b in new_isr if b not in pl.isr and (not self.ctx.is_live(b)
                                                                or b in self._offline_replicas_of(tp))]
        if joining:
            return Errors.IneligibleReplicaError.errno
        return None

    async def _alter_one(self, broker_id: int, tp: TopicPartition, leader_epoch: int, new_isr: list[int],
                         partition_epoch: int) -> tuple[int, PartitionLeadership | None]:
        """One ISR change, checked against the state as it is now (after a batch was refused)."""
        refused = self._check_alter(broker_id, tp, leader_epoch, new_isr, partition_epoch)
        if refused is not None:
            return refused, None
        pl = self.ctx.partitions[tp]
        if sorted(new_isr) == sorted(pl.isr):
            return 0, pl
        if not await self._write_state(tp, pl, pl.leader, new_isr, bump_epoch=False):
            return Errors.InvalidUpdateVersionError.errno, None
        log.info("controller: ISR of %s-%d is now %s (partition epoch %d)", *tp, pl.isr, pl.zk_version)
        return 0, pl

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> asyncio.Future[list[TopicPartition]]:
        """Move leadership off a broker that is about to stop; returns what it still leads."""
        return self._run_as_event("controlled-shutdown", lambda: self._shutdown_broker(broker_id, broker_epoch))

    def _run_as_event(self, name: str, work: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """Run work on the controller's event queue; its result (or error) completes the future."""
        future: asyncio.Future[T] = self._loop.create_future()

        async def handle() -> None:
            try:
                result = await work()
            except (ControllerMoved, KafkaZkError):
                # Fenced or cut off from ZooKeeper: the requester retries with whoever is controller now.
                if not future.done():
                    future.set_exception(Errors.NotControllerError(f"broker {self.broker_id} is no longer the controller"))
                raise
            except Errors.KafkaError as exc:  # a refusal for the requester (stale epoch ...), not a controller failure
                if not future.done():
                    future.set_exception(exc)
                return
            except BaseException as exc:
                if not future.done():
                    future.set_exception(exc)
                raise
            if not future.done():
                future.set_result(result)

        if not self.active:
            future.set_exception(Errors.NotControllerError(f"broker {self.broker_id} is not the controller"))
        else:
            self._events.put_nowait(ControllerEvent(name, handle, future))
        return future

    async def _shutdown_broker(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        reg = self.ctx.live_brokers.get(broker_id)
        if reg is None:
            raise Errors.BrokerNotAvailableError(f"broker {broker_id} is not registered")
        if broker_epoch >= 0 and reg.epoch >= 0 and broker_epoch != reg.epoch:
            raise Errors.StaleBrokerEpochError(f"broker epoch {broker_epoch} is not {reg.epoch}")
        self.ctx.shutting_down.add(broker_id)
        followed: set[TopicPartition] = set()

        async def decide(tp: TopicPartition, pl: PartitionLeadership) -> Decision | None:
            if broker_id not in pl.replicas or len(pl.replicas) < 2:
                return None
            if pl.leader == broker_id:
                leader, isr, _ = await self._choose_leader(tp, pl, exclude={broker_id})
                if leader == NO_LEADER or leader not in pl.isr:
                    return None  # no in-sync replica to take over: it stays led here until the broker dies
                return leader, [b for b in isr if b != broker_id], False
            if broker_id in pl.isr:
                followed.add(tp)
                return pl.leader, [b for b in pl.isr if b != broker_id], False
            return None

        changed = await self._decide_and_write(sorted(self.ctx.partitions), decide, attempts=1)
        stop_followers = [tp for tp in changed if tp in followed and self.ctx.partitions[tp].leader != broker_id]
        if changed:
            await self.requests.leader_and_isr(changed)
            await self.requests.update_metadata(list(self.ctx.live_brokers), changed)
        if stop_followers:
            await self.requests.stop_replica(stop_followers, delete=False, only={broker_id})
        return sorted(tp for tp, pl in self.ctx.partitions.items()
                      if pl.leader == broker_id and len(pl.replicas) > 1)

    # -- preferred leaders -----------------------------------------------------------------------------
    async def _auto_rebalance_loop(self) -> None:
        interval = self.config.get("leader.imbalance.check.interval.seconds")
        while self.active:
            await asyncio.sleep(interval)
            self._events.put_nowait(ControllerEvent("auto-rebalance", self._check_imbalance))

    async def _check_imbalance(self) -> None:
        if not self.active:
            return
        threshold = self.config.get("leader.imbalance.per.broker.percentage")
        by_preferred: dict[int, list[TopicPartition]] = {}
        async for tp, pl in paced(list(self.ctx.partitions.items())):
            if pl.replicas:
                by_preferred.setdefault(pl.replicas[0], []).append(tp)
        moves: list[TopicPartition] = []
        for broker, tps in by_preferred.items():
            if not self.ctx.is_live(broker):
                continue
            off = [tp for tp in tps if self.ctx.partitions[tp].leader != broker]
            if tps and 100 * len(off) / len(tps) > threshold:
                moves += off
        if moves:
            await self.elect_preferred_leaders(moves)

    async def elect_preferred_leaders(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Move leadership to the first replica of the assignment where it is live and in sync."""
        def choose(pl: PartitionLeadership) -> int | tuple[int, list[int], bool]:
            preferred = pl.replicas[0]
            if pl.leader == preferred:
                return Errors.ElectionNotNeededError.errno
            if not self.ctx.is_live(preferred) or preferred not in pl.isr:
                return Errors.PreferredLeaderNotAvailableError.errno
            return preferred, pl.isr, False

        results = await self._run_elections(tps, choose, Errors.PreferredLeaderNotAvailableError.errno)
        moved = sum(1 for code in results.values() if code == 0)
        if moved:
            log.info("controller: moved %d partitions back to their preferred leader", moved)
        return results

    async def _elect_unclean(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Offline partitions take an in-sync replica if one lives, else the first live replica."""
        def choose(pl: PartitionLeadership) -> int | tuple[int, list[int], bool]:
            if self.ctx.is_live(pl.leader):
                return Errors.ElectionNotNeededError.errno
            live = [b for b in pl.replicas if self.ctx.is_live(b)]
            if not live:
                return Errors.EligibleLeadersNotAvailableError.errno
            in_sync = [b for b in live if b in pl.isr]
            return (in_sync or live)[0], in_sync or live[:1], not in_sync

        return await self._run_elections(tps, choose, Errors.EligibleLeadersNotAvailableError.errno)

    async def _run_elections(self, tps: Iterable[TopicPartition],
                             choose: Callable[[PartitionLeadership], int | tuple[int, list[int], bool]],
                             lost_race: int) -> dict[TopicPartition, int]:
        """ElectLeaders' loop: choose gives an error code or (leader, isr, unclean); the decisions are written
        in batches as every other election (``_decide_and_write``), once each; tell brokers once."""
        results: dict[TopicPartition, int] = {}
        wanted = list(dict.fromkeys(tps))

        async def decide(tp: TopicPartition, pl: PartitionLeadership) -> Decision | None:
            choice = choose(pl)
            if isinstance(choice, int):
                results[tp] = choice
                return None
            return choice

        changed = await self._decide_and_write(wanted, decide, attempts=1)
        written = set(changed)
        for tp in wanted:
            if tp not in self.ctx.partitions or tp[0] in self.ctx.deleting:
                results[tp] = Errors.UnknownTopicOrPartitionError.errno  # gone, or being deleted
            else:
                results.setdefault(tp, 0 if tp in written else lost_race)
        if changed:
            await self.requests.leader_and_isr(changed)
            await self.requests.update_metadata(list(self.ctx.live_brokers), changed)
        return results

    def elect_leaders(self, tps: list[TopicPartition] | None, unclean: bool
                      ) -> asyncio.Future[dict[TopicPartition, int]]:
        """ElectLeaders: preferred (back to the first replica) or unclean (offline partitions take
        the first live replica even if it was not in sync). None = every partition."""
        async def work() -> dict[TopicPartition, int]:
            chosen = sorted(self.ctx.partitions) if tps is None else tps
            return await (self._elect_unclean(chosen) if unclean else self.elect_preferred_leaders(chosen))

        return self._run_as_event("elect-leaders", work)

    # -- partition reassignment (KIP-455) ---------------------------------------------------------------
    def alter_partition_reassignments(self, requests: dict[TopicPartition, list[int] | None]
                                      ) -> asyncio.Future[dict[TopicPartition, PartitionResult]]:
        """AlterPartitionReassignments: target replicas per partition (None cancels); see reassignment.py."""
        return self._run_as_event("alter-partition-reassignments", lambda: self.reassignments.alter(requests))

    def list_partition_reassignments(self, tps: list[TopicPartition] | None) -> asyncio.Future[dict[Any, Any]]:
        """ListPartitionReassignments: the moves under way (of the partitions named, or all)."""
        async def work() -> dict[Any, Any]:
            return self.reassignments.in_progress(tps)

        return self._run_as_event("list-partition-reassignments", work)

    def check_session(self) -> None:
        """Raise ControllerMoved unless the session that elected this controller still lives (before a write)."""
        if not self._session_current():
            raise ControllerMoved(f"the ZooKeeper session that elected controller {self.broker_id} ended")

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """AlterPartition names topics by id (v2+); the controller's own view, not the broker cache."""
        return next((name for name, tid in self.ctx.topic_ids.items() if tid == topic_id), None)
