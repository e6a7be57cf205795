"""Helpers of the exactly-once crash tests: fill an input topic, run the copy loop, check the output.

Shared by the single-broker and the cluster tests, which differ only in what they kill.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.support.copy_loop import EXIT_WEDGED

TIMEOUT = 60.0
ROOT = Path(__file__).resolve().parents[2]


def fill_input(bootstrap: str, topic: str, partitions: int, per_partition: int) -> list[bytes]:
    """Write unique values (`v-<partition>-<i>`) with an idempotent acks=all producer; returns them all."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "log_level": 0})
    failures: list[KafkaError] = []
    values = []
    for p in range(partitions):
        for i in range(per_partition):
            value = f"v-{p}-{i}".encode()
            values.append(value)
            producer.produce(topic, value, partition=p,
                             on_delivery=lambda err, _msg: err is not None and failures.append(err))
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0 and not failures, failures[:3]
    return values


class CopyLoopProcess:
    """`python -m tests.support.copy_loop` in a child process, killed and cleaned up by pid.

    A loop that exits with EXIT_WEDGED (a librdkafka call hung past its timeout, see
    copy_loop.Watchdog) is started again with the same arguments, at most `max_wedged` times.
    """

    max_wedged = 3

    def __init__(self, work_dir: Path, bootstrap: str, input_topic: str, output_topic: str, group: str,
                 transactional_id: str, partitions: int, batch: int = 20, pause: float = 0.04) -> None:
        self.log_path = work_dir / f"copy-loop-{uuid.uuid4().hex[:6]}.log"
        self.progress_path = work_dir / f"progress-{uuid.uuid4().hex[:6]}"
        self.args = ["--bootstrap", bootstrap, "--input", input_topic, "--output", output_topic, "--group", group,
                     "--transactional-id", transactional_id, "--partitions", str(partitions), "--batch", str(batch),
                     "--pause", str(pause),
                     "--progress", str(self.progress_path)]
        if os.environ.get("STROM_COPY_LOOP_DEBUG"):  # librdkafka debug contexts, e.g. "eos,protocol"
            self.args += ["--debug", os.environ["STROM_COPY_LOOP_DEBUG"]]
        self.proc: subprocess.Popen[bytes] | None = None
        self.wedged = 0

    def start(self) -> CopyLoopProcess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                                           os.environ.get("PYTHONPATH", "")])}
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.copy_loop", *self.args],
                                         stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        return self

    def progress(self) -> int:
        """Input records committed so far (0 before the first commit)."""
        try:
            return int(self.progress_path.read_text() or 0)
        except (OSError, ValueError):
            return 0

    def running(self) -> bool:
        """Whether the loop still runs (restarting it first if it exited wedged)."""
        if self.proc is None:
            return False
        if self.proc.poll() == EXIT_WEDGED and self.wedged < self.max_wedged:
            self.wedged += 1
            print(f"copy loop wedged in librdkafka ({self.wedged}); restarted")
            self.start()
        return self.proc.poll() is None

    def kill9(self) -> None:
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        """The loop's exit status once it is done (restarts of a wedged loop included)."""
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > deadline:
                raise AssertionError(f"the copy loop did not finish within {timeout:g}s "
                                     f"(progress {self.progress()}):\n{self.log_tail()}")
            time.sleep(0.1)
        assert self.proc is not None
        return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kill9()


def wait_progress(loop: CopyLoopProcess, at_least: int, timeout: float, describe: object = "") -> None:
    deadline = time.monotonic() + timeout
    while loop.progress() < at_least:
        if not loop.running():
            raise AssertionError(f"the copy loop exited ({loop.proc.returncode if loop.proc else None}) "
                                 f"at progress {loop.progress()}:\n{loop.log_tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"copy loop progress stuck at {loop.progress()} < {at_least} for "
                                 f"{timeout:g}s\n{loop.log_tail()}\n{describe() if callable(describe) else describe}")
        time.sleep(0.05)


def read_committed(bootstrap: str, topic: str, partitions: int, timeout: float = TIMEOUT) -> list[bytes]:
    """Every value a read_committed consumer gets from the start up to the end of each partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < partitions:
            assert time.monotonic() < deadline, f"no end of {topic} within {timeout:g}s ({len(values)} read)"
            m = consumer.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(m.partition())
                continue
            at_eof.discard(m.partition())
            values.append(m.value())
        return values
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "log_level": 0})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], TIMEOUT)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends", "log_level": 0})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1] for p in range(partitions)}
    finally:
        consumer.close()


def assert_exactly_once(expected: list[bytes], got: list[bytes]) -> None:
    counts = collections.Counter(got)
    missing = [v for v in expected if v not in counts]
    duplicated = sorted((v, n) for v, n in counts.items() if n > 1)
    unexpected = sorted(set(counts) - set(expected))
    assert not missing and not duplicated and not unexpected, (
        f"{len(missing)} lost (e.g. {missing[:5]}), {len(duplicated)} duplicated (e.g. {duplicated[:5]}), "
        f"{len(unexpected)} unexpected (e.g. {unexpected[:5]}) of {len(expected)}")
