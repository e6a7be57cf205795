"""Network partitions on a real cluster: links cut between network namespaces, not processes killed.

ZooKeeper and every broker run in their own network namespace (tests/support/netns.py); a cut
silently drops packets between two sides while every process keeps running, which is what a
switch failure looks like and what kill -9 or SIGSTOP cannot show: a leader that is alive,
reachable by clients and still believes it leads. Two idempotent acks=all producers write
sequenced records before, during and after the fault; afterwards every replica must hold the same
log and every acknowledged record must be there exactly once, in order (tests/support/partitions.py).

The seed picks the victim and how long the cut holds; it is printed, and STROM_NETSPLIT_SEED=<seed>
replays it.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from kafka.errors import StaleBrokerEpochError

from strom.protocol.inter_broker import LeaderAndIsrRequest, StopReplicaRequest, build
from tests.integration.test_api_version_matrix import call
from tests.support.netns import netns_unavailable
from tests.support.partitions import figures_only, run_partition

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def namespaces() -> None:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(f"network partitions need network namespaces: {reason}")


def seed() -> int:
    return int(os.environ.get("STROM_NETSPLIT_SEED") or random.randrange(1 << 32))


@pytest.mark.slow
@pytest.mark.usefixtures("namespaces")
@pytest.mark.parametrize("scenario", ["leader-isolated", "follower-isolated", "zookeeper-one-side"])
def test_network_partition_keeps_every_acknowledged_record_exactly_once(
        tmp_path_factory: pytest.TempPathFactory, scenario: str) -> None:
    result = run_partition(tmp_path_factory.mktemp("netsplit"), scenario, seed())
    print(json.dumps(figures_only(result)))
    report = result["report"]
    assert report.lost == report.duplicated == report.reordered == 0, f"seed {result['seed']}: {report}"


@pytest.mark.slow
@pytest.mark.usefixtures("namespaces")
def test_follower_cut_from_its_leaders_drops_the_dead_connection_and_reconnects(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # One broker split from the other two for 15 s while ZooKeeper reaches all three: no session ends, so only
    # replication itself can notice. A fetch sent into the cut must not wait for replica.socket.timeout.ms
    # (30 s) or for TCP's retransmission back-off after the heal: the fetcher sees the connection die and
    # keeps trying to connect, so it is fetching again as soon as the link is back.
    result = run_partition(tmp_path_factory.mktemp("netsplit"), "broker-split", seed(), hold=15.0)
    print(json.dumps(figures_only(result)))
    report = result["report"]
    assert report.lost == report.duplicated == report.reordered == 0, f"seed {result['seed']}: {report}"
    during = result["logged_during_cut"]
    assert "fetching from broker" in during, f"the cut-off follower never noticed its leaders were gone:\n{during}"


def test_a_control_request_carrying_a_newer_broker_epoch_is_applied(cluster_factory) -> None:  # noqa: ANN001
    # Seen after a partition healed: the controller noticed a broker's re-registration (its new znode, whose
    # czxid is the new broker epoch) and sent LeaderAndIsr before ZooKeeper's answer to the create reached the
    # broker. Refused as stale, the broker never learned it was a follower and stayed out of every ISR.
    cluster = cluster_factory(1)
    controller = cluster.wait_controller()
    epoch = cluster.zk.get(f"/brokers/ids/{controller}")[1].czxid
    controller_epoch = cluster.controller_epoch()

    def leader_and_isr(broker_epoch: int) -> int:
        return call(cluster.broker(controller), build(
            LeaderAndIsrRequest, controller_id=controller, is_k_raft_controller=False,
            controller_epoch=controller_epoch, broker_epoch=broker_epoch, request_type=0,
            ungrouped_partition_states=[], topic_states=[], live_leaders=[]), 6).error_code

    def stop_replica(broker_epoch: int) -> int:
        return call(cluster.broker(controller), build(
            StopReplicaRequest, controller_id=controller, is_k_raft_controller=False,
            controller_epoch=controller_epoch, broker_epoch=broker_epoch, ungrouped_partitions=[], topics=[],
            topic_states=[]), 3).error_code

    for send in (leader_and_isr, stop_replica):
        assert send(epoch + 1) == 0, send.__name__
        assert send(epoch) == 0, send.__name__
        assert send(epoch - 1) == StaleBrokerEpochError.errno, send.__name__
