"""One partition as this broker sees it: leader epoch, replicas, ISR, LEO and HW.

The high watermark rule lives here. As in Kafka 3.x the HW is *exclusive*:
it is the offset of the first record not yet replicated to every ISR member,
so consumers read offsets < HW. With a single broker the ISR is the leader
alone and HW = LEO after every append.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import kafka.errors as Errors

from strom.cluster.metadata import PartitionState
from strom.storage.log import Log

# FetchRequest / ListOffsetsRequest isolation_level.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
# current_leader_epoch of Fetch, ListOffsets and OffsetForLeaderEpoch: the client does not fence.
NO_LEADER_EPOCH = -1


class Partition:
    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, state: PartitionState, log: Log,
                 local_broker_id: int) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        # LEO of each follower as last reported by its fetches (replication comes later).
        self._follower_leo: dict[int, int] = {}
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
        # No transactions yet: every record below the HW is stable.
        return self.log.high_watermark

    @property
    def isr_size(self) -> int:
        return len(self.isr)

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    @property
    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    @property
    def log_dir(self) -> str:
        """The log dir (not the partition dir) holding this partition."""
        return os.path.dirname(self.log.directory)

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
        return self.log.end_offset_for_epoch(leader_epoch)

    def update_state(self, state: PartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> None:
        """HW = smallest LEO among ISR members; it never moves backwards on the leader."""
        if not self.is_leader:
            return
        leos = [self.log.log_end_offset]
        leos += [self._follower_leo.get(b, 0) for b in self.isr if b != self.local_broker_id]
        new_hw = min(leos)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)

    def append_records_to_leader(self, records: Any, required_acks: int) -> Any:
        if not self.is_leader:
            raise Errors.NotLeaderForPartitionError(f"broker {self.local_broker_id} is not the leader of "
                                                    f"{self.topic}-{self.index}")
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise Errors.NotEnoughReplicasError(
                f"{self.topic}-{self.index} has {len(self.isr)} in-sync replicas, min.insync.replicas is {min_isr}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch)
        self.maybe_increment_high_watermark()
        return info

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower's fetch offset is its LEO; returns True if the HW moved (acks=all may complete)."""
        if replica_id == self.local_broker_id or replica_id not in self.replicas:
            raise Errors.NotLeaderForPartitionError(f"broker {replica_id} is not a follower of "
                                                    f"{self.topic}-{self.index}")
        self._follower_leo[replica_id] = fetch_offset
        old = self.log.high_watermark
        self.maybe_increment_high_watermark()
        return self.log.high_watermark != old

    def read_records(self, fetch_offset: int, max_bytes: int, isolation: int, min_one_message: bool,
                     replica_id: int = -1) -> Any:
        max_offset = self.fetch_offset_limit(isolation, replica_id)
        return self.log.read(fetch_offset, max_bytes, max_offset, min_one_message)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to offset (-1 = the HW); returns the new start."""
        return self.log.delete_records(offset)  # checks the offset against [0, HW]

    def fetch_offset_for_timestamp(self, timestamp: int, isolation: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp: (offset, timestamp) of the first record at or after it, if visible."""
        found = self.log.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= self.fetch_offset_limit(isolation):
            return None
        return found
