"""A handler that fails unexpectedly costs its request UNKNOWN_SERVER_ERROR, not the client's connection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from strom.broker.apis import FAIL_API_ENV
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

UNKNOWN_SERVER_ERROR = -1


@pytest.fixture(scope="module")
def failing_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Metadata (3) and Produce (0) handlers always raise."""
    b = BrokerProcess(tmp_path_factory.mktemp("failing"), env={FAIL_API_ENV: "0,3"})
    b.start()
    try:
        yield b
    finally:
        b.close()


def _api_versions_ok(c: RawClient) -> bool:
    return decode(ApiVersionsResponse, c.request(ApiVersionsRequest(), 3), 3, False).error_code == 0


def _produce(acks: int) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=None)])])


@pytest.mark.parametrize("version", [1, 9, 12])
def test_failed_metadata_gets_error_and_connection_stays(failing_broker: BrokerProcess, version: int) -> None:
    c = RawClient(failing_broker)
    try:
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")],
                              allow_auto_topic_creation=False)
        resp = decode(MetadataResponse, c.request(req, version), version, version >= 9)
        assert [(t.name, t.error_code) for t in resp.topics] == [("orders", UNKNOWN_SERVER_ERROR)]
        assert _api_versions_ok(c)  # same socket still answers
    finally:
        c.close()
    assert "unexpected error handling METADATA" in failing_broker.log_tail(200)


def test_failed_produce_with_acks_answers_and_acks0_closes(failing_broker: BrokerProcess) -> None:
    c = RawClient(failing_broker)
    try:
        resp = decode(ProduceResponse, c.request(_produce(acks=1), 7), 7, False)
        # every partition of the request carries the error (as Kafka's error response for Produce)
        assert [(t.name, [p.error_code for p in t.partition_responses]) for t in resp.responses] == [
            ("t", [UNKNOWN_SERVER_ERROR])]
        assert _api_versions_ok(c)
        c.correlation += 1
        req = _produce(acks=0)
        req.with_header(correlation_id=c.correlation, client_id="raw")
        c.send_raw(bytes(req.encode(version=7, header=True, framed=True)))
        assert c.is_closed_by_peer()  # no response can carry the error, so Kafka closes
    finally:
        c.close()
