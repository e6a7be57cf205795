"""A transaction's first offsets go to a group whose `__consumer_offsets` does not exist yet.

`send_offsets_to_transaction` is the first user of `__consumer_offsets` here: its FindCoordinator
creates the topic. librdkafka sends that lookup at most three times (two retries, ~100 ms apart),
drops it after a third COORDINATOR_NOT_AVAILABLE and waits for a broker state change that a
healthy cluster never makes, ignoring the call's timeout (confluentinc/librdkafka#5456): the
producer hangs for good. A cluster creating 50 RF 3 partitions on a loaded machine takes longer
than those three tries; here the topic has enough partitions that it always does. The user-visible
contract: the call returns and the offsets are committed with the transaction.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.support.cluster import ClusterProcess
from tests.support.exactly_once import committed_offsets
from tests.support.replicas import create_topic

pytestmark = pytest.mark.cluster

TIMEOUT = 120
OFFSETS_PARTITIONS = 600  # creation and leader election take well over librdkafka's three lookups

# Runs in a child process: the hang is in librdkafka's C code, which no in-process timeout interrupts.
CLIENT = """
import sys
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, topic, group, txn_id = sys.argv[1:5]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "log_level": 0})
producer.init_transactions(60)
producer.begin_transaction()
producer.produce(topic, b"v", partition=0)
member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})  # only for its metadata
producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], member.consumer_group_metadata(), 60)
producer.commit_transaction(60)
print("committed", flush=True)
member.close()
"""


def test_send_offsets_while_the_offsets_topic_is_being_created_returns_and_commits(cluster_factory) -> None:  # noqa: ANN001
    cluster: ClusterProcess = cluster_factory(3, overrides={"offsets.topic.num.partitions": OFFSETS_PARTITIONS})
    topic = create_topic(cluster, partitions=1)
    group, txn_id = f"g-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    child = subprocess.Popen([sys.executable, "-c", CLIENT, cluster.bootstrap, topic, group, txn_id],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = child.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        pytest.fail(f"send_offsets_to_transaction/commit did not return within {TIMEOUT}s "
                    f"(the group's FindCoordinator gave up while {OFFSETS_PARTITIONS} partitions were created):\n{out}")
    assert child.returncode == 0 and "committed" in out, out
    assert committed_offsets(cluster.bootstrap, group, topic, 1) == {0: 7}
