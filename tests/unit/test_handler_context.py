"""Handlers run against a context built from small real objects and fakes, without a KafkaServer."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.metadata import MetadataRequest

from strom.broker.handlers import describe_cluster, metadata
from strom.broker.request import BrokerServices, RequestContext
from strom.broker.session import Session
from strom.config.listeners import EndPoint
from strom.metadata.embedded import EmbeddedMetadataStore
from strom.metadata.store import BrokerInfo
from strom.protocol.codec import RequestHeader


def _context(tmp_path: Path, api_key: int, version: int) -> RequestContext:
    store = EmbeddedMetadataStore(tmp_path, broker_id=1, cluster_id="test-cluster")
    store.register_broker(BrokerInfo(1, "broker-1.example", 9092))
    store.create_topic("orders", {0: [1], 1: [1]}, {})
    unused: Any = SimpleNamespace()  # a handler touching it fails loudly
    services = BrokerServices(
        broker_id=1, config=SimpleNamespace(get=lambda key: False), metadata=store,  # type: ignore[arg-type]
        replica_manager=SimpleNamespace(offline_partitions=[]),  # type: ignore[arg-type]
        admin_manager=unused, group_coordinator=unused, producer_id_manager=unused, apis=unused,
    )
    return RequestContext(RequestHeader(api_key, version, 1, "test", version >= 9), services, "127.0.0.1",
                          Session.for_connection(EndPoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092), "127.0.0.1"))


def test_describe_cluster_reads_the_injected_store(tmp_path: Path) -> None:
    ctx = _context(tmp_path, describe_cluster.API_KEY, 0)
    resp = asyncio.run(describe_cluster.handle(ctx, DescribeClusterRequest(version=0)))
    assert resp.cluster_id == "test-cluster"
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [(1, "broker-1.example", 9092)]
    resp.encode(version=0)


@pytest.mark.parametrize("version", [1, 12])
def test_metadata_answers_known_and_unknown_topics(tmp_path: Path, version: int) -> None:
    ctx = _context(tmp_path, metadata.API_KEY, version)
    wanted = [MetadataRequest.MetadataRequestTopic(name=n, topic_id=uuid.UUID(int=0)) for n in ("orders", "nope")]
    request = MetadataRequest(version=version, topics=wanted, allow_auto_topic_creation=False)
    resp = asyncio.run(metadata.handle(ctx, request))
    by_name = {t.name: t for t in resp.topics}
    assert by_name["orders"].error_code == 0
    assert sorted(p.partition_index for p in by_name["orders"].partitions) == [0, 1]
    assert by_name["nope"].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    resp.encode(version=version)


def test_context_without_server_refuses_the_transitional_accessor(tmp_path: Path) -> None:
    ctx = _context(tmp_path, metadata.API_KEY, 1)
    with pytest.raises(AttributeError):
        _ = ctx.server
