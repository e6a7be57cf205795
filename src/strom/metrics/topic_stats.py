"""BrokerTopicStats: bytes and messages in and out per topic (Kafka's BrokerTopicMetrics).

Updated by the ReplicaManager on every append and fetch, so each update is a few attribute
increments on a per-topic object. Broker-wide totals are the sums, taken at scrape time.
Traffic between replicas is counted apart, broker-wide, as Kafka's ReplicationBytes{In,Out}.
"""

from __future__ import annotations

from typing import Any

from strom.metrics.request_metrics import RequestMetrics
from strom.protocol.api_keys import ApiKey

# The per-topic counters, in the order snapshot() lists them; names are Kafka's, lower-cased.
TOPIC_COUNTERS = ("bytesin", "bytesout", "messagesin", "bytesrejected", "totalproducerequests",
                  "totalfetchrequests", "failedproducerequests", "failedfetchrequests")


class TopicStats:
    __slots__ = TOPIC_COUNTERS

    def __init__(self) -> None:
        for name in TOPIC_COUNTERS:
            setattr(self, name, 0)


class BrokerTopicStats:
    def __init__(self, request_metrics: RequestMetrics | None = None) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0
        self._requests = request_metrics  # per-partition errors also count in the API's error counts

    def _new(self, topic: str) -> TopicStats:
        st = self.topics[topic] = TopicStats()
        return st

    def record_append(self, topic: str, nbytes: int, info: Any) -> None:
        """A produce (or coordinator) append to a partition this broker leads succeeded."""
        st = self.topics.get(topic) or self._new(topic)
        st.totalproducerequests += 1
        st.bytesin += nbytes
        if not info.duplicate:
            st.messagesin += info.record_count

    def record_failed_append(self, topic: str, nbytes: int, error_code: int, rejected: bool) -> None:
        """An append failed; `rejected` when the records themselves were refused (too large, corrupt)."""
        st = self.topics.get(topic) or self._new(topic)
        st.totalproducerequests += 1
        st.failedproducerequests += 1
        if rejected:
            st.bytesrejected += nbytes
        if self._requests is not None:
            self._requests.record_error(ApiKey.PRODUCE, error_code)

    def record_produce_error(self, error_code: int) -> None:
        """An acks=all produce failed after its append (timed out waiting for the ISR)."""
        if self._requests is not None:
            self._requests.record_error(ApiKey.PRODUCE, error_code)

    def record_fetch(self, params: Any, results: Any) -> None:
        """A fetch answered: bytes out per topic for consumers, replication bytes for followers."""
        if params.replica_id >= 0:
            self.replication_bytes_out += sum(r.size for r in results)
            for r in results:
                if r.error_code and self._requests is not None:
                    self._requests.record_error(ApiKey.FETCH, r.error_code)
            return
        topics = self.topics
        for req, r in zip(params.partitions, results, strict=False):
            st = topics.get(req.topic) or self._new(req.topic)
            st.totalfetchrequests += 1
            if r.error_code:
                st.failedfetchrequests += 1
                if self._requests is not None:
                    self._requests.record_error(ApiKey.FETCH, r.error_code)
            else:
                st.bytesout += r.size

    def record_replication_in(self, nbytes: int) -> None:
        self.replication_bytes_in += nbytes

    def snapshot(self) -> tuple[dict[str, tuple[int, ...]], int, int]:
        return ({t: tuple(getattr(st, n) for n in TOPIC_COUNTERS) for t, st in self.topics.items()},
                self.replication_bytes_in, self.replication_bytes_out)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series disappear (as Kafka removes its topic metrics)."""
        self.topics.pop(topic, None)
