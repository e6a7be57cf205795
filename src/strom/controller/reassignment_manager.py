"""ReassignmentManager: the controller's side of partition reassignment (Kafka's ReassignmentManager).

It turns requests (AlterPartitionReassignments, ``/admin/reassign_partitions``) and ISR changes into the
steps ``reassignment.next_step`` decides, writes each batch of steps in one fenced ZooKeeper multi-op
(the topics' assignments with their adding/removing replicas and the partitions' states, leader epochs
bumped), then tells the brokers: LeaderAndIsr (with the adding and removing replicas) to the replica
set, StopReplica with deletion to replicas that left, UpdateMetadata to everyone.

Everything runs on the controller's event queue, like the rest of the controller; ZooKeeper calls run on
its ZooKeeper thread and loops over partitions yield.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import kafka.errors as Errors

from strom.controller.pacing import paced
from strom.controller.reassignment import (
    ReassignmentStep,
    ReplicaAssignment,
    build_reassignment,
    invalid_target,
    is_complete,
    next_step,
)
from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.errors import BadVersionError, ZNodeNotFoundError
from strom.server_common.types import TopicPartition

if TYPE_CHECKING:
    from strom.controller.controller import KafkaController, PartitionLeadership

log = logging.getLogger(__name__)

# (error code, message) per partition, as AlterPartitionReassignments answers.
PartitionResult = tuple[int, str | None]
Plan = tuple[TopicPartition, ReplicaAssignment]
LOG_EACH = 20  # partitions logged one by one per step; above, one summary line


def assignment_of(pl: PartitionLeadership) -> ReplicaAssignment:
    return ReplicaAssignment(list(pl.replicas), list(pl.adding), list(pl.removing))


class ReassignmentManager:
    def __init__(self, controller: KafkaController, batch: int) -> None:
        self.controller = controller
        self.batch = batch  # partitions per ZooKeeper multi-op
        # What /admin/reassign_partitions asks for, as last read: a partition leaves it when its move is done.
        self.zk_requested: dict[TopicPartition, list[int]] = {}
        # Topics queued for deletion while some of their partitions move: deleted once the moves end.
        self.deletion_deferred: set[str] = set()

    # -- requests ------------------------------------------------------------------------------------
    async def alter(self, requests: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, PartitionResult]:
        """AlterPartitionReassignments: start, change or cancel (None) the move of each partition."""
        results, plans = await self._plans(requests)
        # The latest request wins over one made through /admin/reassign_partitions (as Kafka).
        await self._forget_zk_requests([tp for tp, _ in plans])
        written = await self._execute(plans)
        for tp, _ in plans:
            results[tp] = (0, None) if tp in written else (
                Errors.InvalidReplicationAssignmentError.errno,
                "No live in-sync replica could lead the partition with this assignment.")
        return results

    async def _plans(self, requests: dict[TopicPartition, list[int] | None]
                     ) -> tuple[dict[TopicPartition, PartitionResult], list[Plan]]:
        ctx = self.controller.ctx
        results: dict[TopicPartition, PartitionResult] = {}
        plans: list[Plan] = []
        async for tp, target in paced(list(requests.items())):
            # Kafka's order of checks: the target, then whether there is a move to cancel, then the partition.
            pl = ctx.partitions.get(tp)
            current = assignment_of(pl) if pl is not None else ReplicaAssignment([])
            why = None if target is None else invalid_target(target, current, ctx.live_brokers)
            if why is not None:
                results[tp] = (Errors.InvalidReplicationAssignmentError.errno, why)
                continue
            wanted = build_reassignment(current, target)
            if wanted is None:
                results[tp] = (Errors.NoReassignmentInProgressError.errno,
                               f"No reassignment of {tp[0]}-{tp[1]} is in progress.")
                continue
            if pl is None or tp[0] in ctx.deleting or pl.zk_version < 0 or (
                    target is not None and tp[0] in self.deletion_deferred):  # no new move of a topic to delete
                results[tp] = (Errors.UnknownTopicOrPartitionError.errno, "The partition does not exist.")
                continue
            plans.append((tp, wanted))
        return results, plans

    def in_progress(self, tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the partitions (of those named, or all) being moved."""
        partitions = self.controller.ctx.partitions
        wanted = partitions if tps is None else tps
        out: dict[TopicPartition, ReplicaAssignment] = {}
        for tp in wanted:
            pl = partitions.get(tp)
            if pl is not None and (pl.adding or pl.removing):
                out[tp] = assignment_of(pl)
        return out

    # -- topic deletion ------------------------------------------------------------------------------
    def moving(self, topic: str) -> bool:
        """Whether a partition of ``topic`` is being reassigned."""
        partitions = self.controller.ctx.partitions
        return any(partitions[tp].adding or partitions[tp].removing for tp in self.controller.ctx.partitions_of(topic))

    def defer_deletion(self, topic: str) -> bool:
        """Whether deleting ``topic`` must wait for its reassignments (Kafka's TopicDeletionManager marks it
        ineligible); the deletion is tried again when they complete or are cancelled. Until then the topic
        serves as before: its moves need ISR changes and leader elections to finish."""
        if not self.moving(topic):
            self.deletion_deferred.discard(topic)
            return False
        if topic not in self.deletion_deferred:
            log.info("controller: topic %s is ineligible for deletion while partitions are being reassigned; "
                     "it is deleted when the reassignment ends", topic)
            self.deletion_deferred.add(topic)
        return True

    async def _resume_deferred_deletions(self) -> None:
        if any(not self.moving(t) for t in self.deletion_deferred):
            await self.controller._on_topic_deletion()

    # -- progress ------------------------------------------------------------------------------------
    async def on_isr_changed(self, tps: Iterable[TopicPartition]) -> None:
        """A leader's AlterPartition grew an ISR: moves whose target replicas are all in sync complete."""
        if not self.controller.active:
            return
        partitions = self.controller.ctx.partitions
        plans: list[Plan] = []
        for tp in tps:
            pl = partitions.get(tp)
            if pl is not None and (pl.adding or pl.removing) and is_complete(assignment_of(pl), pl.isr):
                plans.append((tp, assignment_of(pl)))
        if plans:
            await self._execute(plans)

    async def resume(self) -> None:
        """At failover: the moves recorded in the topic znodes go on (those already in sync complete now)."""
        plans = [(tp, assignment_of(pl)) async for tp, pl in paced(list(self.controller.ctx.partitions.items()))
                 if pl.adding or pl.removing]
        if plans:
            log.info("controller: resuming the reassignment of %d partitions", len(plans))
            await self.on_isr_changed([tp for tp, _ in plans])

    async def on_zk_request(self) -> None:
        """``/admin/reassign_partitions`` was created or changed (or read at failover): start what it asks
        for that is not under way yet; what cannot start leaves the znode, which goes once it is empty."""
        c = self.controller
        if not c.active:
            return
        asked = await c._zk(c.zk.get_partition_reassignment)
        self.zk_requested = dict(asked or {})
        if asked is None:
            return
        if not asked:
            await self._write_zk_requests()  # present but empty or unreadable: nothing to do, it goes
            return
        pending = {tp: target for tp, target in asked.items()
                   if (pl := c.ctx.partitions.get(tp)) is None or assignment_of(pl).target != target
                   or not (pl.adding or pl.removing)}
        results, plans = await self._plans(dict(pending))
        written = await self._execute(plans)
        failed = [tp for tp in pending if tp not in written]
        if failed:
            log.warning("controller: /admin/reassign_partitions asks for moves that cannot start: %s",
                        ", ".join(f"{t}-{p}: {results.get((t, p), (0, 'no leader'))[1]}" for t, p in failed))
        await self._forget_zk_requests(failed)
        await self._forget_zk_requests([tp for tp in asked if tp not in failed and self._done(tp, asked[tp])])

    def _done(self, tp: TopicPartition, target: list[int]) -> bool:
        pl = self.controller.ctx.partitions.get(tp)
        return pl is None or (not pl.adding and not pl.removing and list(pl.replicas) == list(target))

    async def _forget_zk_requests(self, tps: Iterable[TopicPartition]) -> None:
        gone = [tp for tp in tps if tp in self.zk_requested]
        if not gone:
            return
        for tp in gone:
            del self.zk_requested[tp]
        await self._write_zk_requests()

    async def _write_zk_requests(self) -> None:
        c = self.controller
        await c._zk(c.zk.set_or_delete_partition_reassignment, dict(self.zk_requested), c.ctx.epoch_zk_version)
        if not self.zk_requested:
            log.info("controller: every reassignment asked through %s is done; the znode is deleted",
                     zd.REASSIGN_PARTITIONS_PATH)

    # -- writing steps -------------------------------------------------------------------------------
    async def _execute(self, plans: list[Plan]) -> set[TopicPartition]:
        """Decide, write (in fenced batches) and announce each plan's next step; returns the partitions written."""
        c = self.controller
        steps: list[tuple[TopicPartition, PartitionLeadership, ReassignmentStep]] = []
        async for tp, wanted in paced(plans):
            pl = c.ctx.partitions.get(tp)
            if pl is None:
                continue
            step = next_step(assignment_of(pl), wanted, pl.leader, pl.isr, c.ctx.is_live)
            if step is None:
                log.warning("controller: cannot move %s-%d to %s now: no live in-sync replica to lead it", *tp,
                            wanted.target)
                continue
            steps.append((tp, pl, step))
        written: list[tuple[TopicPartition, list[int], bool]] = []
        wanted_of = dict(plans)
        for i in range(0, len(steps), self.batch):
            chunk = steps[i:i + self.batch]
            if await self._write(chunk):
                written += [(tp, step.removed, step.finished) for tp, _, step in chunk]
                continue
            for tp, pl, _ in chunk:  # a state changed under the batch: re-read it, decide again, one by one
                got = await c._zk(c.zk.get_partition_state, *tp)
                if got is None:
                    continue
                st, version = got
                pl.leader, pl.leader_epoch, pl.isr = st.leader, st.leader_epoch, list(st.isr)
                pl.controller_epoch, pl.zk_version = st.controller_epoch, version
                step = next_step(assignment_of(pl), wanted_of[tp], pl.leader, pl.isr, c.ctx.is_live)
                if step is not None and await self._write([(tp, pl, step)]):
                    written.append((tp, step.removed, step.finished))
        if not written:
            return set()
        changed = [tp for tp, _, _ in written]
        self._log_steps(written)
        await c.requests.leader_and_isr(changed)
        removed = {tp: gone for tp, gone, _ in written if gone}
        if removed:
            await c.requests.stop_removed_replicas(removed)
        await c.requests.update_metadata(list(c.ctx.live_brokers), changed)
        finished = [tp for tp, _, done in written if done]
        await self._forget_zk_requests([tp for tp in finished if tp in self.zk_requested
                                        and self._done(tp, self.zk_requested[tp])])
        if finished and self.deletion_deferred:
            await self._resume_deferred_deletions()
        return set(changed)

    def _log_steps(self, written: list[tuple[TopicPartition, list[int], bool]]) -> None:
        """One line per partition for a few; a count for many (a move of 1,000 partitions is not 2,000 lines)."""
        partitions = self.controller.ctx.partitions
        finished = sum(1 for _, _, done in written if done)
        if len(written) > LOG_EACH:
            log.info("controller: %d reassignments started or changed, %d completed", len(written) - finished, finished)
            return
        for tp, _, done in written:
            pl = partitions[tp]
            if done:
                log.info("controller: reassignment of %s-%d complete: replicas %s, leader %d, ISR %s", *tp,
                         pl.replicas, pl.leader, pl.isr)
            else:
                log.info("controller: reassigning %s-%d: replicas %s, adding %s, removing %s", *tp, pl.replicas,
                         pl.adding, pl.removing)

    async def _write(self, chunk: list[tuple[TopicPartition, PartitionLeadership, ReassignmentStep]]) -> bool:
        """One fenced multi-op: the touched topics' full assignments and the partitions' states (leader epoch
        bumped). False if a state changed since it was read (nothing was written then)."""
        c = self.controller
        c.check_session()
        ctx = c.ctx
        by_topic: dict[str, dict[int, ReassignmentStep]] = {}
        for tp, _, step in chunk:
            by_topic.setdefault(tp[0], {})[tp[1]] = step
        topics = sorted(by_topic)
        assignments: list[zd.TopicAssignment] = []
        for topic in topics:
            # The topic znode as it is (partitions may have been added since the controller read it), written
            # back with this chunk's partitions changed, on the version read.
            current = await c._zk(c.zk.get_topic_assignment, topic)
            if current is None:
                return False
            partitions = dict(current.partitions)
            adding = dict(current.adding_replicas)
            removing = dict(current.removing_replicas)
            for p, step in by_topic[topic].items():
                a = step.assignment
                partitions[p], adding[p], removing[p] = a.replicas, a.adding, a.removing
            assignments.append(zd.TopicAssignment(current.topic_id, partitions, adding, removing, current.zk_version))
        updates = [(tp[0], tp[1], zd.LeaderIsrAndControllerEpoch(step.leader, pl.leader_epoch + 1, list(step.isr),
                                                                  ctx.epoch), pl.zk_version)
                   for tp, pl, step in chunk]
        try:
            versions = await c._zk(c.zk.update_assignments_and_states, assignments, topics, updates,
                                   ctx.epoch_zk_version)
        except (BadVersionError, ZNodeNotFoundError):
            return False
        for tp, pl, step in chunk:
            a = step.assignment
            pl.replicas, pl.adding, pl.removing = list(a.replicas), list(a.adding), list(a.removing)
            pl.leader, pl.leader_epoch, pl.isr = step.leader, pl.leader_epoch + 1, list(step.isr)
            pl.controller_epoch, pl.zk_version = ctx.epoch, versions[tp]
        return True
