"""kill -9 at random moments of an exactly-once copy loop: the output holds every input record once.

A child process copies an input topic to an output topic in transactions (read_committed consumer
of a group, transactional producer, send_offsets_to_transaction; tests/support/copy_loop.py).
While it runs the broker is killed with SIGKILL and restarted on the same data dir and port 3-4
times, and the copy loop itself once (restarted with the same transactional.id, which fences and
aborts what the dead one left open). Each kill comes a random number of copied records after the
previous one, plus a random fraction of a transaction (the loop spends a few ms inside each), so
they land in open transactions, in commits and between them. The generator is seeded; the seed is
printed, and STROM_CHAOS_SEED replays one (as far as timing allows). Afterwards a read_committed consumer finds
every input value in the output exactly once and the group's committed offsets are the input's
end offsets.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.exactly_once import (
    CopyLoopProcess,
    assert_exactly_once,
    committed_offsets,
    end_offsets,
    fill_input,
    read_committed,
    wait_progress,
)

pytestmark = pytest.mark.slow

PARTITIONS = 3
PER_PARTITION = 1000


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result(30)


def test_copy_loop_is_exactly_once_across_broker_and_client_kill9(broker_factory, tmp_path: Path) -> None:  # noqa: ANN001
    seed = int(os.environ.get("STROM_CHAOS_SEED") or random.randrange(1 << 32))
    print(f"STROM_CHAOS_SEED={seed}")
    rng = random.Random(seed)
    broker = broker_factory()
    suffix = uuid.uuid4().hex[:8]
    source, sink, group, txn_id = f"in-{suffix}", f"out-{suffix}", f"copy-{suffix}", f"copy-txn-{suffix}"
    create_topics(broker.bootstrap, source, sink)
    values = fill_input(broker.bootstrap, source, PARTITIONS, PER_PARTITION)
    total = len(values)

    def new_loop() -> CopyLoopProcess:
        return CopyLoopProcess(tmp_path, broker.bootstrap, source, sink, group, txn_id, PARTITIONS,
                               batch=rng.choice((10, 20, 30))).start()

    events = ["broker"] * rng.randint(3, 4) + ["copy-loop"]
    rng.shuffle(events)
    loops = [new_loop()]
    try:
        last = 0
        for event in events:
            # a random number of records copied since the last kill (at least one commit), so that
            # every kill lands while the loop still runs, somewhere in or between transactions
            at = last + rng.randint(1, total // (len(events) + 3))
            wait_progress(loops[-1], at, 90, lambda: f"seed {seed}; broker log:\n{broker.log_tail()}")
            time.sleep(rng.uniform(0, 0.3))
            last = loops[-1].progress()
            print(f"kill -9 {event} at progress {last}")
            if event == "broker":
                broker.kill9()
                time.sleep(rng.uniform(0, 1.0))
                broker.start()
            else:
                loops[-1].kill9()
                loops.append(new_loop())
        assert loops[-1].wait(120) == 0, f"seed {seed}:\n{loops[-1].log_tail()}"
    finally:
        for loop in loops:
            loop.close()

    assert_exactly_once(values, read_committed(broker.bootstrap, sink, PARTITIONS))
    ends = end_offsets(broker.bootstrap, source, PARTITIONS)
    assert ends == {p: PER_PARTITION for p in range(PARTITIONS)}
    assert committed_offsets(broker.bootstrap, group, source, PARTITIONS) == ends, f"seed {seed}"
