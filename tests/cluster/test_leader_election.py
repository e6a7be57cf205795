"""Preferred leader election through the ElectLeaders API and `strom leader-election`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cluster import ClusterProcess
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster


def test_leader_election_moves_leadership_back_to_the_preferred_replica(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    topic = create_topic(cluster)
    preferred = cluster.topic_assignment(topic)[0][0]
    assert cluster.partition_state(topic, 0).leader == preferred
    cluster.stop(preferred)  # controlled shutdown: leadership moves to another in-sync replica
    moved = cluster.wait_leader(topic, 0, not_in=(preferred,), timeout=60)
    cluster.start_broker(preferred)
    cluster.wait_isr(topic, 0, {1, 2, 3}, timeout=60)
    assert cluster.partition_state(topic, 0).leader == moved.leader  # no automatic move back

    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "leader-election", "--bootstrap-server",
                          cluster.bootstrap, "--election-type", "preferred", "--topic", topic],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Successfully completed leader election (preferred) for partitions {topic}-0" in out.stdout
    state = cluster.wait_for(lambda: (s := cluster.partition_state(topic, 0)) and s.leader == preferred and s,
                             60, "leadership back on the preferred replica")
    assert state.leader_epoch > moved.leader_epoch

    again = subprocess.run([sys.executable, "-m", "strom.cli.main", "leader-election", "--bootstrap-server",
                            cluster.bootstrap, "--election-type", "preferred", "--topic", topic],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Valid replica already elected" in again.stdout
