"""BrokerClient against a real broker: the APIs a controller and a replica fetcher use,
pipelining, and connection loss and recovery."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from strom.client.broker_client import BrokerClient
from strom.protocol import replica_fetch
from strom.protocol.api_keys import ApiKey
from strom.protocol.record_batch import build_batch, parse_header
from tests.support.broker import BrokerProcess


def run(test: Callable[[BrokerClient], Coroutine[Any, Any, None]], broker: BrokerProcess, **kw: Any) -> None:
    async def main() -> None:
        client = BrokerClient("127.0.0.1", broker.port, request_timeout_ms=20000, **kw)
        try:
            await asyncio.wait_for(test(client), 60)
        finally:
            await client.close()

    asyncio.run(main())


def create_topic(name: str, validate_only: bool = False) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=validate_only)


def fetch_request(topic: str, topic_id: uuid.UUID, offset: int, max_wait_ms: int = 0) -> FetchRequest:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                                  log_start_offset=-1, partition_max_bytes=1 << 20)
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                        topics=[FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[part])])


async def new_topic(client: BrokerClient) -> tuple[str, uuid.UUID]:
    name = f"bc-{uuid.uuid4().hex[:8]}"
    created = await client.send(create_topic(name), 7)
    assert created.topics[0].error_code == 0
    meta = await client.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                             allow_auto_topic_creation=False), 12)
    assert meta.topics[0].error_code == 0
    return name, meta.topics[0].topic_id


def test_api_versions_metadata_produce_and_raw_fetch(broker: BrokerProcess) -> None:
    async def scenario(client: BrokerClient) -> None:
        assert not client.connected
        versions = await client.send(ApiVersionsRequest(client_software_name="strom", client_software_version="1"), 3)
        assert client.connected and versions.error_code == 0
        assert {k.api_key for k in versions.api_keys} >= {ApiKey.FETCH, ApiKey.METADATA}

        topic, topic_id = await new_topic(client)
        assert isinstance(topic_id, uuid.UUID)
        batch = build_batch([(b"k", b"replicate-me", [], 1_700_000_000_000)])
        produced = await client.send(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), 9)
        assert produced.responses[0].partition_responses[0].error_code == 0

        req = fetch_request(topic, topic_id, 0)
        body = await client.send_raw(ApiKey.FETCH, 12, req.encode(version=12))  # the follower's version
        error_code, partitions = replica_fetch.decode_response(body)
        assert error_code == 0 and len(partitions) == 1
        part = partitions[0]
        assert part.topic == topic and part.error_code == 0 and part.high_watermark == 1
        assert part.records is not None
        header = parse_header(part.records)
        assert header.base_offset == 0 and header.records_count == 1
        # Past the base offset, batch length and leader epoch the bytes are the producer's own.
        assert bytes(part.records[16:len(batch)]) == batch[16:]

        body = await client.send_raw(ApiKey.FETCH, 13, req.encode(version=13))  # topics by id
        fetched = FetchResponse.decode(body, version=13).responses[0]
        assert fetched.topic_id == topic_id and fetched.partitions[0].records[16:len(batch)] == batch[16:]

    run(scenario, broker)


def test_pipelined_requests_are_matched_by_correlation_id(broker: BrokerProcess) -> None:
    async def scenario(client: BrokerClient) -> None:
        names = [f"pipe-{i}-{uuid.uuid4().hex[:6]}" for i in range(10)]
        answers = await asyncio.gather(*(client.send(create_topic(n, validate_only=True), 7) for n in names))
        assert [a.topics[0].name for a in answers] == names
        assert all(a.topics[0].error_code == 0 for a in answers)

    run(scenario, broker)


def test_connection_loss_fails_pending_requests_and_client_reconnects(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    b = broker_factory()

    async def scenario(client: BrokerClient) -> None:
        topic, topic_id = await new_topic(client)
        # A long-poll Fetch on an empty partition stays pending at the broker.
        waiting = asyncio.create_task(client.send(fetch_request(topic, topic_id, 0, max_wait_ms=30000), 13))
        while not client._pending:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(b.kill9)
        try:
            await waiting
            raise AssertionError("a pending request survived the broker's death")
        except ConnectionError:
            pass
        assert not client.connected
        try:
            await client.send(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
            raise AssertionError("a send to a dead broker succeeded")
        except ConnectionError:
            pass

        await asyncio.to_thread(b.start)
        meta = await client.send(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        assert client.connected and topic in {t.name for t in meta.topics}

    run(scenario, b)


def test_timeout_drops_the_connection(broker: BrokerProcess) -> None:
    async def scenario(client: BrokerClient) -> None:
        topic, topic_id = await new_topic(client)
        client.request_timeout_s = 0.2  # the long poll below outlasts it
        try:
            await client.send(fetch_request(topic, topic_id, 0, max_wait_ms=10000), 13)
            raise AssertionError("the long poll answered before its max wait")
        except TimeoutError:
            pass
        assert not client.connected
        client.request_timeout_s = 20
        meta = await client.send(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        assert client.connected and topic in {t.name for t in meta.topics}

    run(scenario, broker)
