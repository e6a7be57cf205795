"""Sequence-numbered producers and a checker that finds lost, duplicated and reordered records.

Each producer writes values `b"<producer>-<seq>"` with seq counting up from 0 and remembers
which ones the broker acknowledged (and where). The checker reads the whole topic back with
a real consumer and compares: an acknowledged record that is absent is *lost*, a (producer,
seq) seen twice is *duplicated*, and a seq lower than one already seen from the same producer
in the same partition is *reordered*. Records that were written but never acknowledged (a
timed-out send) may legitimately appear; they are counted, not blamed.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

EXAMPLES = 10


def record_value(producer: str, seq: int) -> bytes:
    """The value written for `seq` of `producer` (the producer name must not contain '-')."""
    return f"{producer}-{seq}".encode()


def parse_value(value: bytes | None) -> tuple[str, int] | None:
    """(producer, seq) of a checker record, None for anything else found in the topic."""
    if not value:
        return None
    name, sep, seq = value.decode("utf-8", "replace").rpartition("-")
    if not sep or not name or not seq.isdigit():
        return None
    return name, int(seq)


@dataclass(frozen=True)
class Acked:
    producer: str
    seq: int
    partition: int
    offset: int


class SequenceProducer:
    """A confluent-kafka Producer writing `<name>-0`, `<name>-1`, ... from a background thread.

    `config` is merged over a bootstrap list and a quiet log level, so a test states only what
    matters (`acks`, `enable.idempotence`, ...). `partition` pins every record to one partition;
    otherwise the client's partitioner picks one per record (values have no key).
    """

    def __init__(self, bootstrap: str, topic: str, name: str = "p0", config: dict[str, Any] | None = None,
                 partition: int | None = None, rate_sleep: float = 0.0) -> None:
        if "-" in name:
            raise ValueError("producer names must not contain '-'")
        self.topic = topic
        self.name = name
        self.partition = partition
        self.rate_sleep = rate_sleep
        self.config = {"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5, **(config or {})}
        self.acked: list[Acked] = []
        self.errors: list[KafkaError] = []
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        self.unflushed = 0

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        parsed = parse_value(msg.value())
        assert parsed is not None
        with self._lock:
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append(Acked(parsed[0], parsed[1], msg.partition(), msg.offset()))

    def produce_some(self, count: int, flush_timeout: float = 60.0) -> SequenceProducer:
        """Write `count` more records in the caller's thread and flush (for fixed-size tests)."""
        producer = self._client()
        for _ in range(count):
            self._produce_one(producer)
        self.unflushed = producer.flush(flush_timeout)
        return self

    def _client(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self.config)
        return self._producer

    def _produce_one(self, producer: Producer) -> None:
        kwargs: dict[str, Any] = {"on_delivery": self._on_delivery}
        if self.partition is not None:
            kwargs["partition"] = self.partition
        while True:
            try:
                producer.produce(self.topic, record_value(self.name, self.sent), **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        self.sent += 1
        producer.poll(0)

    def start(self) -> SequenceProducer:
        """Write continuously until `stop()`."""
        producer = self._client()

        def run() -> None:
            while not self._stop.is_set():
                self._produce_one(producer)
                if self.rate_sleep:
                    time.sleep(self.rate_sleep)

        self._thread = threading.Thread(target=run, name=f"seq-producer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, flush_timeout: float = 60.0) -> SequenceProducer:
        """Stop writing and wait (bounded) for every outstanding delivery report."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._producer is not None:
            self.unflushed = self._producer.flush(flush_timeout)
        return self

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acked(self, count: int, timeout: float) -> bool:
        """Block until at least `count` records are acknowledged (False on time-out)."""
        deadline = time.monotonic() + timeout
        while self.acked_count() < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


@dataclass
class CheckReport:
    """What the checker found; `ok` means nothing acknowledged was lost, duplicated or reordered."""

    consumed: int = 0
    acked: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    unacked_present: int = 0  # written, never acknowledged, yet in the log (allowed)
    foreign: int = 0  # records that are not checker records
    lost_examples: list[tuple[str, int]] = field(default_factory=list)
    duplicated_examples: list[tuple[str, int, int, int]] = field(default_factory=list)  # producer, seq, p, offset
    reordered_examples: list[tuple[str, int, int, int]] = field(default_factory=list)  # producer, seq, p, offset

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.reordered == 0

    def __str__(self) -> str:
        return (f"consumed={self.consumed} acked={self.acked} lost={self.lost} duplicated={self.duplicated} "
                f"reordered={self.reordered} unacked_present={self.unacked_present} foreign={self.foreign}; "
                f"lost e.g. {self.lost_examples} duplicated e.g. {self.duplicated_examples} "
                f"reordered e.g. {self.reordered_examples}")


def watermark_offsets(consumer: Consumer, tp: TopicPartition, timeout: float = 30.0) -> tuple[int, int]:
    """librdkafka's watermark query hands OFFSET_NOT_AVAILABLE (a new leader whose HW has not caught up
    yet, as Kafka answers) to its caller, unlike its consumer's own offset lookups: retry it here."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.OFFSET_NOT_AVAILABLE or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def consume_topic(bootstrap: str, topic: str, timeout: float = 60.0,
                  config: dict[str, Any] | None = None) -> list[Any]:
    """Every record of every partition from the beginning up to the end offsets taken at the start.

    Raises TimeoutError (with the positions reached) if the end is not reached within `timeout`.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"checker-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "log_level": 0, "enable.partition.eof": False,
                         **(config or {})})
    try:
        metadata = consumer.list_topics(topic, timeout=min(timeout, 30))
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            raise KafkaException(info.error if info is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        partitions = sorted(info.partitions)
        end: dict[int, int] = {}
        start: dict[int, int] = {}
        for p in partitions:
            low, high = watermark_offsets(consumer, TopicPartition(topic, p), timeout=min(timeout, 30))
            start[p], end[p] = low, high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        position = dict(start)
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while any(position[p] < end[p] for p in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {topic} up to {position}, end offsets {end}")
            msg = consumer.poll(0.5)
            if msg is None:
                # Control records (transaction markers) are never delivered but do move the position.
                for tp in consumer.position([TopicPartition(topic, p) for p in partitions]):
                    if tp.offset >= 0:
                        position[tp.partition] = max(position[tp.partition], tp.offset)
                continue
            if msg.error():
                if msg.error().retriable() or msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg)
            position[msg.partition()] = max(position[msg.partition()], msg.offset() + 1)
        return out
    finally:
        consumer.close()


def check_records(messages: Iterable[Any], acked: Iterable[Acked]) -> CheckReport:
    """Compare consumed messages (in the order each partition returned them) with acknowledged sends."""
    report = CheckReport()
    acked_keys = {(a.producer, a.seq) for a in acked}
    report.acked = len(acked_keys)
    seen: set[tuple[str, int]] = set()
    last_seq: dict[tuple[str, int], int] = {}
    by_partition: dict[int, list[Any]] = defaultdict(list)
    for msg in messages:
        by_partition[msg.partition()].append(msg)
    for partition, msgs in sorted(by_partition.items()):
        for msg in sorted(msgs, key=lambda m: m.offset()):
            report.consumed += 1
            parsed = parse_value(msg.value())
            if parsed is None:
                report.foreign += 1
                continue
            producer, seq = parsed
            example = (producer, seq, partition, msg.offset())
            if parsed in seen:
                report.duplicated += 1
                if len(report.duplicated_examples) < EXAMPLES:
                    report.duplicated_examples.append(example)
                continue
            seen.add(parsed)
            if parsed not in acked_keys:
                report.unacked_present += 1
            stream = (producer, partition)
            if stream in last_seq and seq < last_seq[stream]:
                report.reordered += 1
                if len(report.reordered_examples) < EXAMPLES:
                    report.reordered_examples.append(example)
            last_seq[stream] = max(seq, last_seq.get(stream, seq))
    missing = sorted(acked_keys - seen, key=lambda k: (k[0], k[1]))
    report.lost = len(missing)
    report.lost_examples = missing[:EXAMPLES]
    return report


def check_topic(bootstrap: str, topic: str, acked: Iterable[Acked], timeout: float = 60.0) -> CheckReport:
    """Consume `topic` fully and check it against the acknowledged records."""
    return check_records(consume_topic(bootstrap, topic, timeout), acked)
