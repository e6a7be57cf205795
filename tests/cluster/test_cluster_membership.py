"""Growing and shrinking a running `strom cluster up`: add-broker, then retire-broker under load.

One real cluster of three brokers: retiring one is refused while every topic needs all three; a
fourth broker is added (registered, holding nothing) and given a partition with
`strom reassign-partitions`; then broker 2 is retired while an acks=all producer writes, and the
checker reads back every acknowledged record from the brokers that remain.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from strom.metadata.zk.zookeeper_server import free_port
from tests.cluster.test_cluster_cli import CliProcess, free_port_run, kill_leftovers, started_pids, strom
from tests.support.checker import SequenceProducer, check_topic
from tests.support.cluster import pid_alive

pytestmark = pytest.mark.cluster

BOUND = 240.0  # seconds: generous on a loaded 2-core machine; never an assertion on time


def assignments(zk: KazooClient) -> dict[str, dict[int, list[int]]]:
    out = {}
    for topic in zk.get_children("/brokers/topics"):
        data, _ = zk.get(f"/brokers/topics/{topic}")
        out[topic] = {int(p): r for p, r in json.loads(data)["partitions"].items()}
    return out


def test_add_a_broker_move_a_partition_to_it_then_retire_another_under_load(tmp_path: Path) -> None:
    base, zk_port = free_port_run(4), free_port()
    addresses = [f"127.0.0.1:{base + i}" for i in range(4)]
    cli = CliProcess("--brokers", "3", "--data-dir", str(tmp_path), "--base-port", str(base),
                     "--zookeeper-port", str(zk_port), "--metrics-base-port", "0",
                     "--override", "auto.leader.rebalance.enable=false")
    pids: dict[str, int] = {}
    zk = KazooClient(hosts=f"127.0.0.1:{zk_port}/strom")
    producer: SequenceProducer | None = None
    try:
        pids = started_pids(cli, 90)
        cli.wait_line(r"Bootstrap servers: ", 120)
        bootstrap = ",".join(addresses[:3])
        created = strom("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "grow", "--partitions",
                        "4", "--replication-factor", "3", "--config", "min.insync.replicas=2")
        assert created.returncode == 0, created.stderr
        zk.start(timeout=15)

        refused = strom("cluster", "retire-broker", "2", "--data-dir", str(tmp_path))
        assert refused.returncode == 1, refused
        assert re.fullmatch(r"Error: Cannot retire broker 2: topic '\S+' has replication factor 3 but only 2 "
                            r"broker\(s\) would remain \(1,3\); add a broker first .*\n", refused.stderr), refused.stderr
        assert pid_alive(pids["broker.2"])

        added = strom("cluster", "add-broker", "--data-dir", str(tmp_path), timeout=240)
        assert added.returncode == 0, added.stderr
        match = re.match(rf"broker 4 added \(pid (\d+), {addresses[3]}\)\n", added.stdout)
        assert match, added.stdout
        pids["broker.4"] = int(match.group(1))
        assert "It holds no replicas yet" in added.stdout
        assert "--broker-list 1,2,3,4" in added.stdout and "strom reassign-partitions" in added.stdout
        assert sorted(int(b) for b in zk.get_children("/brokers/ids")) == [1, 2, 3, 4]
        assert json.loads((tmp_path / "cluster.json").read_text())["brokers"]["4"]["state"] == "running"
        assert not any(4 in r for a in assignments(zk).values() for r in a.values())  # nothing moves by itself

        # Give partition 0 to broker 4 in place of its last replica.
        replicas = assignments(zk)["grow"][0]
        target = [*replicas[:2], 4]
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "grow", "partition": 0,
                                                                  "replicas": target}]}))
        executed = strom("reassign-partitions", "--bootstrap-server", bootstrap, "--execute",
                         "--reassignment-json-file", str(plan))
        assert executed.returncode == 0, executed.stderr
        deadline = time.monotonic() + BOUND
        while "is completed" not in (verified := strom("reassign-partitions", "--bootstrap-server", bootstrap,
                                                       "--verify", "--reassignment-json-file", str(plan))).stdout:
            assert verified.returncode == 0 and time.monotonic() < deadline, verified
            time.sleep(1)
        assert assignments(zk)["grow"][0] == target

        producer = SequenceProducer(",".join(addresses), "grow", config={"acks": "all", "enable.idempotence": True},
                                    rate_sleep=0.002).start()
        assert producer.wait_acked(300, BOUND), producer.errors[:5]
        retired = strom("cluster", "retire-broker", "2", "--data-dir", str(tmp_path), "--throttle", "20000000",
                        timeout=BOUND + 120)
        assert retired.returncode == 0, (retired.stdout, retired.stderr)
        assert re.search(r"retire-broker: moved (\d+)/\1 partition\(s\) off broker 2", retired.stdout), retired.stdout
        assert "broker 2 stopped (exited with status 0) and removed from the cluster" in retired.stdout
        acked_then = producer.acked_count()
        assert producer.wait_acked(acked_then + 300, BOUND), producer.errors[:5]  # still writing afterwards
        producer.stop()

        assert not pid_alive(pids["broker.2"])
        assert sorted(int(b) for b in zk.get_children("/brokers/ids")) == [1, 3, 4]
        left_on_2 = {t: a for t, a in assignments(zk).items() if any(2 in r for r in a.values())}
        assert left_on_2 == {}, left_on_2
        assert all(len(r) == 3 for r in assignments(zk)["grow"].values())  # replication factor kept
        state = json.loads((tmp_path / "cluster.json").read_text())
        assert sorted(state["brokers"], key=int) == ["1", "3", "4"]
        throttles = [zk.get(f"/config/brokers/{b}")[0] for b in ("1", "3", "4") if zk.exists(f"/config/brokers/{b}")]
        assert not any(b"throttled" in data for data in throttles), throttles
        remaining = ",".join(addresses[i] for i in (0, 2, 3))
        report = check_topic(remaining, "grow", producer.acked, timeout=120)
        assert report.ok and report.acked == producer.acked_count(), report

        os.kill(cli.proc.pid, signal.SIGINT)
        assert cli.wait(180) == 0, cli.output()
        alive = [name for name, pid in pids.items() if pid_alive(pid)]
        assert alive == [], f"still running after exit: {alive}\n{cli.output()}"
    finally:
        if producer is not None:
            producer.stop(flush_timeout=5)
        zk.stop()
        zk.close()
        cli.kill()
        kill_leftovers(pids)
