"""Crashes right after a leader change, now that a new leader's epoch checkpoint is not fsynced (ADR 0047).

A kill -9 keeps what the page cache holds, so it cannot lose an unsynced file; a power loss can, and
leave the checkpoint as it was before the new epoch was assigned. These tests kill -9 a broker and
put that older checkpoint back before restarting it, which is the state a power loss can leave. The
records themselves stay (written to the page cache; a power loss could lose those too, but then
they were never in the log the restarted broker serves, so no answer about them can be wrong).
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.test_faults import wait_converged, write
from tests.integration.test_leader_epoch import epoch_end
from tests.support.checker import check_topic
from tests.support.cluster import ClusterProcess
from tests.support.replicas import create_topic, log_contains, wait_identical_replicas

pytestmark = pytest.mark.cluster

ALL = {1, 2, 3}


def restart_after_session_expiry(cluster: ClusterProcess, broker_id: int) -> None:
    """Start a killed broker once its old session's registration is gone (a broker id still registered
    by another session is refused at start-up, as in Kafka)."""
    cluster.wait_for(lambda: broker_id not in cluster.registered_brokers(), 60,
                     f"broker {broker_id}'s old session expired")
    cluster.start_broker(broker_id)


def test_a_leader_restarted_with_its_checkpoint_from_before_its_epoch_still_truncates_the_old_leader(
    cluster_factory,  # noqa: ANN001
) -> None:
    """The old leader keeps a divergent suffix written in the old epoch; the new leader writes over those
    offsets in its epoch, crashes, and comes back with a checkpoint that does not know its epoch. If it
    trusted that file it would tell the old leader that the old epoch ends at its LEO, and the old
    leader would keep its suffix (replicas differing below the high watermark). The load reads the
    epochs of the unflushed tail from the batches instead: the answer is where the new epoch starts,
    and the replicas converge without the suffix."""
    cluster = cluster_factory(3)
    controller = cluster.controller_id()
    old, new = sorted(ALL - {controller})  # neither freezing nor killing them moves the controller
    topic = create_topic(cluster, config={"min.insync.replicas": "1"}, replicas=[[old, new]])
    before = cluster.partition_state(topic, 0)
    common = write(cluster.bootstrap, topic, "common", 100, "all")
    wait_identical_replicas(cluster, topic, 0, 100, {old, new})
    checkpoint = cluster.log_dir(new) / f"{topic}-0" / "leader-epoch-checkpoint"
    before_leading = checkpoint.read_bytes()

    cluster.sigstop(new)
    try:
        # As in test_faults: a bridge record answers a Fetch the frozen follower may have parked.
        bridge = write(cluster.broker(old).bootstrap, topic, "bridge", 1, "1")
        assert bridge[0].offset == 100
        time.sleep(1.0)  # > replica.fetch.wait.max.ms
        isolated = write(cluster.broker(old).bootstrap, topic, "isolated", 20, "1")
        assert [a.offset for a in isolated] == list(range(101, 121))
        cluster.sigstop(old)
    finally:
        cluster.sigcont(new)
    try:
        first = cluster.wait_leader(topic, 0, not_in={old}, timeout=90)
        assert first.leader == new
        newer = write(cluster.broker(new).bootstrap, topic, "newer", 30, "1")
        start = newer[0].offset
        assert start in (100, 101), start
        assert checkpoint.read_bytes() != before_leading  # the new epoch was written (not fsynced)

        cluster.kill9(new)
        checkpoint.write_bytes(before_leading)  # what a power loss may leave of an unsynced rewrite
        restart_after_session_expiry(cluster, new)
        again = cluster.wait_leader(topic, 0, not_in={old}, timeout=90)
        assert again.leader == new and again.leader_epoch > first.leader_epoch
        # What the old leader will ask: where does its epoch end on the new leader's log?
        answer = cluster.wait_for(lambda: (lambda p: p if p.error_code == 0 else None)(
            epoch_end(cluster.broker(new), topic, before.leader_epoch)), 60, "an OffsetForLeaderEpoch answer")
        assert (answer.leader_epoch, answer.end_offset) == (before.leader_epoch, start)
    finally:
        cluster.sigcont(old)

    hw = wait_converged(cluster, topic, 0, {old, new})
    assert hw == start + 30
    for b in (old, new):
        assert not log_contains(cluster.log_dir(b), topic, 0, b"isolated-"), f"broker {b} kept isolated records"
    report = check_topic(cluster.bootstrap, topic, common + newer)
    assert report.ok and report.consumed == hw, str(report)


def test_acknowledged_records_survive_kill9_of_a_new_leader_right_after_it_takes_over(
    cluster_factory,  # noqa: ANN001
) -> None:
    """Rounds of: kill -9 the leader, let a new one take over and acknowledge records (acks=all), kill -9
    it right away, let the third take over; both come back as followers and truncate by leader epoch.
    Every acknowledged record is there once, and the replicas end identical below the high watermark."""
    cluster = cluster_factory(3)
    topic = create_topic(cluster, config={"min.insync.replicas": "2"})
    acked = write(cluster.bootstrap, topic, "round0", 50, "all")
    for round_ in range(1, 3):
        first = cluster.partition_state(topic, 0).leader
        cluster.kill9(first)
        second = cluster.wait_leader(topic, 0, not_in={first}, timeout=90).leader
        acked += write(cluster.bootstrap, topic, f"round{round_}", 50, "all")
        cluster.kill9(second)
        cluster.wait_leader(topic, 0, not_in={first, second}, timeout=90)
        restart_after_session_expiry(cluster, first)
        restart_after_session_expiry(cluster, second)
        cluster.wait_isr(topic, 0, ALL, timeout=90)
    wait_converged(cluster, topic, 0, ALL)
    report = check_topic(cluster.bootstrap, topic, acked)
    assert report.ok, str(report)
