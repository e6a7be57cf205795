"""An idempotent producer for one Spark write task, sending the sink's own record batches.

librdkafka takes one Python call per record; the sink instead builds whole v2 record batches
(strom.spark.batch_encode) and this producer sends them with Produce over the worker's
``TaskClient``. It behaves like Kafka's idempotent producer:

* InitProducerId gives a producer id and epoch; each partition's batches carry consecutive
  base sequences from 0, so a batch the broker already wrote is answered
  DUPLICATE_SEQUENCE_NUMBER (counted as written), never appended twice.
* Up to ``max.in.flight`` (at most 5, Kafka's bound for idempotence) requests per partition are
  in flight, in order, on the leader's one connection.
* A retriable failure (leader moved, broker restarting, time-out, connection lost) makes the
  partition wait for its other requests, refresh metadata, back off and resend from its first
  unacknowledged batch with the same sequences, until ``delivery.timeout.ms`` (120 s) runs out.
  Requests behind the failed one answer OUT_OF_ORDER_SEQUENCE_NUMBER; that is part of the retry.
* Any other error fails the task, naming the topic-partition and Kafka's error.

The caller's thread drives everything: ``send`` encodes the header and hands requests to the
client's loop thread, then collects answers; ``flush`` waits for all of them.
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import struct
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.protocol import codec
from strom.protocol.api_keys import ApiKey
from strom.spark.batch_encode import EncodedBatch
from strom.spark.client import RETRIABLE, KafkaProtocolError, TaskClient, error_name
from strom.spark.options import StromOptionError
from strom.spark.transaction import TransactionManager

log = logging.getLogger("strom.spark")

PRODUCE_VERSION = 8
INIT_PRODUCER_ID_VERSION = 1
MAX_IN_FLIGHT = 5  # Kafka guarantees ordering with idempotence for up to 5 requests per partition
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024
UNKNOWN_TOPIC_WAIT_S = 10.0  # how long a topic missing from metadata is waited for (auto-creation, propagation)

DUPLICATE_SEQUENCE_NUMBER = 46
MESSAGE_TOO_LARGE = 10
# Answers worth a retry when InitProducerId goes to a broker that is starting or electing.
_INIT_RETRIABLE = RETRIABLE | {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


class DeliveryError(RuntimeError):
    """Rows could not be written; the message names the topic-partition and the Kafka error."""


def parse_acks(conf: Mapping[str, Any]) -> int:
    """``acks`` as Produce sends it: all/-1 -> -1, 1, and 0 sent as 1 (the task must learn its rows arrived)."""
    raw = str(conf.get("acks", conf.get("request.required.acks", "all"))).strip().lower()
    if raw in ("all", "-1"):
        return -1
    if raw in ("0", "1"):
        return 1
    raise StromOptionError(f"Option 'kafka.acks' must be all, -1, 0 or 1, got {raw!r}.")


def _ms(conf: Mapping[str, Any], names: tuple[str, ...], default: int) -> int:
    for name in names:
        if name in conf:
            return int(conf[name])
    return default


@dataclass
class _Entry:
    """One batch of one partition, with its request while in flight."""

    body: list[Any]  # the Produce request body's chunks: fixed once, a resend repeats them byte for byte
    size: int  # of the record batch
    base_sequence: int
    count: int
    future: concurrent.futures.Future[Any] | None = None


@dataclass
class _Partition:
    topic: str
    partition: int
    entries: deque[_Entry] = field(default_factory=deque)  # unacknowledged, in sequence order
    sent: int = 0  # entries[:sent] are in flight
    next_sequence: int = 0
    retry_at: float = 0.0  # monotonic; while > now, nothing is sent
    backoff: float = 0.1
    failing_since: float | None = None  # monotonic time of the first retriable failure not yet overcome
    draining: bool = False  # a request failed: wait for the rest of the window before resending

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def topic_partition_count(client: TaskClient, topic: str, timeout_s: float,
                         option: str = "from the topic column") -> int:
    """Partition count of ``topic``, asking the broker to create it when missing (it follows its
    ``auto.create.topics.enable``); a creation is logged with the partition count it got.

    Raises StromTopicNotFoundError when the topic stays unknown, DeliveryError when no broker answers.
    """
    from strom.spark.errors import StromTopicNotFoundError

    start = time.monotonic()
    backoff = 0.1
    missing = False  # the broker said UNKNOWN_TOPIC_OR_PARTITION without being asked to create it
    asked_creation = False
    while True:
        try:
            errors = client.refresh_metadata([topic], allow_auto_topic_creation=missing and not asked_creation)
            asked_creation = asked_creation or missing
            count = client.partition_counts.get(topic)
        except (ConnectionError, TimeoutError, OSError) as exc:
            if time.monotonic() - start >= timeout_s:
                raise DeliveryError(f"No broker answered metadata for topic {topic}: {exc}") from exc
        else:
            if count is not None:
                if missing:
                    log.warning("strom sink: topic '%s' did not exist; the broker created it with %d "
                                "partition(s) (auto.create.topics.enable).", topic, count)
                return count
            if errors.get(topic) == 3 and not missing:
                missing = True
                continue  # ask again, this time letting the broker create it
            waited = time.monotonic() - start
            # Asked to create it, a broker answers the topic or LEADER_NOT_AVAILABLE; still "unknown"
            # means it declined. A second's grace covers a creation racing on another broker.
            declined = asked_creation and errors.get(topic) == 3 and waited >= 1.0
            if declined or waited >= UNKNOWN_TOPIC_WAIT_S:
                raise StromTopicNotFoundError(
                    f"Topic '{topic}' ({option}) does not exist and the broker did not create it "
                    "(its auto.create.topics.enable is false). Create the topic first, e.g. "
                    f"`strom topics --create --topic {topic} --partitions 3 --bootstrap-server <broker>`.")
        time.sleep(backoff)
        backoff = min(1.0, backoff * 2)


class IdempotentProducer:
    """Sends pre-built record batches for one task; ``flush`` returns once all are acknowledged."""

    def __init__(self, client: TaskClient, conf: Mapping[str, Any],
                 transaction: TransactionManager | None = None) -> None:
        """With ``transaction`` (already initialised), batches are transactional under its producer id
        and epoch, and each partition joins the transaction before its first batch is sent."""
        self.client = client
        self.transaction = transaction
        self.acks = parse_acks(conf)
        idempotence = str(conf.get("enable.idempotence", "true")).strip().lower() in ("true", "1")
        self.idempotent = idempotence and self.acks == -1
        self.max_in_flight = max(1, min(MAX_IN_FLIGHT, int(conf.get("max.in.flight.requests.per.connection",
                                                                     conf.get("max.in.flight", MAX_IN_FLIGHT)))))
        if not self.idempotent:
            self.max_in_flight = 1  # without sequences only one request at a time keeps the order
        self.delivery_timeout_s = _ms(conf, ("delivery.timeout.ms", "message.timeout.ms"),
                                      DEFAULT_DELIVERY_TIMEOUT_MS) / 1000
        self.request_timeout_ms = _ms(conf, ("request.timeout.ms",), 30_000)
        self.buffer_limit = min(DEFAULT_BUFFER_BYTES,
                                _ms(conf, ("queue.buffering.max.kbytes",), DEFAULT_BUFFER_BYTES // 1024) * 1024)
        self.partitions: dict[tuple[str, int], _Partition] = {}
        self.buffered = 0
        self.rows_acknowledged = 0
        self.retries = 0  # partitions resent from their first unacknowledged batch
        self.duplicates = 0  # batches answered DUPLICATE_SEQUENCE_NUMBER (written by an earlier try)
        if transaction is not None:
            self.idempotent = True  # exactly-once requires acks=all (checked with the options)
            self.producer_id, self.producer_epoch = transaction.producer_id, transaction.producer_epoch
        else:
            self.producer_id, self.producer_epoch = self._init_producer_id() if self.idempotent else (-1, -1)

    # -- set-up --------------------------------------------------------------------------
    def _init_producer_id(self) -> tuple[int, int]:
        from kafka.protocol.producer import InitProducerIdRequest

        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
        last = ""
        backoff = 0.1
        deadline = time.monotonic() + self.delivery_timeout_s
        while time.monotonic() < deadline:
            try:
                if not self.client.nodes or last:
                    self.client.refresh_metadata([])
                node = random.choice(list(self.client.nodes))
                resp = self.client.send(node, request, INIT_PRODUCER_ID_VERSION)
            except (ConnectionError, TimeoutError, OSError, IndexError) as exc:
                last = repr(exc)
            else:
                if resp.error_code == 0:
                    return resp.producer_id, resp.producer_epoch
                if resp.error_code not in _INIT_RETRIABLE:
                    raise DeliveryError(f"InitProducerId failed: {error_name(resp.error_code)} "
                                        f"(error {resp.error_code})")
                last = error_name(resp.error_code)
            time.sleep(backoff)
            backoff = min(1.0, backoff * 2)
        raise DeliveryError(f"InitProducerId did not succeed within {self.delivery_timeout_s:.0f} s: {last}")

    def partition_count(self, topic: str) -> int:
        """The topic's partition count; a missing topic is created if the broker allows it (and
        logged), else waited for briefly (metadata propagation), then refused.

        Brokers that do not answer are waited for up to delivery.timeout.ms (a cluster restarting)."""
        count = self.client.partition_counts.get(topic)
        if count is not None:
            return count
        return topic_partition_count(self.client, topic, self.delivery_timeout_s)

    # -- sending -------------------------------------------------------------------------
    def send(self, topic: str, partition: int, batch: EncodedBatch) -> None:
        """Queue one batch (its sequence is fixed now) and send what the windows allow."""
        state = self.partitions.get((topic, partition))
        if state is None:
            if self.transaction is not None:
                self.transaction.add_partitions([(topic, partition)])
            state = self.partitions[(topic, partition)] = _Partition(topic, partition)
        sequence = state.next_sequence if self.idempotent else -1
        header = batch.header(self.producer_id, self.producer_epoch, sequence, self.transaction is not None)
        body = self._produce_body(state, header, batch.records)
        if self.idempotent:
            state.next_sequence = (state.next_sequence + batch.count) & 0x7FFFFFFF
        state.entries.append(_Entry(body, batch.size, sequence, batch.count))
        self.buffered += batch.size
        self._pump(state)
        self._collect(block=False)
        while self.buffered > self.buffer_limit:
            self._collect(block=True)

    def flush(self) -> int:
        """Wait until every batch is acknowledged; returns the rows acknowledged so far."""
        while any(p.entries for p in self.partitions.values()):
            self._collect(block=True)
        return self.rows_acknowledged

    def _pump(self, state: _Partition) -> None:
        """Send the partition's next batches, up to the in-flight window, unless it is backing off."""
        if state.draining or state.sent >= min(len(state.entries), self.max_in_flight):
            return
        if time.monotonic() < state.retry_at:
            return
        try:
            node = self.client.leader(state.topic, state.partition, refresh=state.failing_since is not None)
        except (KafkaProtocolError, ConnectionError, TimeoutError, OSError) as exc:
            if isinstance(exc, KafkaProtocolError) and not exc.retriable:
                raise DeliveryError(f"Produce to {state.name} failed: {exc}") from exc
            self._retry_later(state, str(exc))
            return
        connection = self.client.connection(node)
        while state.sent < len(state.entries) and state.sent < self.max_in_flight:
            entry = state.entries[state.sent]
            entry.future = self.client.submit(connection.send_raw(ApiKey.PRODUCE, PRODUCE_VERSION, entry.body))
            state.sent += 1

    def _produce_body(self, state: _Partition, header: bytes, records: Any) -> list[Any]:
        """Produce v8 with one topic, one partition and one batch (v3+ allows one batch per partition),
        as chunks that BrokerClient joins with the frame header in one copy."""
        topic = state.topic.encode()
        txn = self.transaction.transactional_id.encode() if self.transaction is not None else None
        head = b"".join((
            struct.pack(">h", len(txn)) + txn if txn is not None else struct.pack(">h", -1),
            struct.pack(">hii", self.acks, self.request_timeout_ms, 1),
            struct.pack(">h", len(topic)), topic,
            struct.pack(">iii", 1, state.partition, len(header) + len(records)), header,
        ))
        return [head, memoryview(records)]

    def _retry_later(self, state: _Partition, error: str) -> None:
        """Back off before resending; give up once the partition has failed for delivery.timeout.ms."""
        now = time.monotonic()
        if state.failing_since is None:
            state.failing_since = now
        if now + state.backoff - state.failing_since >= self.delivery_timeout_s:
            raise DeliveryError(
                f"Rows for {state.name} were not acknowledged within delivery.timeout.ms "
                f"({self.delivery_timeout_s:.0f} s); last error: {error}")
        log.info("strom sink: resending %s from sequence %s in %.1f s after %s", state.name,
                 state.entries[0].base_sequence if state.entries else "-", state.backoff, error)
        self.retries += 1
        state.retry_at = now + state.backoff
        state.backoff = min(1.0, state.backoff * 2)

    # -- answers -------------------------------------------------------------------------
    def _collect(self, *, block: bool) -> None:
        """Handle the answers that arrived (waiting for one when ``block``), then send again."""
        if block:
            waiting = [p.entries[i].future for p in self.partitions.values() for i in range(p.sent)]
            if waiting:
                concurrent.futures.wait(waiting, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED)
            else:
                delay = min((p.retry_at for p in self.partitions.values() if p.entries), default=0) - time.monotonic()
                if delay > 0:
                    time.sleep(min(delay, 0.5))
        for state in self.partitions.values():
            self._answers(state)
            self._pump(state)

    def _answers(self, state: _Partition) -> None:
        """Take the partition's answers in order; a retriable failure resends from the first unacknowledged."""
        while state.sent and state.entries[0].future is not None and state.entries[0].future.done():
            entry = state.entries[0]
            error = self._outcome(state, entry)
            if error is None:
                state.entries.popleft()
                state.sent -= 1
                self.buffered -= entry.size
                self.rows_acknowledged += entry.count
                state.backoff = 0.1
                state.failing_since = None
                continue
            # Retriable: wait for the rest of the window (requests behind a failed one fail too,
            # OUT_OF_ORDER_SEQUENCE_NUMBER or the same error), then resend all from this batch.
            state.draining = True
            if any(not state.entries[i].future.done() for i in range(state.sent)):  # type: ignore[union-attr]
                return
            for i in range(state.sent):
                state.entries[i].future = None
            state.sent = 0
            state.draining = False
            self._retry_later(state, error)
            return

    def _outcome(self, state: _Partition, entry: _Entry) -> str | None:
        """None when written (or a duplicate of a written batch), else the retriable error; raises otherwise."""
        assert entry.future is not None
        try:
            body = entry.future.result()
        except (ConnectionError, TimeoutError, OSError) as exc:
            return f"connection lost: {exc!r}"
        resp = codec.response_class(ApiKey.PRODUCE).decode(body, version=PRODUCE_VERSION)
        part = resp.responses[0].partition_responses[0]
        code = part.error_code
        if code == DUPLICATE_SEQUENCE_NUMBER:
            self.duplicates += 1
            return None
        if code == 0:
            return None
        if code in RETRIABLE:
            return f"{error_name(code)} (error {code})"
        detail = f": {part.error_message}" if getattr(part, "error_message", None) else ""
        hint = ""
        if code == MESSAGE_TOO_LARGE:
            hint = (f" A batch of {entry.size} bytes holding {entry.count} row(s) is larger than the topic's "
                    "max.message.bytes (rows are never split; batches follow kafka.batch.size).")
        raise DeliveryError(f"Produce to {state.name} failed: {error_name(code)} (error {code}){detail}.{hint}")
