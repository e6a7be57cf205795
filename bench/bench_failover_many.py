"""Failover of many partitions: kill -9 of a broker leading ~1,000 of them, time until all have new leaders.

ZooKeeper + 3 brokers (`zookeeper.session.timeout.ms` 6000), one RF 3 topic of `--partitions`
partitions (3,000: about 1,000 led by each broker). A broker that is not the controller is killed;
the figures are the seconds from the kill until ZooKeeper shows a new leader for every partition it
led, and until a surviving broker's Metadata answer does (what clients see). Target (issue: cluster
operations): session timeout + 2 s. Most of it, and most of its spread, is ZooKeeper expiring the
session; the controller's log line for the departure splits it: `after_controller_saw_it_s` is the
part Strom controls (controller elections, ZooKeeper writes, LeaderAndIsr, UpdateMetadata).

    python bench/bench_failover_many.py [--partitions 3000] [--src ../old/src]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402

SESSION_TIMEOUT_MS = 6000
TOPIC = "failover-many"


def zk_leaders(cluster: ClusterProcess, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (leader, ISR size) from ZooKeeper, read with pipelined async gets."""
    pending = {p: cluster.zk.get_async(f"/brokers/topics/{TOPIC}/partitions/{p}/state") for p in range(partitions)}
    out = {}
    for p, result in pending.items():
        try:
            data, _ = result.get(timeout=30)
        except Exception:  # noqa: BLE001 - not written yet
            continue
        state = json.loads(data)
        out[p] = (int(state["leader"]), len(state["isr"]))
    return out


def controller_saw_departure(log_path: Path, victim: int, after: float) -> float | None:
    """Wall-clock time of the controller's log line for the victim's departure (first one after `after`)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if "controller: brokers joined" in line and f"left [{victim}]" in line:
            stamp = datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if stamp >= after:
                return stamp
    return None


def metadata_leaders(bootstrap: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    topic = admin.list_topics(TOPIC, timeout=30).topics.get(TOPIC)
    return {p: meta.leader for p, meta in (topic.partitions if topic else {}).items()}


def run(workdir: str, partitions: int, env: dict[str, str], profile: str | None = None) -> dict[str, object]:
    cluster = ClusterProcess(Path(workdir), 3, session_timeout_ms=SESSION_TIMEOUT_MS,
                             overrides={"auto.leader.rebalance.enable": "false"})
    for broker in cluster.brokers.values():
        broker.env.update(env)
    cluster.start(timeout=180)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, partitions, 3)], operation_timeout=120)[TOPIC].result(180)
        deadline = time.monotonic() + 300
        while True:
            states = zk_leaders(cluster, partitions)
            if len(states) == partitions and all(isr == 3 for _, isr in states.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the topic's partitions did not reach a full ISR in 300 s")
            time.sleep(1)
        time.sleep(5)  # let the brokers settle after the creation burst
        controller = cluster.controller_id()
        victim = max((b for b in cluster.broker_ids if b != controller),
                     key=lambda b: sum(1 for leader, _ in states.values() if leader == b))
        led = sorted(p for p, (leader, _) in states.items() if leader == victim)
        survivors = ",".join(cluster.broker(b).bootstrap for b in cluster.broker_ids if b != victim)

        profilers = []
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if profile:  # sample every survivor for 25 s from the kill on (collapsed stacks per thread, one file per broker)
            Path(profile).mkdir(parents=True, exist_ok=True)
            profilers = [subprocess.Popen([py_spy, "record", "--pid", str(cluster.broker(b).pid), "--duration", "25",
                                           "--rate", "100", "--format", "raw", "--threads",
                                           "-o", str(Path(profile) / f"broker-{b}.txt")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                         for b in cluster.broker_ids if b != victim]
            time.sleep(1)
        killed_at, killed_wall = time.monotonic(), time.time()
        cluster.kill9(victim)
        zk_done = metadata_done = None
        while (zk_done is None or metadata_done is None) and time.monotonic() - killed_at < 120:
            now = time.monotonic() - killed_at
            if zk_done is None:
                moved = zk_leaders(cluster, partitions)
                if all(moved.get(p, (victim, 0))[0] not in (victim, -1) for p in led):
                    zk_done = now
            if metadata_done is None:
                seen = metadata_leaders(survivors)
                if all(seen.get(p, victim) not in (victim, -1) for p in led):
                    metadata_done = time.monotonic() - killed_at
            time.sleep(0.1)
        for profiler in profilers:
            profiler.wait(60)
        saw = controller_saw_departure(cluster.broker(controller).log_path, victim, killed_wall - 1)
        saw_s = None if saw is None else saw - killed_wall
        return {"partitions": partitions, "led_by_victim": len(led), "victim": victim, "controller": controller,
                "session_timeout_s": SESSION_TIMEOUT_MS / 1000,
                "all_new_leaders_in_zookeeper_s": None if zk_done is None else round(zk_done, 2),
                "all_new_leaders_in_metadata_s": None if metadata_done is None else round(metadata_done, 2),
                "controller_saw_departure_s": None if saw_s is None else round(saw_s, 2),
                "after_controller_saw_it_s": None if saw_s is None or metadata_done is None
                else round(metadata_done - saw_s, 2),
                "target_s": SESSION_TIMEOUT_MS / 1000 + 2}
    finally:
        cluster.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=3000)
    ap.add_argument("--profile", help="directory for py-spy samples (collapsed stacks) of the surviving brokers")
    ap.add_argument("--src", help="source tree to run the brokers from (PYTHONPATH), e.g. an older checkout")
    args = ap.parse_args()
    env = {"PYTHONPATH": os.pathsep.join([str(Path(args.src).resolve()), str(ROOT)])} if args.src else {}
    with tempfile.TemporaryDirectory(prefix="strom-failover-many-") as workdir:
        print(json.dumps(run(workdir, args.partitions, env, args.profile), indent=1))


if __name__ == "__main__":
    main()
