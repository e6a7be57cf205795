"""One partition as this broker sees it: leader epoch, replicas, ISR, LEO and HW.

The high watermark rule lives here. As in Kafka 3.x the HW is *exclusive*:
it is the offset of the first record not yet replicated to every ISR member,
so consumers read offsets < HW. With a single broker the ISR is the leader
alone and HW = LEO after every append.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import kafka.errors as Errors

from strom.metadata.store import PartitionState
from strom.storage.log import FetchDataInfo, Log, LogMovedError
from strom.storage.log_config import LogConfig
from strom.storage.producer_state import ProducerStateEntry
from strom.storage.transaction_index import AbortedTxn
from strom.storage.validator import AppendOrigin

# FetchRequest / ListOffsetsRequest isolation_level.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
# current_leader_epoch of Fetch, ListOffsets and OffsetForLeaderEpoch: the client does not fence.
NO_LEADER_EPOCH = -1

T = TypeVar("T")


@dataclass(slots=True)
class FollowerState:
    """A follower as its leader sees it (Kafka's Replica): LEO from its fetches, and when it last caught up."""

    log_end_offset: int = -1  # unknown until its first fetch
    last_caught_up_ms: int = 0
    last_fetch_leo_ms: int = 0  # when the leader's LEO was last_fetch_leader_leo
    last_fetch_leader_leo: int = -1
    log_start_offset: int = -1  # from its fetches: DeleteRecords waits until it passed the deleted offset


# AlterPartition sender: (partition, proposed ISR) -> None; the answer comes back via on_isr_committed.
IsrChangeSender = Callable[["Partition", list[int]], None]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class Partition:
    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, state: PartitionState, log: Log,
                 local_broker_id: int, isr_change_sender: IsrChangeSender | None = None) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self.isr_change_sender = isr_change_sender  # None on a single node: the ISR is the leader alone
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        # A reassignment under way: replicas joining (they count for the HW only once in the ISR) and leaving.
        self.adding_replicas = list(state.adding_replicas)
        self.removing_replicas = list(state.removing_replicas)
        self.pending_isr: list[int] | None = None  # proposed to the controller, not yet committed
        self.leader_epoch_start_offset = log.log_end_offset
        self._followers: dict[int, FollowerState] = {}
        if self.is_leader:
            self._reset_followers()
        self.maybe_increment_high_watermark()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The HW, or the first offset of the oldest transaction not yet decided below it."""
        return self.log.last_stable_offset

    @property
    def isr_size(self) -> int:
        return len(self.isr)

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the HW must wait for: committed plus proposed members (Kafka's maximal ISR).

        While a shrink is pending the HW still waits for the leaving replica, and a joining
        replica counts at once; so the HW never passes a record some possible ISR lacks."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [b for b in self.pending_isr if b not in self.isr]

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    @property
    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    async def run_on_storage(self, fn: Callable[..., T], *args: object) -> T:
        """Run a file mutation of this replica's log on its log dir's storage thread, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.log.storage_executor, fn, *args)

    def assign_epoch_starts(self, starts: list[tuple[int, int]]) -> None:
        """Follower: record the leader epochs fetched batches start (storage thread; see Log)."""
        self._on_current_log(lambda lg: lg.assign_epoch_starts(starts))

    def assign_epoch_start_offset(self, leader_epoch: int) -> None:
        """About to lead ``leader_epoch``: record that it starts at the LEO (storage thread; see Log), so
        ``make_leader`` on the loop finds it assigned and writes nothing."""
        self._on_current_log(lambda lg: lg.assign_epoch_start_offset(leader_epoch))

    def _on_current_log(self, fn: Callable[[Log], T]) -> T:
        """``fn(self.log)``, once more on the new log if a move to another log dir replaced it meanwhile."""
        try:
            return fn(self.log)
        except LogMovedError:
            return fn(self.log)

    @property
    def log_dir(self) -> str:
        """The log dir (not the partition dir) holding this partition."""
        return os.path.dirname(self.log.directory)

    # -- the local log, as callers outside storage may see it (one seam for a later local/remote split)
    @property
    def partition_dir(self) -> str:
        """This partition's own directory (``<log dir>/<topic>-<partition>``)."""
        return self.log.directory

    @property
    def log_to_move(self) -> Log:
        """The local log a move to another log dir copies (broker/log_dir_mover.py, storage/log_dir_moves.py)."""
        return self.log

    def replace_log(self, new: Log) -> None:
        """The move's copy takes over (under the old log's lock: see log_dir_moves.swap)."""
        self.log = new

    @property
    def log_config(self) -> LogConfig:
        return self.log.config

    def update_log_config(self, config: LogConfig) -> None:
        """A topic or broker-default config change reaches the log (Kafka's updateConfig)."""
        self.log.update_config(config)

    @property
    def num_log_segments(self) -> int:
        return len(self.log.segments)

    @property
    def latest_epoch(self) -> int | None:
        """The newest leader epoch in the log (not the current ``leader_epoch``); None if none wrote to it."""
        return self.log.latest_epoch

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` of ``leader_epoch`` in the local log, unfenced: a follower looks up
        its own divergence point with it; ``last_offset_for_leader_epoch`` answers other brokers."""
        return self.log.end_offset_for_epoch(leader_epoch)

    def fetch_offset_limit(self, isolation: int, replica_id: int = -1) -> int:
        """Exclusive upper offset a fetch may read: LEO for a follower, else HW (LSO for read_committed)."""
        if replica_id >= 0:
            return self.log.log_end_offset
        return self.last_stable_offset if isolation == READ_COMMITTED else self.log.high_watermark

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a request made with stale metadata (KIP-320); -1 checks nothing.

        An epoch older than ours: the client missed a leader change (FENCED_LEADER_EPOCH). Newer:
        this broker has not heard of it yet (UNKNOWN_LEADER_EPOCH). Both make the client refresh
        its metadata and retry.
        """
        if current_leader_epoch == NO_LEADER_EPOCH:
            return
        if current_leader_epoch < self.leader_epoch:
            raise Errors.FencedLeaderEpochError(
                f"leader epoch {current_leader_epoch} of the request is older than {self.leader_epoch} "
                f"of {self.topic}-{self.index}")
        if current_leader_epoch > self.leader_epoch:
            raise Errors.UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} of the request is newer than {self.leader_epoch} "
                f"of {self.topic}-{self.index}")

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int,
                                     fetch_only_from_leader: bool = True) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)`` of ``leader_epoch`` in this log, (-1, -1) if unknown.

        The fencing check comes first, then leadership (as Kafka's getLocalLog): a follower asks
        the leader where its latest epoch ends, and truncates to that offset.
        """
        self.check_leader_epoch(current_leader_epoch)
        if fetch_only_from_leader and not self.is_leader:
            raise Errors.NotLeaderForPartitionError(f"broker {self.local_broker_id} is not the leader of "
                                                    f"{self.topic}-{self.index}")
        return self.end_offset_for_epoch(leader_epoch)

    # -- leadership (LeaderAndIsr) -----------------------------------------------------------------
    def update_state(self, state: PartitionState) -> None:
        """Apply the controller's state; a new leader epoch (or leadership) starts a leader term."""
        was_leader = self.is_leader
        new_epoch = state.leader_epoch != self.leader_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.adding_replicas = list(state.adding_replicas)
        self.removing_replicas = list(state.removing_replicas)
        self.pending_isr = None
        if self.is_leader and (new_epoch or not was_leader):
            self.make_leader()
            return
        if not self.is_leader:
            self._followers.clear()
        self.maybe_increment_high_watermark()

    def make_leader(self) -> None:
        """A new leader epoch starts at our LEO: followers learn divergence points from it."""
        self.leader_epoch_start_offset = self.log.log_end_offset
        self._on_current_log(lambda lg: lg.assign_epoch_start_offset(self.leader_epoch, lg.log_end_offset))
        self._reset_followers()
        self.maybe_increment_high_watermark()

    def _reset_followers(self) -> None:
        now = _now_ms()
        self._followers = {
            b: FollowerState(last_caught_up_ms=now if b in self.isr else 0)
            for b in self.replicas if b != self.local_broker_id
        }

    # -- high watermark ------------------------------------------------------------------------------
    def maybe_increment_high_watermark(self) -> bool:
        """HW = smallest LEO among (maximal) ISR members; it never moves backwards on the leader."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        me = self.local_broker_id
        isr = self.maximal_isr
        if isr != [me]:  # alone in the ISR (one broker, or the others out): the HW is the LEO
            for b in isr:
                if b != me:
                    follower = self._followers.get(b)
                    new_hw = min(new_hw, follower.log_end_offset if follower else 0)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def append_records_to_leader(self, records: Any, required_acks: int,
                                 origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        if not self.is_leader:
            raise Errors.NotLeaderForPartitionError(f"broker {self.local_broker_id} is not the leader of "
                                                    f"{self.topic}-{self.index}")
        if required_acks == -1:
            min_isr = self.log.config.min_insync_replicas
            if len(self.isr) < min_isr:
                raise Errors.NotEnoughReplicasError(f"{self.topic}-{self.index} has {len(self.isr)} in-sync "
                                                    f"replicas, min.insync.replicas is {min_isr}")
        # A move to another log dir may swap the log while this append waits for its lock.
        info = self._on_current_log(lambda lg: lg.append_as_leader(records, self.leader_epoch, origin=origin))
        self.maybe_increment_high_watermark()
        return info

    # -- followers, as the leader sees them ------------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower's fetch offset is its LEO; returns True if the HW moved (acks=all may complete).

        Caught up (Kafka's rule): the fetch reached our LEO now, or reached the LEO we had at its
        previous fetch, in which case it was caught up as of that previous fetch."""
        if not self.is_leader:
            raise Errors.NotLeaderForPartitionError(f"broker {self.local_broker_id} is not the leader of "
                                                    f"{self.topic}-{self.index}")
        follower = self._followers.get(replica_id)
        if follower is None:
            if replica_id == self.local_broker_id or replica_id not in self.replicas:
                raise Errors.NotLeaderForPartitionError(f"broker {replica_id} is not a follower of "
                                                        f"{self.topic}-{self.index}")
            follower = self._followers[replica_id] = FollowerState()
        now = _now_ms()
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.last_fetch_leader_leo >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_leo_ms)
        follower.last_fetch_leader_leo = leo
        follower.last_fetch_leo_ms = now
        follower.log_end_offset = fetch_offset
        self._maybe_expand_isr(replica_id, fetch_offset)
        return self.maybe_increment_high_watermark()

    def check_high_watermark_reached_epoch_start(self) -> None:
        """OFFSET_NOT_AVAILABLE (retriable) while a new leader's HW is below its epoch's start offset, as
        Kafka's ListOffsets: until the other in-sync replicas fetch, it knows the HW only as its follower did,
        below offsets that were acknowledged; a "latest" offset from it would be stale."""
        if self.is_leader and self.log.high_watermark < self.leader_epoch_start_offset:
            raise Errors.OffsetNotAvailableError(
                f"the high watermark {self.log.high_watermark} of {self.topic}-{self.index} is below the start "
                f"offset {self.leader_epoch_start_offset} of leader epoch {self.leader_epoch}")

    def update_follower_log_start(self, replica_id: int, log_start_offset: int) -> bool:
        """A follower's fetch names its log start offset; True if it moved (DeleteRecords may complete)."""
        follower = self._followers.get(replica_id)
        if follower is None or log_start_offset < 0 or follower.log_start_offset == log_start_offset:
            return False
        follower.log_start_offset = log_start_offset
        return True

    def low_watermark(self) -> int:
        """The smallest log start offset among the ISR (Kafka's low watermark; -1 while a member's is unknown).

        DeleteRecords answers once this passed the offset asked for: every in-sync copy dropped the records."""
        if not self.is_leader:
            raise Errors.NotLeaderForPartitionError(f"broker {self.local_broker_id} is not the leader of "
                                                    f"{self.topic}-{self.index}")
        low = self.log.log_start_offset
        for b in self.isr:
            if b != self.local_broker_id:
                follower = self._followers.get(b)
                low = min(low, follower.log_start_offset if follower is not None else -1)
        return low

    def read_replica_candidates(self, fetch_offset: int) -> list[tuple[int, int, int]]:
        """Followers that could serve a consumer at ``fetch_offset`` now (KIP-392): in the ISR and holding
        the offset, as (broker id, LEO, ms since last caught up). Leader only."""
        if not self.is_leader:
            return []
        now = _now_ms()
        out = []
        for b in self.isr:
            follower = self._followers.get(b)
            if (b != self.local_broker_id and follower is not None
                    and follower.log_end_offset >= fetch_offset >= follower.log_start_offset):
                out.append((b, follower.log_end_offset, max(0, now - follower.last_caught_up_ms)))
        return out

    def _maybe_expand_isr(self, replica_id: int, fetch_offset: int) -> None:
        """A follower rejoins the ISR once it has everything below the HW of the current epoch."""
        if (self.isr_change_sender is None or self.pending_isr is not None or replica_id in self.isr
                or fetch_offset < self.log.high_watermark or fetch_offset < self.leader_epoch_start_offset):
            return
        self._propose_isr(self.isr + [replica_id])

    def maybe_shrink_isr(self, lag_time_max_ms: int) -> list[int]:
        """Drop followers that have not caught up within replica.lag.time.max.ms; returns the ones dropped."""
        if not self.is_leader or self.isr_change_sender is None or self.pending_isr is not None:
            return []
        now = _now_ms()
        out = [b for b in self.isr if b != self.local_broker_id
               and now - self._followers.get(b, FollowerState()).last_caught_up_ms > lag_time_max_ms]
        if out:
            self._propose_isr([b for b in self.isr if b not in out])
        return out

    def _propose_isr(self, new_isr: list[int]) -> None:
        assert self.isr_change_sender is not None
        self.pending_isr = new_isr
        self.isr_change_sender(self, new_isr)

    def on_isr_committed(self, leader_epoch: int, isr: list[int] | None, partition_epoch: int) -> bool:
        """The controller's answer to AlterPartition; None isr = rejected. Returns True if the HW moved."""
        if leader_epoch != self.leader_epoch:
            return False  # an answer for an older epoch: LeaderAndIsr already replaced the state
        self.pending_isr = None
        if isr is not None and partition_epoch >= self.partition_epoch:
            self.isr = list(isr)
            self.partition_epoch = partition_epoch
        return self.maybe_increment_high_watermark()

    # -- follower side -------------------------------------------------------------------------------
    def append_records_as_follower(self, records: Any, leader_high_watermark: int,
                                   leader_log_start_offset: int) -> Any:
        info = self._on_current_log(lambda lg: lg.append_as_follower(records)) if records else None
        self.update_follower_high_watermark(leader_high_watermark, leader_log_start_offset)
        return info

    def truncate_to(self, offset: int) -> bool:
        """Follower divergence: drop everything at/after ``offset``; whether anything changed.
        File work: run it with ``run_on_storage``."""
        return self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower below the leader's log start: drop the whole log and restart it empty at ``offset``.
        File work: run it with ``run_on_storage``."""
        self.log.truncate_fully_and_start_at(offset)

    def update_follower_high_watermark(self, leader_high_watermark: int, leader_log_start_offset: int) -> None:
        """A follower's HW is the leader's, capped at its own LEO; its log start follows the leader's."""
        hw = min(leader_high_watermark, self.log.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.update_high_watermark(hw)
        if self.log.log_start_offset < leader_log_start_offset <= self.log.high_watermark:
            self.log.delete_records(leader_log_start_offset)

    def read_records(self, fetch_offset: int, max_bytes: int, isolation: int, min_one_message: bool,
                     replica_id: int = -1) -> Any:
        max_offset = self.fetch_offset_limit(isolation, replica_id)
        return self.log.read(fetch_offset, max_bytes, max_offset, min_one_message)

    def read_records_up_to(self, fetch_offset: int, max_bytes: int, max_offset: int) -> FetchDataInfo:
        """Batches below ``max_offset`` whatever the HW (Kafka's FetchIsolation.LOG_END with a fixed end):
        a coordinator replays its partition up to the LEO it saw when the load began."""
        return self.log.read(fetch_offset, max_bytes, max_offset, True)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to offset (-1 = the HW); returns the new start."""
        return self.log.delete_records(offset)  # checks the offset against [0, HW]

    def fetch_offset_for_timestamp(self, timestamp: int, isolation: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp: (offset, timestamp) of the first record at or after it, if visible."""
        found = self.log.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= self.fetch_offset_limit(isolation):
            return None
        return found

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int, from_consumer: bool) -> list[int]:
        """ListOffsets v0's answer, as Kafka 3.9 gives it: segment base offsets and the log end offset, newest
        first, at most ``max_num_offsets``, none newer than the last segment written at or before ``timestamp``
        (by file modification time, not record timestamps). A consumer never sees past the high watermark:
        the offsets above it are replaced by the high watermark."""
        offsets = self.log.legacy_fetch_offsets_before(timestamp, max_num_offsets)
        if not from_consumer:
            return offsets
        hw = self.high_watermark
        if offsets and offsets[0] > hw:
            return [hw] + [o for o in offsets if o <= hw]
        return offsets

    # -- transactions --------------------------------------------------------------------------------
    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), for a read_committed fetch."""
        return self.log.collect_aborted_transactions(fetch_offset, upper_bound_offset)

    def active_producers(self) -> list[ProducerStateEntry]:
        """DescribeProducers: the producers the log still tracks (a copy, safe to iterate)."""
        return list(self.log.producer_state.producers.values())
