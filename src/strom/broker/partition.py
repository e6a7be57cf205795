"""One partition as this broker sees it: leader epoch, replicas, ISR, LEO and HW.

The high watermark rule lives here. As in Kafka 3.x the HW is *exclusive*:
it is the offset of the first record not yet replicated to every ISR member,
so consumers read offsets < HW. With a single broker the ISR is the leader
alone and HW = LEO after every append.
"""

from __future__ import annotations

import uuid
from typing import Any

import kafka.errors as Errors

from strom.cluster.metadata import PartitionState
from strom.storage.log import Log


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

    def read_records(self, fetch_offset: int, max_bytes: int, committed_only: bool, min_one_message: bool) -> Any:
        max_offset = self.last_stable_offset if committed_only else self.high_watermark
        return self.log.read(fetch_offset, max_bytes, max_offset, min_one_message)
