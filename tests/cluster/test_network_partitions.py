"""Network partitions on a real cluster: links cut between network namespaces, not processes killed.

ZooKeeper and every broker run in their own network namespace (tests/support/netns.py); a cut
silently drops packets between two sides while every process keeps running, which is what a
switch failure looks like and what kill -9 or SIGSTOP cannot show: a leader that is alive,
reachable by clients and still believes it leads. Two idempotent acks=all producers write
sequenced records before, during and after the fault; afterwards every replica must hold the same
log and every acknowledged record must be there exactly once, in order.

The seed picks the victim and how long the cut holds; it is printed, and STROM_NETSPLIT_SEED=<seed>
replays it.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from tests.cluster.test_faults import wait_converged
from tests.support.checker import check_topic
from tests.support.netns import NetnsCluster, NetnsLab, netns_unavailable
from tests.support.replicas import IDEMPOTENT, create_topic
from tests.support.write_gaps import TimedSequenceProducer, gap_report

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ALL = {1, 2, 3}
SESSION_TIMEOUT_MS = 6000


@pytest.fixture(scope="module")
def namespaces() -> None:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(f"network partitions need network namespaces: {reason}")


def run_partition(base_dir: Path, scenario: str, seed: int) -> dict[str, object]:
    """Build a cluster in namespaces, cut links as `scenario` says, heal, and check every acknowledged record."""
    rng = random.Random(seed)
    hold = round(rng.uniform(SESSION_TIMEOUT_MS / 1000 + 2, SESSION_TIMEOUT_MS / 1000 + 8), 1)
    lab = NetnsLab().setup()
    cluster: NetnsCluster | None = None
    writers: list[TimedSequenceProducer] = []
    try:
        with lab.inside():
            cluster = NetnsCluster(base_dir, lab, 3, session_timeout_ms=SESSION_TIMEOUT_MS)
            cluster.start()
            controller = cluster.controller_id()
            others = sorted(ALL - {controller})
            # (a) and (b) spare the controller, whose isolation is a separate defect (controller failover).
            victim = controller if scenario == "zookeeper-one-side" else rng.choice(others)
            a, b = sorted(ALL - {victim})
            if scenario == "follower-isolated":  # the victim follows every partition
                replicas = [[a, victim, b], [b, victim, a], [a, b, victim]]
            else:  # the victim leads partition 0 and follows the others
                replicas = [[victim, a, b], [a, b, victim], [b, victim, a]]
            print(f"{scenario} seed {seed} (STROM_NETSPLIT_SEED={seed} repeats it): victim broker {victim}, "
                  f"controller {controller}, cut for {hold}s, assignment {replicas}")
            topic = create_topic(cluster, config={"min.insync.replicas": "2"}, replicas=replicas)
            writers = [TimedSequenceProducer(cluster.bootstrap, topic, name, IDEMPOTENT, rate_sleep=0.002).start()
                       for name in ("a", "b")]
            for w in writers:
                assert w.wait_acked(200, 60), cluster.describe_failure(f"writer {w.name} before the fault", 60)

            node = f"b{victim}"
            rest = [f"b{x}" for x in (a, b)]
            if scenario == "leader-isolated":  # cut from the followers and ZooKeeper; clients still reach it
                lab.cut([node], [*rest, "zk"])
            elif scenario == "follower-isolated":
                lab.cut([node], [*rest, "zk"])
            elif scenario == "zookeeper-one-side":  # {controller, ZooKeeper} | {the other two brokers}
                lab.cut([node, "zk"], rest)
            else:
                raise AssertionError(scenario)
            cut_at = time.monotonic()
            time.sleep(hold)
            lab.heal()
            heal_at = time.monotonic()

            for w in writers:
                assert w.wait_acked(w.acked_count() + 300, 120), cluster.describe_failure(
                    f"writer {w.name} after the heal", 120)
            cluster.wait_for(lambda: set(cluster.registered_brokers()) == ALL, 60, "every broker registered")
            end = time.monotonic()
            for w in writers:
                w.stop(flush_timeout=120)
            for p in range(len(replicas)):
                wait_converged(cluster, topic, p, ALL, timeout=120)
            for w in writers:
                assert w.unflushed == 0 and not w.errors, (w.name, w.errors[:5])
            report = check_topic(cluster.bootstrap, topic, [x for w in writers for x in w.acked], timeout=90)
            figures = {"scenario": scenario, "seed": seed, "victim": victim, "controller": controller,
                       **gap_report(writers, cut_at, heal_at, end), "acked": report.acked,
                       "lost": report.lost, "duplicated": report.duplicated, "reordered": report.reordered,
                       "unacked_present": report.unacked_present}
            print(json.dumps(figures))
            assert report.lost == report.duplicated == report.reordered == 0, f"seed {seed}: {report}"
            return figures
    finally:
        for w in writers:
            w.stop(flush_timeout=5)
        if cluster is not None:
            cluster.close()
        lab.close()


@pytest.mark.usefixtures("namespaces")
@pytest.mark.parametrize("scenario", ["leader-isolated", "follower-isolated", "zookeeper-one-side"])
def test_network_partition_keeps_every_acknowledged_record_exactly_once(
        tmp_path_factory: pytest.TempPathFactory, scenario: str) -> None:
    seed = int(os.environ.get("STROM_NETSPLIT_SEED") or random.randrange(1 << 32))
    run_partition(tmp_path_factory.mktemp("netsplit"), scenario, seed)
