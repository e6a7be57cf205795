"""`strom reassign-partitions` as an operator runs it: a subprocess against a real 3-broker cluster.

The brokers carry `broker.rack` (1 and 2 in rack a, 3 in rack b) so that `--generate` must spread
every partition over both racks. What the tool claims is checked against ZooKeeper (replica sets,
the dynamic throttle configs under /config) and against the records a real consumer reads back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.checker import SequenceProducer, check_topic
from tests.support.cluster import ClusterProcess
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster

BOUND = 180.0  # seconds: generous on a loaded 2-core machine; never an assertion on time
RACKS = {1: "a", 2: "a", 3: "b"}


@pytest.fixture(scope="module")
def racked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    # A long session so that a broker paused with SIGSTOP stays registered while a move to it is cancelled.
    base = tmp_path_factory.mktemp("racked")
    overrides: dict[int, dict[str, object]] = {b: {"broker.rack": r} for b, r in RACKS.items()}
    overrides[3]["log.dirs"] = f"{base / 'broker-3' / 'data'},{second_log_dir(base)}"  # JBOD: two log dirs
    cluster = ClusterProcess(base, 3, session_timeout_ms=30000, overrides={"auto.leader.rebalance.enable": "false"},
                             broker_overrides=overrides)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


def second_log_dir(base: Path) -> Path:
    return base / "broker-3-second"


def strom(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "reassign-partitions", *args],
                          capture_output=True, text=True, timeout=timeout)


def json_after(output: str, heading: str) -> dict:
    lines = output.splitlines()
    index = lines.index(heading)
    return json.loads(next(line for line in lines[index + 1:] if line.strip()))


def as_assignment(doc: dict) -> dict[tuple[str, int], list[int]]:
    return {(p["topic"], p["partition"]): p["replicas"] for p in doc["partitions"]}


def write_json(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def zk_config(cluster: ClusterProcess, kind: str, name: str) -> dict[str, str]:
    """Dynamic configs as the brokers stored them (`/config/brokers/<id>`, `/config/topics/<t>`)."""
    if cluster.zk.exists(f"/config/{kind}/{name}") is None:
        return {}
    data, _ = cluster.zk.get(f"/config/{kind}/{name}")
    return json.loads(data).get("config", {}) if data else {}


def test_generate_proposes_a_rack_aware_plan_and_moves_nothing(racked: ClusterProcess, tmp_path: Path) -> None:
    topics = [create_topic(racked, partitions=6, replication_factor=2), create_topic(racked, 3, 1)]
    before = {t: racked.topic_assignment(t) for t in topics}
    to_move = write_json(tmp_path / "topics.json", {"version": 1, "topics": [{"topic": t} for t in topics]})

    out = strom("--bootstrap-server", racked.bootstrap, "--generate", "--topics-to-move-json-file", str(to_move),
                "--broker-list", "1,2,3")
    assert out.returncode == 0, out.stderr
    current = as_assignment(json_after(out.stdout, "Current partition replica assignment"))
    proposed_doc = json_after(out.stdout, "Proposed partition reassignment configuration")
    proposed = as_assignment(proposed_doc)
    assert current == {(t, p): r for t in topics for p, r in before[t].items()}
    assert set(proposed) == set(current)
    for (topic, _), replicas in proposed.items():
        assert len(replicas) == len(before[topic][0]) and len(set(replicas)) == len(replicas)
        if len(replicas) == 2:
            assert {RACKS[b] for b in replicas} == {"a", "b"}, proposed  # one replica per rack
    assert all(p["log_dirs"] == ["any"] * len(p["replicas"]) for p in proposed_doc["partitions"])
    assert {t: racked.topic_assignment(t) for t in topics} == before  # --generate changes nothing

    only_rack_a = strom("--bootstrap-server", racked.bootstrap, "--generate", "--topics-to-move-json-file",
                        str(to_move), "--broker-list", "1,2", "--disable-rack-aware")
    assert only_rack_a.returncode == 0, only_rack_a.stderr
    plan = as_assignment(json_after(only_rack_a.stdout, "Proposed partition reassignment configuration"))
    assert {b for replicas in plan.values() for b in replicas} == {1, 2}


def test_bad_input_is_one_clear_line(racked: ClusterProcess, tmp_path: Path) -> None:
    topic = create_topic(racked, replicas=[[1, 2]])
    bootstrap = ("--bootstrap-server", racked.bootstrap)

    def refused(*args: str) -> str:
        out = strom(*args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr and out.stderr.startswith("Error: "), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        return out.stderr

    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 1, "partitions": [')
    assert "is not valid JSON" in refused(*bootstrap, "--execute", "--reassignment-json-file", str(broken))
    assert "does not exist" in refused(*bootstrap, "--verify", "--reassignment-json-file", str(tmp_path / "no.json"))
    entry = {"topic": topic, "partition": 0, "replicas": [1, 2]}
    doubled = write_json(tmp_path / "doubled.json", {"version": 1, "partitions": [{**entry, "replicas": [1, 1]}]})
    assert "names broker(s) 1 more than once" in refused(*bootstrap, "--execute", "--reassignment-json-file",
                                                          str(doubled))
    dirs = write_json(tmp_path / "dirs.json", {"version": 1, "partitions": [{**entry, "log_dirs": ["any"]}]})
    assert "2 replicas but 1 \"log_dirs\" entries" in refused(*bootstrap, "--execute", "--reassignment-json-file",
                                                              str(dirs))
    unknown_topic = write_json(tmp_path / "t.json", {"version": 1, "partitions": [{**entry, "topic": "nope"}]})
    assert "Topic 'nope' does not exist" in refused(*bootstrap, "--execute", "--reassignment-json-file",
                                                    str(unknown_topic))
    no_partition = write_json(tmp_path / "p.json", {"version": 1, "partitions": [{**entry, "partition": 5}]})
    assert f"Partition {topic}-5 does not exist" in refused(*bootstrap, "--execute", "--reassignment-json-file",
                                                             str(no_partition))
    bad_broker = write_json(tmp_path / "b.json", {"version": 1, "partitions": [{**entry, "replicas": [1, 7]}]})
    assert "Unknown broker id(s) 7" in refused(*bootstrap, "--execute", "--reassignment-json-file", str(bad_broker))
    topics = write_json(tmp_path / "topics.json", {"version": 1, "topics": [{"topic": topic}]})
    assert "Unknown broker id(s) 9" in refused(*bootstrap, "--generate", "--topics-to-move-json-file", str(topics),
                                               "--broker-list", "1,9")
    assert "Invalid --broker-list" in refused(*bootstrap, "--generate", "--topics-to-move-json-file", str(topics),
                                              "--broker-list", "1,x")
    assert "replication factor 2 but --broker-list names only 1" in refused(
        *bootstrap, "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "3")
    no_topics = write_json(tmp_path / "none.json", {"version": 1, "topics": [{"topic": "nope"}]})
    assert "Topic 'nope' does not exist" in refused(*bootstrap, "--generate", "--topics-to-move-json-file",
                                                    str(no_topics), "--broker-list", "1,2")
    nowhere = write_json(tmp_path / "l.json", {"version": 1, "partitions": [{**entry, "log_dirs": ["any", "/no/dir"]}]})
    assert f"Broker 2 has no online log dir /no/dir (its log dirs: {racked.log_dir(2)})" in refused(
        *bootstrap, "--execute", "--reassignment-json-file", str(nowhere))
    relative = write_json(tmp_path / "r.json", {"version": 1, "partitions": [{**entry, "log_dirs": ["any", "x"]}]})
    assert "a log dir must be an absolute path or \"any\"" in refused(*bootstrap, "--execute",
                                                                       "--reassignment-json-file", str(relative))
    assert "exactly one action" in refused(*bootstrap, "--verify", "--list")
    assert "needs --reassignment-json-file" in refused(*bootstrap, "--cancel")
    no_timeout = tmp_path / "no-timeout.properties"
    no_timeout.write_text("request.timeout.ms=soon\n")
    assert "request.timeout.ms=soon is not a positive number" in refused(*bootstrap, "--command-config",
                                                                         str(no_timeout), "--list")
    assert racked.topic_assignment(topic) == {0: [1, 2]}  # nothing was moved by any of it


def test_execute_then_verify_moves_a_partition_and_clears_the_throttles(racked: ClusterProcess,
                                                                        tmp_path: Path) -> None:
    topic = create_topic(racked, replicas=[[1, 2]], config={"min.insync.replicas": "2"})
    producer = SequenceProducer(racked.bootstrap, topic, config={"acks": "all", "enable.idempotence": True})
    producer.produce_some(500)
    plan = write_json(tmp_path / "plan.json",
                      {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 3]}]})

    out = strom("--bootstrap-server", racked.bootstrap, "--execute", "--reassignment-json-file", str(plan),
                "--throttle", "20000000")
    assert out.returncode == 0, out.stderr
    rollback = json_after(out.stdout, "Current partition replica assignment")
    assert as_assignment(rollback) == {(topic, 0): [1, 2]}
    assert "Save this to use as the --reassignment-json-file option during rollback" in out.stdout
    assert f"Successfully started partition reassignment for {topic}-0" in out.stdout
    assert "The inter-broker throttle limit was set to 20000000 B/s" in out.stdout
    for broker in (1, 2, 3):
        configs = zk_config(racked, "brokers", str(broker))
        assert configs.get("leader.replication.throttled.rate") == "20000000", (broker, configs)
        assert configs.get("follower.replication.throttled.rate") == "20000000", (broker, configs)
    topic_configs = zk_config(racked, "topics", topic)
    assert topic_configs.get("leader.replication.throttled.replicas") == "0:1,0:2", topic_configs
    assert topic_configs.get("follower.replication.throttled.replicas") == "0:3", topic_configs

    deadline = time.monotonic() + BOUND
    while True:
        verify = strom("--bootstrap-server", racked.bootstrap, "--verify", "--reassignment-json-file", str(plan))
        assert verify.returncode == 0, verify.stderr
        if f"Reassignment of partition {topic}-0 is completed." in verify.stdout:
            break
        assert f"Reassignment of partition {topic}-0 is still in progress." in verify.stdout, verify.stdout
        assert "Clearing" not in verify.stdout  # throttles stay while anything moves
        assert time.monotonic() < deadline, verify.stdout
        time.sleep(1)
    assert "Clearing broker-level throttles on brokers 1,2,3" in verify.stdout, verify.stdout
    assert f"Clearing topic-level throttles on topic {topic}" in verify.stdout
    assert racked.topic_assignment(topic) == {0: [2, 3]}
    for broker in (1, 2, 3):
        assert not any("throttled" in k for k in zk_config(racked, "brokers", str(broker))), broker
    assert not any("throttled" in k for k in zk_config(racked, "topics", topic))
    assert zk_config(racked, "topics", topic).get("min.insync.replicas") == "2"  # the topic's own config stays
    report = check_topic(racked.bootstrap, topic, producer.acked)  # from the new replica set
    assert report.ok and report.acked == 500, report
    assert any((d / f"{topic}-0").is_dir() for d in (racked.log_dir(3), second_log_dir(racked.base_dir)))
    racked.wait_for(lambda: not (racked.log_dir(1) / f"{topic}-0").exists(), BOUND, "broker 1's replica deleted")


def test_list_and_cancel_a_move_that_cannot_finish(racked: ClusterProcess, tmp_path: Path) -> None:
    controller = racked.controller_id()
    assert controller is not None
    stalled = max(b for b in (1, 2, 3) if b != controller)
    keep = [b for b in (1, 2, 3) if b != stalled]
    topic = create_topic(racked, replicas=[keep])
    plan = write_json(tmp_path / "plan.json",
                      {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [keep[0], stalled]}]})
    bootstrap = ("--bootstrap-server", racked.broker(controller).bootstrap)

    nothing = strom(*bootstrap, "--list")
    assert nothing.returncode == 0 and nothing.stdout == "No partition reassignments found.\n", nothing
    racked.sigstop(stalled)  # still registered (long session) but copies nothing: the move cannot complete
    try:
        out = strom(*bootstrap, "--execute", "--reassignment-json-file", str(plan))
        assert out.returncode == 0, out.stderr
        listed = strom(*bootstrap, "--list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout == (f"Current partition reassignments:\n{topic}-0: replicas: "
                                 f"{keep[0]},{stalled},{keep[1]}. adding: {stalled}. removing: {keep[1]}.\n"), listed
        again = strom(*bootstrap, "--execute", "--reassignment-json-file", str(plan))
        assert again.returncode == 1 and "Cannot execute because there are partition reassignments in progress" \
            in again.stderr, again
        # A short request timeout (--command-config, as Kafka's tool takes it) gives up on the paused broker
        # after 5 s instead of the default 30 s.
        short = tmp_path / "short-timeout.properties"
        short.write_text("request.timeout.ms=5000\n")
        cancelled = strom(*bootstrap, "--command-config", str(short), "--cancel", "--reassignment-json-file",
                          str(plan))
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in cancelled.stdout
        # The paused broker cannot drop its own throttle configs: said so, the rest is done.
        assert f"The throttle of broker {stalled} stays until this is run again" in cancelled.stderr, cancelled
    finally:
        racked.sigcont(stalled)
    assert racked.topic_assignment(topic) == {0: keep}
    assert strom(*bootstrap, "--list").stdout == "No partition reassignments found.\n"
    racked.wait_isr(topic, 0, keep, timeout=BOUND)
    again = strom(*bootstrap, "--cancel", "--reassignment-json-file", str(plan))
    assert again.returncode == 0 and "None of the specified partition reassignments are active." in again.stdout


def test_execute_puts_replicas_in_the_log_dirs_asked_for(racked: ClusterProcess, tmp_path: Path) -> None:
    """A new replica is created in the log dir the plan names, then moved to the broker's other log dir."""
    topic = create_topic(racked, replicas=[[1, 2]])
    producer = SequenceProducer(racked.bootstrap, topic, config={"acks": "all"})
    producer.produce_some(200)
    dirs = [racked.log_dir(3), second_log_dir(racked.base_dir)]
    for step, (there, elsewhere) in enumerate((dirs, dirs[::-1])):
        plan = write_json(tmp_path / f"plan{step}.json", {"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [1, 3], "log_dirs": ["any", str(there)]}]})
        out = strom("--bootstrap-server", racked.bootstrap, "--execute", "--reassignment-json-file", str(plan))
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + BOUND
        while True:
            verify = strom("--bootstrap-server", racked.bootstrap, "--verify", "--reassignment-json-file", str(plan))
            assert verify.returncode == 0, verify.stderr
            if "is still in progress" not in verify.stdout:
                break
            assert time.monotonic() < deadline, verify.stdout
            time.sleep(1)
        assert f"Reassignment of partition {topic}-0 is completed." in verify.stdout, verify.stdout
        assert f"Reassignment of replica {topic}-0 on broker 3 to log dir {there} is completed." in verify.stdout
        racked.wait_for(lambda there=there, elsewhere=elsewhere: (there / f"{topic}-0").is_dir()
                        and not (elsewhere / f"{topic}-0").exists(), BOUND, f"the replica only in {there}")
    report = check_topic(racked.bootstrap, topic, producer.acked)
    assert report.ok and report.acked == 200, report
