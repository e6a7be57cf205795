"""Every API and version can answer UNKNOWN_SERVER_ERROR, mirroring the request's topics and partitions."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from kafka.protocol.consumer import ListOffsetsRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest

from strom.broker import handlers
from strom.broker.error_response import encode_error_response, error_response
from strom.protocol import codec
from strom.protocol.api_keys import SUPPORTED_VERSIONS


def _api_versions() -> list[tuple[int, int]]:
    pairs = []
    for info in pkgutil.iter_modules(handlers.__path__):
        module = importlib.import_module(f"{handlers.__name__}.{info.name}")
        lo, hi = getattr(module, "VERSIONS", None) or SUPPORTED_VERSIONS[module.API_KEY]
        pairs += [(int(module.API_KEY), v) for v in range(lo, hi + 1)]
    return pairs


def _roundtrip(request: Any, version: int) -> Any:
    return type(request).decode(request.encode(version=version), version=version)


@pytest.mark.parametrize(("api_key", "version"), _api_versions())
def test_every_version_encodes(api_key: int, version: int) -> None:
    request = _roundtrip(codec.request_class(api_key)(version=version), version)
    header = codec.RequestHeader(api_key, version, 7, "test", codec.is_flexible(api_key, version))
    frame = encode_error_response(header, request, -1)
    head_size = 9 if header.flexible and api_key != 18 else 8
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 7
    cls = codec.response_class(api_key)
    decoded = cls.decode(frame[head_size:], version=version)  # ApiVersions reads an error body as v0
    field = cls.fields.get("error_code")
    if api_key == 50:  # DescribeUserScramCredentials fails per user: librdkafka aborts on a top-level error
        assert (decoded.error_code, [(r.user, r.error_code) for r in decoded.results]) == (0, [("", -1)])
    elif field is not None and field.for_version_q(decoded.version if api_key == 18 else version):
        assert decoded.error_code == -1


@pytest.mark.parametrize("version", [1, 4, 11])
def test_list_offsets_mirrors_partitions(version: int) -> None:
    t = ListOffsetsRequest.ListOffsetsTopic
    request = _roundtrip(ListOffsetsRequest(version=version, replica_id=-1, topics=[
        t(name="a", partitions=[t.ListOffsetsPartition(partition_index=i, timestamp=-1) for i in (0, 3)])]), version)
    resp = error_response(2, version, request, -1)
    resp = type(resp).decode(resp.encode(version=version), version=version)
    assert [(t.name, p.partition_index, p.error_code, p.offset) for t in resp.topics for p in t.partitions] == \
        [("a", 0, -1, -1), ("a", 3, -1, -1)]


@pytest.mark.parametrize("version", [0, 12, 13])
def test_metadata_mirrors_topics(version: int) -> None:
    request = MetadataRequest(version=version, topics=[MetadataRequest.MetadataRequestTopic(name="x")])
    resp = error_response(3, version, _roundtrip(request, version), -1)
    resp = type(resp).decode(resp.encode(version=version), version=version)
    assert [(t.name, t.error_code) for t in resp.topics] == [("x", -1)]


@pytest.mark.parametrize("version", [1, 7, 8, 9])
def test_offset_fetch_mirrors_partitions(version: int) -> None:
    if version >= 8:
        g = OffsetFetchRequest.OffsetFetchRequestGroup
        request = OffsetFetchRequest(version=version, groups=[g(group_id="g", topics=[
            g.OffsetFetchRequestTopics(name="t", partition_indexes=[2])])])
    else:
        t = OffsetFetchRequest.OffsetFetchRequestTopic
        request = OffsetFetchRequest(version=version, group_id="g", topics=[t(name="t", partition_indexes=[2])])
    resp = error_response(9, version, _roundtrip(request, version), -1)
    resp = type(resp).decode(resp.encode(version=version), version=version)
    topics = resp.groups[0].topics if version >= 8 else resp.topics
    assert [(t.name, p.partition_index, p.error_code) for t in topics for p in t.partitions] == [("t", 2, -1)]


@pytest.mark.parametrize("version", [0, 2, 4])
def test_offset_for_leader_epoch_mirrors_partitions(version: int) -> None:
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest

    t = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    request = _roundtrip(OffsetForLeaderEpochRequest(version=version, replica_id=-1, topics=[
        t(topic="a", partitions=[t.OffsetForLeaderPartition(partition=i, leader_epoch=0) for i in (1, 2)])]), version)
    resp = error_response(23, version, request, -1)
    resp = type(resp).decode(resp.encode(version=version), version=version)
    assert [(t.topic, p.partition, p.error_code, p.end_offset) for t in resp.topics for p in t.partitions] == \
        [("a", 1, -1, -1), ("a", 2, -1, -1)]
