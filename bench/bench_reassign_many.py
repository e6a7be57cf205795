"""Reassignment of many partitions: move every partition of an RF 2 topic from brokers [1, 2] to [2, 3].

ZooKeeper + 3 brokers, one topic of `--partitions` partitions (1,000), `--records` small records in each.
One AlterPartitionReassignments request (kafka-python's admin client) asks for all moves; the figures are
the seconds until the controller answered (the moves are started: topic znode and states written, batched),
until ListPartitionReassignments is empty, until ZooKeeper shows every partition at [2, 3] with a full ISR, and
until broker 1 has deleted its replica dirs.

    python bench/bench_reassign_many.py [--partitions 1000] [--records 10]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402
from kafka import TopicPartition as KafkaTopicPartition  # noqa: E402
from tests.support.cluster import ClusterProcess  # noqa: E402

TOPIC = "reassign-many"


def zk_states(cluster: ClusterProcess, partitions: int) -> dict[int, list[int]]:
    pending = {p: cluster.zk.get_async(f"/brokers/topics/{TOPIC}/partitions/{p}/state") for p in range(partitions)}
    return {p: json.loads(r.get(timeout=30)[0])["isr"] for p, r in pending.items()}


def run(workdir: str, partitions: int, records: int) -> dict[str, object]:
    cluster = ClusterProcess(Path(workdir), 3, overrides={"auto.leader.rebalance.enable": "false"})
    cluster.start(timeout=180)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        new = NewTopic(TOPIC, num_partitions=partitions, replication_factor=-1,
                       replica_assignment=[[1, 2]] * partitions)
        admin.create_topics([new], operation_timeout=120)[TOPIC].result(180)
        cluster.wait_for(lambda: all(sorted(isr) == [1, 2] for isr in zk_states(cluster, partitions).values()),
                         300, "full ISRs")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20,
                             "log_level": 0})
        for p in range(partitions):
            for i in range(records):
                producer.produce(TOPIC, f"record-{i}".encode(), partition=p)
            producer.poll(0)
        producer.flush(120)
        client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=300_000)
        started = time.monotonic()
        result = client.alter_partition_reassignments(
            {KafkaTopicPartition(TOPIC, p): [2, 3] for p in range(partitions)}, timeout_ms=300_000)
        answered = time.monotonic() - started
        assert all(err is None for err in result.values()), {k: v for k, v in result.items() if v}
        cluster.wait_for(lambda: client.list_partition_reassignments() == {}, 600, "no moves left")
        listed_empty = time.monotonic() - started
        cluster.wait_for(lambda: all(sorted(isr) == [2, 3] for isr in zk_states(cluster, partitions).values()),
                         600, "every partition on [2, 3] with a full ISR")
        done = time.monotonic() - started

        def left_on_1() -> int:
            return sum(1 for d in cluster.log_dir(1).iterdir() if d.name.rpartition("-")[0] == TOPIC
                       and d.name.rpartition("-")[2].isdigit())

        cluster.wait_for(lambda: left_on_1() == 0, 600, "broker 1 deleted its replicas")
        deleted = time.monotonic() - started
        client.close()
        return {"partitions": partitions, "records_per_partition": records,
                "api_answered_s": round(answered, 2), "list_empty_s": round(listed_empty, 2),
                "all_moved_s": round(done, 2), "broker_1_replicas_deleted_s": round(deleted, 2)}
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-reassign-") as workdir:
        print(json.dumps(run(workdir, args.partitions, args.records), indent=2))


if __name__ == "__main__":
    main()
