"""Network-partition scenarios on a cluster in namespaces, shared by the test and bench/bench_netsplit.py.

Each run builds its own cluster (tests/support/netns.py), lets two idempotent acks=all producers
write sequenced records, cuts links as the scenario says, heals, waits for the writers to make
progress and every replica to hold the same log, then checks every acknowledged record with the
fault campaign's checker. It returns the figures (write gaps per partition) and what the victim
logged while cut off.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from tests.cluster.test_faults import wait_converged
from tests.support.checker import check_topic
from tests.support.netns import NetnsCluster, NetnsLab
from tests.support.replicas import IDEMPOTENT, create_topic
from tests.support.write_gaps import TimedSequenceProducer, gap_report

ALL = {1, 2, 3}
SESSION_TIMEOUT_MS = 6000
SCENARIOS = ("leader-isolated", "follower-isolated", "zookeeper-one-side", "broker-split", "controller-isolated")


def run_partition(base_dir: Path, scenario: str, seed: int, hold: float | None = None,
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one scenario; `hold` (seconds the cut lasts) defaults to a seeded value past the session timeout.

    - leader-isolated: the leader of partition 0 is cut from its followers and ZooKeeper, clients still reach it;
    - follower-isolated: a broker that only follows is cut from the other brokers and ZooKeeper;
    - zookeeper-one-side: {controller, ZooKeeper} | {the other two brokers};
    - broker-split: one broker is cut from the other two, ZooKeeper reaches everyone (no session ends);
    - controller-isolated: the controller (leader of partition 0) is cut from the other brokers and ZooKeeper.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {SCENARIOS}")
    rng = random.Random(seed)
    seeded_hold = round(rng.uniform(SESSION_TIMEOUT_MS / 1000 + 2, SESSION_TIMEOUT_MS / 1000 + 8), 1)
    hold = seeded_hold if hold is None else hold
    lab = NetnsLab().setup()
    cluster: NetnsCluster | None = None
    writers: list[TimedSequenceProducer] = []
    try:
        with lab.inside():
            cluster = NetnsCluster(base_dir, lab, 3, session_timeout_ms=SESSION_TIMEOUT_MS)
            for broker in cluster.brokers.values():
                broker.env.update(env or {})
            cluster.start()
            controller = cluster.controller_id()
            assert controller is not None
            # Otherwise the controller is spared: its isolation is a controller-failover matter of its own.
            on_controller = scenario in ("zookeeper-one-side", "controller-isolated")
            victim = controller if on_controller else rng.choice(sorted(ALL - {controller}))
            a, b = sorted(ALL - {victim})
            if scenario == "follower-isolated":  # the victim follows every partition
                replicas = [[a, victim, b], [b, victim, a], [a, b, victim]]
            else:  # the victim leads partition 0 and follows the others
                replicas = [[victim, a, b], [a, b, victim], [b, victim, a]]
            print(f"{scenario} seed {seed} (STROM_NETSPLIT_SEED={seed} repeats it): victim broker {victim}, "
                  f"controller {controller}, cut for {hold}s, assignment {replicas}", flush=True)
            topic = create_topic(cluster, config={"min.insync.replicas": "2"}, replicas=replicas)
            writers = [TimedSequenceProducer(cluster.bootstrap, topic, name, IDEMPOTENT, rate_sleep=0.002).start()
                       for name in ("a", "b")]
            for w in writers:
                assert w.wait_acked(200, 60), cluster.describe_failure(f"writer {w.name} before the fault", 60)

            node, rest = f"b{victim}", [f"b{a}", f"b{b}"]
            if scenario in ("leader-isolated", "follower-isolated", "controller-isolated"):
                lab.cut([node], [*rest, "zk"])
            elif scenario == "zookeeper-one-side":
                lab.cut([node, "zk"], rest)
            else:
                lab.cut([node], rest)
            victim_log = cluster.broker(victim).log_path
            log_offset = victim_log.stat().st_size
            cut_at = time.monotonic()
            time.sleep(hold)
            with victim_log.open("rb") as f:
                f.seek(log_offset)
                logged_during_cut = f.read().decode(errors="replace")
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
            return {"scenario": scenario, "seed": seed, "victim": victim, "controller": controller,
                    **gap_report(writers, cut_at, heal_at, end), "acked": report.acked, "lost": report.lost,
                    "duplicated": report.duplicated, "reordered": report.reordered,
                    "unacked_present": report.unacked_present, "report": report,
                    "logged_during_cut": logged_during_cut}
    finally:
        for w in writers:
            w.stop(flush_timeout=5)
        if cluster is not None:
            cluster.close()
        lab.close()


def figures_only(result: dict[str, Any]) -> dict[str, Any]:
    """The JSON-printable part of a run's result."""
    return {k: v for k, v in result.items() if k not in ("report", "logged_during_cut")}
