"""Missing or foreign metadata never costs data: refusals, stray logs set aside, one broker per log dir."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from strom.storage.partition_metadata import encode_topic_id, read_topic_id, write_topic_id
from tests.integration.test_produce_consume import consume_all, new_topic, produce
from tests.support.broker import BrokerProcess

METADATA = "__cluster_metadata.json"


def values(n: int, prefix: str = "r") -> list[dict]:
    return [{"value": f"{prefix}{i}".encode(), "partition": i % 2} for i in range(n)]


def refused(b: BrokerProcess, *extra: str) -> str:
    """Run the broker's command expecting a clean refusal: status 2, one message, no traceback."""
    cmd = b.command() + [a for kv in extra for a in ("--override", kv)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=os.environ)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    return res.stderr


def storage_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "storage", *args], capture_output=True,
                          text=True, timeout=60, env=os.environ)


def segment_bytes(data_dir: str, topic: str) -> dict[str, bytes]:
    """Content of the topic's segments (other topics, e.g. __consumer_offsets, may come and go)."""
    return {p: Path(p).read_bytes() for p in sorted(glob.glob(os.path.join(data_dir, f"{topic}-*", "*.log")))}


def test_first_start_writes_meta_properties_and_partition_metadata(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b, partitions=2)
    produce(b, topic, values(10))
    meta = Path(b.data_dir, "meta.properties").read_text()
    assert "version=1" in meta and "node.id=0" in meta and "cluster.id=" in meta
    for p in (0, 1):
        text = Path(b.data_dir, f"{topic}-{p}", "partition.metadata").read_text()
        assert text.startswith("version: 0\ntopic_id: ")
    b.restart()
    assert len(consume_all(b, topic, 10, partitions=2)) == 10


def test_missing_metadata_refuses_start_then_recover_metadata_restores_topics(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b, partitions=2, config={"retention.ms": "86400000"})
    produce(b, topic, values(200))
    ids_before = {p: read_topic_id(os.path.join(b.data_dir, f"{topic}-{p}")) for p in (0, 1)}
    b.stop()
    before = segment_bytes(b.data_dir, topic)
    os.remove(os.path.join(b.data_dir, METADATA))

    err = refused(b)
    path = os.path.join(os.path.abspath(b.data_dir), METADATA)
    assert f"{path} is missing" in err
    command = f"strom storage recover-metadata --log-dirs {os.path.abspath(b.data_dir)}"
    assert command in err
    assert segment_bytes(b.data_dir, topic) == before  # nothing deleted, nothing renamed
    assert not glob.glob(os.path.join(b.data_dir, "*-stray"))

    res = storage_cli(*command.split()[2:])
    assert res.returncode == 0, res.stderr
    assert topic in res.stdout
    b.start()
    got = consume_all(b, topic, 200, partitions=2)
    assert sorted(m.value() for m in got) == sorted(r["value"] for r in values(200))
    delivered = produce(b, topic, [{"value": b"after", "partition": 0}])
    assert delivered[0].offset() == 100
    ids_after = {p: read_topic_id(os.path.join(b.data_dir, f"{topic}-{p}")) for p in (0, 1)}
    assert ids_after == ids_before  # topic id kept from partition.metadata
    # The consumer's FindCoordinator creates __consumer_offsets; its creation runs beside other requests.
    deadline = time.monotonic() + 60
    while "__consumer_offsets" not in (recovered := {t["name"]: t for t in json.loads(Path(path).read_text())["topics"]}):
        assert time.monotonic() < deadline, "__consumer_offsets never recorded"
        time.sleep(0.2)
    assert recovered[topic]["topic_id"] == str(ids_before[0])
    assert recovered[topic]["configs"] == {"retention.ms": "86400000"}  # kept from topic.configs
    assert recovered["__consumer_offsets"]["configs"]["cleanup.policy"] == "compact"


def test_metadata_store_without_topics_next_to_partition_data_refuses_start(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b)
    produce(b, topic, [{"value": b"x"}] * 3)
    b.stop()
    path = Path(b.data_dir, METADATA)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "topics": []}))
    err = refused(b)
    assert "has no topics" in err and "strom storage recover-metadata --log-dirs" in err
    res = storage_cli("recover-metadata", "--log-dirs", b.data_dir)
    assert res.returncode == 0, res.stderr
    b.start()
    assert len(consume_all(b, topic, 3)) == 3
    assert json.loads(path.read_text())["cluster_id"] == data["cluster_id"]


def test_new_empty_dir_first_in_log_dirs_keeps_data(broker_factory, tmp_path: Path) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b, partitions=2)
    produce(b, topic, values(50))
    b.stop()
    old_dir = b.data_dir
    before = segment_bytes(old_dir, topic)
    fresh = tmp_path / "fresh"
    b.overrides["log.dirs"] = f"{fresh},{old_dir}"
    b.start()
    got = consume_all(b, topic, 50, partitions=2)
    assert len(got) == 50
    b.stop()
    assert segment_bytes(old_dir, topic) == before
    assert not glob.glob(os.path.join(old_dir, "*-stray")) and not glob.glob(os.path.join(old_dir, "*-delete"))
    assert (fresh / "meta.properties").read_text().count("cluster.id=") == 1


