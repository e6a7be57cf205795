"""BrokerTopicStats: bytes and messages in and out per topic (Kafka's BrokerTopicMetrics).

Updated by the ReplicaManager on every append and fetch, so each update is a few attribute
increments on a per-topic object. Broker-wide totals are the sums, taken at scrape time.
Traffic between replicas is counted apart, broker-wide, as Kafka's ReplicationBytes{In,Out}.
"""

from __future__ import annotations

from typing import Any

from strom.metrics.request_metrics import RequestMetrics
from strom.protocol.api_keys import ApiKey

# The per-topic counters, in the order of a topic's counts list; names are Kafka's, lower-cased.
TOPIC_COUNTERS = ("bytesin", "bytesout", "messagesin", "bytesrejected", "totalproducerequests",
                  "totalfetchrequests", "failedproducerequests", "failedfetchrequests",
                  "producemessageconversions", "fetchmessageconversions")
(BYTES_IN, BYTES_OUT, MESSAGES_IN, BYTES_REJECTED, TOTAL_PRODUCE, TOTAL_FETCH, FAILED_PRODUCE,
 FAILED_FETCH, PRODUCE_CONVERSIONS, FETCH_CONVERSIONS) = range(len(TOPIC_COUNTERS))


class BrokerTopicStats:
    def __init__(self, request_metrics: RequestMetrics | None = None) -> None:
        self.topics: dict[str, list[int]] = {}  # topic -> counts, indexed as TOPIC_COUNTERS
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0
        self._requests = request_metrics  # per-partition errors also count in the API's error counts

    def _new(self, topic: str) -> list[int]:
        counts = self.topics[topic] = [0] * len(TOPIC_COUNTERS)
        return counts

    def record_append(self, topic: str, nbytes: int, info: Any) -> None:
        """A produce (or coordinator) append to a partition this broker leads succeeded."""
        c = self.topics.get(topic) or self._new(topic)
        c[4] += 1  # TOTAL_PRODUCE (literal indexes: this runs for every partition of every produce)
        c[0] += nbytes  # BYTES_IN
        if not info.duplicate:
            c[2] += info.record_count  # MESSAGES_IN

    def record_failed_append(self, topic: str, nbytes: int, error_code: int, rejected: bool) -> None:
        """An append failed; `rejected` when the records themselves were refused (too large, corrupt)."""
        c = self.topics.get(topic) or self._new(topic)
        c[TOTAL_PRODUCE] += 1
        c[FAILED_PRODUCE] += 1
        if rejected:
            c[BYTES_REJECTED] += nbytes
        if self._requests is not None:
            self._requests.record_error(ApiKey.PRODUCE, error_code)

    def record_produce_error(self, error_code: int) -> None:
        """An acks=all produce failed after its append (timed out waiting for the ISR)."""
        if self._requests is not None:
            self._requests.record_error(ApiKey.PRODUCE, error_code)

    def record_fetch(self, params: Any, results: Any) -> None:
        """A fetch answered: bytes out per topic for consumers, replication bytes for followers."""
        if params.replica_id >= 0:
            for r in results:
                self.replication_bytes_out += r.size
                if r.error_code and self._requests is not None:
                    self._requests.record_error(ApiKey.FETCH, r.error_code)
            return
        topics = self.topics
        for req, r in zip(params.partitions, results, strict=False):
            c = topics.get(req.topic) or self._new(req.topic)
            c[TOTAL_FETCH] += 1
            if r.error_code:
                c[FAILED_FETCH] += 1
                if self._requests is not None:
                    self._requests.record_error(ApiKey.FETCH, r.error_code)
            else:
                c[BYTES_OUT] += r.size

    def record_conversions(self, topic: str, produce: bool, records: int) -> None:
        """Records converted between message formats: v0/v1 produced (up-converted) or fetched (down-converted)."""
        c = self.topics.get(topic) or self._new(topic)
        c[PRODUCE_CONVERSIONS if produce else FETCH_CONVERSIONS] += records

    def record_replication_in(self, nbytes: int) -> None:
        self.replication_bytes_in += nbytes

    def snapshot(self) -> tuple[dict[str, tuple[int, ...]], int, int]:
        return ({t: tuple(c) for t, c in self.topics.items()}, self.replication_bytes_in, self.replication_bytes_out)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series disappear (as Kafka removes its topic metrics)."""
        self.topics.pop(topic, None)
