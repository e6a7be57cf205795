"""confluent-kafka members of a KIP-848 consumer group (group.protocol=consumer) under watch.

``Tracker`` keeps, in one global order, which member owns each partition (from the members'
assignment callbacks) and every record each member consumed, so a test can assert that no
partition ever had two owners and that nothing was consumed twice or lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.support.checker import parse_value


class Tracker:
    """Ownership intervals and consumed records of every member, in one global order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []
        self.consumed: dict[tuple[str, int], list[str]] = {}

    def assign(self, member: str, partitions: list[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                other = self.owner.get(tp.partition)
                if other is not None and other != member:
                    self.violations.append(f"partition {tp.partition} given to {member} while {other} owns it")
                self.owner[tp.partition] = member

    def revoke(self, member: str, partitions: list[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                if self.owner.get(tp.partition) == member:
                    del self.owner[tp.partition]

    def consumed_count(self) -> int:
        with self.lock:
            return len(self.consumed)

    def settle(self, seconds: float, progress: int = 200) -> None:
        """Let the group work under load: wait (60 s at most) until ``progress`` more records were consumed,
        then ``seconds`` more."""
        before = self.consumed_count()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.consumed_count() < before + progress:
            time.sleep(0.2)
        time.sleep(seconds)

    def record(self, member: str, msg: Any) -> None:
        with self.lock:
            if self.owner.get(msg.partition()) != member:
                self.violations.append(f"{member} consumed partition {msg.partition()} it does not own")
            parsed = parse_value(msg.value())
            if parsed is not None:
                self.consumed.setdefault(parsed, []).append(member)


class GroupMember:
    """A confluent-kafka consumer (group.protocol=consumer) polling in its own thread; it commits
    what it consumed before giving a partition up, and on close."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, tracker: Tracker,
                 config: dict[str, Any] | None = None) -> None:
        self.name = name
        self.tracker = tracker
        self.positions: dict[int, int] = {}
        self.commit_errors: list[str] = []
        self.close_timed_out = False
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0,
                                  **(config or {})})
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        self.topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._thread.start()

    def _commit(self, partitions: list[int]) -> None:
        offsets = [TopicPartition(self.topic, p, self.positions[p]) for p in partitions if p in self.positions]
        if offsets:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - recorded and asserted on
                self.commit_errors.append(repr(exc))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.tracker.assign(self.name, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit([tp.partition for tp in partitions])
        for tp in partitions:
            self.positions.pop(tp.partition, None)
        self.tracker.revoke(self.name, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost, not given up: its positions must not be committed over the next owner's.
        for tp in partitions:
            self.positions.pop(tp.partition, None)
        self.tracker.revoke(self.name, partitions)

    def _run(self) -> None:
        last_commit = time.monotonic()
        while not self._stop.is_set():
            msg = self.consumer.poll(0.1)
            if msg is not None and not msg.error():
                self.tracker.record(self.name, msg)
                self.positions[msg.partition()] = msg.offset() + 1
            if time.monotonic() - last_commit > 1:
                self._commit(list(self.positions))
                last_commit = time.monotonic()
        self._commit(list(self.positions))
        self.consumer.close()

    def close(self) -> None:
        """Stop polling, commit and close the consumer, waiting a bounded time; a close that did not
        finish in time is left behind and shows in ``close_timed_out``."""
        self._stop.set()
        self._thread.join(60)
        self.close_timed_out = self._thread.is_alive()