def test_unknown_partition_dir_is_set_aside_not_deleted(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b)
    produce(b, topic, [{"value": b"x"}] * 5)
    b.stop()
    ghost = os.path.join(b.data_dir, "ghost-0")
    shutil.copytree(os.path.join(b.data_dir, f"{topic}-0"), ghost)
    os.remove(os.path.join(ghost, "partition.metadata"))
    ghost_files = sorted(os.listdir(ghost))
    b.start()
    assert len(consume_all(b, topic, 5)) == 5
    strays = glob.glob(ghost + ".*-stray")
    assert len(strays) == 1 and sorted(os.listdir(strays[0])) == ghost_files
    assert not os.path.exists(ghost)
    log_text = b.log_path.read_text()
    assert "WARNING" in log_text and "ghost-0" in log_text
    assert "removing log" not in log_text
    b.restart()  # a stray dir stays put across restarts
    assert glob.glob(ghost + ".*-stray") == strays


def test_partition_dir_of_an_older_topic_id_is_stray(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b)
    produce(b, topic, [{"value": b"old"}] * 7)
    b.stop()
    pdir = os.path.join(b.data_dir, f"{topic}-0")
    old_id = uuid.uuid4()
    write_topic_id(pdir, old_id)  # as if the topic was deleted and re-created while this broker was down
    b.start()
    strays = glob.glob(pdir + ".*-stray")
    assert len(strays) == 1 and read_topic_id(strays[0]) == old_id
    assert encode_topic_id(old_id) in b.log_path.read_text()
    delivered = produce(b, topic, [{"value": b"new"}])
    assert delivered[0].offset() == 0  # the current topic starts with an empty log


def test_log_dir_of_another_broker_or_cluster_is_refused(broker_factory, tmp_path: Path) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b)
    produce(b, topic, [{"value": b"x"}] * 3)
    b.stop()
    before = segment_bytes(b.data_dir, topic)
    err = refused(b, "broker.id=1")
    assert os.path.abspath(b.data_dir) in err and "belongs to broker 0" in err
    err = refused(b, "cluster.id=someOtherCluster")
    assert os.path.abspath(b.data_dir) in err and "cluster.id is someOtherCluster" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.properties").write_text("version=1\nnode.id=0\ncluster.id=elsewhere\n")
    err = refused(b, f"log.dirs={b.data_dir},{other}")
    assert str(other) in err and "different clusters" in err
    (other / "meta.properties").write_bytes(b"\xff\xfe\x00garbage")
    err = refused(b, f"log.dirs={b.data_dir},{other}")
    assert str(other / "meta.properties") in err
    assert segment_bytes(b.data_dir, topic) == before
    b.start()
    assert len(consume_all(b, topic, 3)) == 3


def test_second_broker_on_the_same_log_dir_exits_and_touches_nothing(broker_factory) -> None:  # noqa: ANN001
    a = broker_factory()
    topic = new_topic(a)
    produce(a, topic, [{"value": f"a{i}".encode()} for i in range(100)])
    files_before = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(a.data_dir, "*"))}
    b = BrokerProcess(Path(a.data_dir).parent)  # same data dir, another port
    assert b.data_dir == a.data_dir and b.port != a.port
    err = refused(b)
    assert os.path.abspath(a.data_dir) in err and "in use" in err and f"process {a.pid}" in err
    assert not os.path.exists(os.path.join(a.data_dir, ".kafka_cleanshutdown"))
    files_after = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(a.data_dir, "*"))}
    assert files_after == files_before
    res = storage_cli("recover-metadata", "--log-dirs", a.data_dir)  # the offline tool refuses too
    assert res.returncode == 2 and "in use" in res.stderr, res.stderr
    produce(a, topic, [{"value": f"a{i}".encode()} for i in range(100, 150)])
    a.restart()
    got = consume_all(a, topic, 150)
    assert [m.value() for m in got] == [f"a{i}".encode() for i in range(150)]
    assert [m.offset() for m in got] == list(range(150))


def test_binary_garbage_in_a_checkpoint_means_full_recovery(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b, partitions=2)
    produce(b, topic, values(40))
    b.stop()
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        Path(b.data_dir, name).write_bytes(b"\x00\xff\xfe\x80garbage\x9c")
    Path(b.data_dir, f"{topic}-0", "partition.metadata").write_bytes(b"\xff\x00\x01")
    b.start()
    assert len(consume_all(b, topic, 40, partitions=2)) == 40
    log_text = b.log_path.read_text()
    assert "ignoring unreadable checkpoint" in log_text and "UnicodeDecodeError" not in log_text
    assert read_topic_id(os.path.join(b.data_dir, f"{topic}-0")) is not None  # rewritten


def test_garbage_metadata_file_is_reported_with_what_to_do(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory()
    topic = new_topic(b)
    produce(b, topic, [{"value": b"x"}] * 4)
    b.stop()
    path = os.path.join(b.data_dir, METADATA)
    Path(path).write_bytes(b"\x00\x01{not json")
    err = refused(b)
    assert os.path.abspath(path) in err and "unreadable" in err and "strom storage recover-metadata" in err
    shutil.move(path, path + ".corrupt")
    res = storage_cli("recover-metadata", "--log-dirs", b.data_dir)
    assert res.returncode == 0, res.stderr
    b.start()
    assert len(consume_all(b, topic, 4)) == 4


def test_unusable_log_dirs_are_refused_naming_the_key(broker_factory, tmp_path: Path) -> None:  # noqa: ANN001
    b = broker_factory(start=False)
    afile = tmp_path / "a-file"
    afile.write_text("not a directory")
    for value, reason in [(str(afile), "it is a file"), (f"{afile}/sub", "cannot create the directory"),
                          ("", "at least one directory")]:
        err = refused(b, f"log.dirs={value}")
        assert "'log.dirs'" in err and reason in err
    err = refused(b, "log.roll.ms=0")
    assert "'log.roll.ms'" in err
