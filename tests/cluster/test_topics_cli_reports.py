"""`strom topics --describe` reports, as kafka-topics.sh: under-replicated, unavailable, under and at
min ISR partitions, and topics with overrides, on three brokers with one stopped."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import ClusterProcess

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper, pytest.mark.slow]


def describe(bootstrap: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "topics", "--bootstrap-server", bootstrap,
                           "--describe", *flags], capture_output=True, text=True, timeout=120)


def partitions(out: str) -> set[tuple[str, int]]:
    return {(m[0], int(m[1])) for m in re.findall(r"\tTopic: (\S+)\tPartition: (\d+)\t", out)}


def test_describe_reports_select_partitions_as_kafka_topics_does(cluster_factory) -> None:
    cluster: ClusterProcess = cluster_factory(3)
    tag = uuid.uuid4().hex[:6]
    at_min, under_min, alone, healthy = (f"{n}-{tag}" for n in ("at-min", "under-min", "alone", "healthy"))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    victim = next(b for b in (1, 2, 3) if b != cluster.controller_id())
    rest = sorted({1, 2, 3} - {victim})
    futures = admin.create_topics([
        NewTopic(at_min, 1, replica_assignment=[[victim, *rest]], config={"min.insync.replicas": "2"}),
        NewTopic(under_min, 1, replica_assignment=[[*rest, victim]], config={"min.insync.replicas": "3"}),
        NewTopic(alone, 1, replica_assignment=[[victim]]),
        NewTopic(healthy, 1, replica_assignment=[rest]),
    ])
    for future in futures.values():
        future.result(30)
    for topic in (at_min, under_min):
        cluster.wait_isr(topic, 0, [1, 2, 3])
    cluster.wait_isr(healthy, 0, rest)

    before = describe(cluster.bootstrap, "--under-replicated-partitions")
    assert before.returncode == 0 and not partitions(before.stdout) & {(t, 0) for t in (at_min, under_min)}

    cluster.stop(victim)  # controlled shutdown: the controller drops it from every ISR at once
    for topic in (at_min, under_min):
        cluster.wait_isr(topic, 0, rest)
    bootstrap = ",".join(cluster.broker(b).bootstrap for b in rest)

    def reported(flag: str) -> set[tuple[str, int]]:
        result = describe(bootstrap, flag)
        assert result.returncode == 0, result.stderr
        assert "PartitionCount" not in result.stdout  # only partition lines, as kafka-topics.sh
        return {tp for tp in partitions(result.stdout) if tp[0].endswith(tag)}

    def settled() -> bool:  # every broker learns the ISR changes from the controller shortly after
        return reported("--under-replicated-partitions") == {(at_min, 0), (under_min, 0)}

    cluster.wait_for(settled, 30, "both RF 3 partitions reported under-replicated")
    assert reported("--under-min-isr-partitions") == {(under_min, 0), (alone, 0)}  # no leader counts too
    assert reported("--at-min-isr-partitions") == {(at_min, 0)}  # not the leaderless one (its last ISR: 1)
    assert reported("--unavailable-partitions") == {(alone, 0)}

    overrides = describe(bootstrap, "--topics-with-overrides")
    assert overrides.returncode == 0, overrides.stderr
    shown = set(re.findall(r"^Topic: (\S+)\t", overrides.stdout, re.M)) & {at_min, under_min, alone, healthy}
    assert shown == {at_min, under_min} and "\tPartition:" not in overrides.stdout

    both = describe(bootstrap, "--under-replicated-partitions", "--unavailable-partitions")
    assert both.returncode != 0 and "Only one of" in both.stderr
    listing = subprocess.run([sys.executable, "-m", "strom.cli.main", "topics", "--bootstrap-server", bootstrap,
                              "--list", "--under-replicated-partitions"], capture_output=True, text=True, timeout=60)
    assert listing.returncode != 0 and "works with --describe only" in listing.stderr
