"""The leader's Partition while it is being reassigned: it keeps the adding/removing replicas LeaderAndIsr
names, an adding replica does not hold back the high watermark (or acks=all) before it is in the ISR, and it
is proposed for the ISR once caught up (which is what completes the move at the controller)."""

from __future__ import annotations

import os
import uuid

from strom.broker.partition import Partition
from strom.metadata.store import PartitionState
from strom.protocol.record_batch import build_batch
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

LOCAL = 1


def test_an_adding_replica_counts_only_once_in_sync(tmp_path: str) -> None:
    log = Log(os.path.join(tmp_path, "t-0"), LogConfig.from_props({}), now_ms=0)
    proposals: list[list[int]] = []
    moving = PartitionState(0, LOCAL, 4, [2, 3, LOCAL], [LOCAL, 2], adding_replicas=[3], removing_replicas=[LOCAL])
    part = Partition("t", 0, uuid.uuid4(), moving, log, LOCAL, lambda _p, isr: proposals.append(isr))
    part.make_leader()
    assert (part.adding_replicas, part.removing_replicas) == ([3], [LOCAL])
    part.append_records_to_leader(build_batch([(None, b"v", [], 1_000 + i) for i in range(10)]), required_acks=-1)
    part.update_follower_fetch_state(2, 10)
    assert part.high_watermark == 10  # replica 3 (adding, out of the ISR) has nothing yet: it does not count
    part.update_follower_fetch_state(3, 4)
    assert proposals == [] and part.high_watermark == 10
    part.update_follower_fetch_state(3, 10)
    assert proposals == [[LOCAL, 2, 3]]  # caught up: proposed for the ISR
    part.update_state(PartitionState(0, 2, 5, [2, 3], [2, 3]))  # the move completed: this broker leaves
    assert (part.adding_replicas, part.removing_replicas, part.is_leader) == ([], [], False)
    log.close()
