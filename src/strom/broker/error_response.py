"""The response a request gets when its handler fails unexpectedly (Kafka's ``getErrorResponse``).

Kafka answers such a request with UNKNOWN_SERVER_ERROR and keeps the connection. The error goes
in every ``error_code`` the client reads: the top-level one, and for APIs that address topics,
partitions or keys, one entry per item of the request, so a client maps the failure back to what
it asked for. APIs without a builder here get the generic answer: the version's response with
default fields, empty arrays and the top-level ``error_code`` set when the schema has one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from strom.protocol import codec
from strom.protocol.api_keys import ApiKey

ZERO_UUID = uuid.UUID(int=0)
Builder = Callable[[int, Any, int], Any]
_BUILDERS: dict[int, Builder] = {}


def _builder(api_key: ApiKey) -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        _BUILDERS[api_key] = fn
        return fn
    return register


def _has_field(cls: Any, name: str, version: int) -> bool:
    field = cls.fields.get(name)
    return field is not None and field.for_version_q(version)


def generic_error_response(api_key: int, version: int, code: int) -> Any:
    """The version's response with defaults and empty arrays, plus the top-level error when it exists."""
    cls = codec.response_class(api_key)
    response = cls(version=version)
    if _has_field(cls, "error_code", version):
        response.error_code = code
    return response


def encode_error_response(header: codec.RequestHeader, request: Any, code: int) -> bytes:
    """The framed error response; an ApiVersions error is a v0 body, which is how clients read one."""
    version = 0 if header.api_key == ApiKey.API_VERSIONS else header.api_version
    response = error_response(header.api_key, version, request, code)
    return codec.frame_response(header, response.encode(version=version))


def error_response(api_key: int, version: int, request: Any, code: int) -> Any:
    """The response for a request whose handler failed: mirrors the request's items where we know how."""
    builder = _BUILDERS.get(api_key)
    if builder is None:
        return generic_error_response(api_key, version, code)
    return builder(version, request, code)


@_builder(ApiKey.METADATA)
def _metadata(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.metadata import MetadataResponse

    topic = MetadataResponse.MetadataResponseTopic
    topics = [topic(error_code=code, name=t.name, topic_id=t.topic_id or ZERO_UUID, is_internal=False, partitions=[])
              for t in request.topics or ()]
    response = MetadataResponse(version=version, brokers=[], topics=topics)
    if version >= 13:
        response.error_code = code
    return response


@_builder(ApiKey.PRODUCE)
def _produce(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.producer import ProduceResponse

    topic = ProduceResponse.TopicProduceResponse
    part = topic.PartitionProduceResponse
    return ProduceResponse(version=version, throttle_time_ms=0, responses=[
        topic(name=t.name, topic_id=getattr(t, "topic_id", None) or ZERO_UUID, partition_responses=[
            part(index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
                 record_errors=[], error_message=None) for p in t.partition_data])
        for t in request.topic_data])


@_builder(ApiKey.LIST_OFFSETS)
def _list_offsets(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.consumer import ListOffsetsResponse

    topic = ListOffsetsResponse.ListOffsetsTopicResponse
    part = topic.ListOffsetsPartitionResponse
    return ListOffsetsResponse(version=version, topics=[
        topic(name=t.name, partitions=[part(partition_index=p.partition_index, error_code=code, old_style_offsets=[],
                                            timestamp=-1, offset=-1, leader_epoch=-1) for p in t.partitions])
        for t in request.topics])


@_builder(ApiKey.OFFSET_FOR_LEADER_EPOCH)
def _offset_for_leader_epoch(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.consumer import OffsetForLeaderEpochResponse

    topic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    part = topic.EpochEndOffset
    return OffsetForLeaderEpochResponse(version=version, throttle_time_ms=0, topics=[
        topic(topic=t.topic, partitions=[part(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1)
                                         for p in t.partitions])
        for t in request.topics])


@_builder(ApiKey.CREATE_TOPICS)
def _create_topics(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.admin import CreateTopicsResponse

    result = CreateTopicsResponse.CreatableTopicResult
    return CreateTopicsResponse(version=version, topics=[
        result(name=t.name, topic_id=ZERO_UUID, error_code=code, error_message=None, num_partitions=-1,
               replication_factor=-1, configs=[])
        for t in request.topics])


@_builder(ApiKey.DELETE_TOPICS)
def _delete_topics(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.admin import DeleteTopicsResponse

    result = DeleteTopicsResponse.DeletableTopicResult
    wanted = [(t.name, t.topic_id) for t in request.topics] if version >= 6 else \
        [(n, ZERO_UUID) for n in request.topic_names]
    return DeleteTopicsResponse(version=version, responses=[
        result(name=name, topic_id=topic_id, error_code=code, error_message=None) for name, topic_id in wanted])


@_builder(ApiKey.FIND_COORDINATOR)
def _find_coordinator(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.metadata import FindCoordinatorResponse

    if version >= 4:
        coordinator = FindCoordinatorResponse.Coordinator
        return FindCoordinatorResponse(version=version, coordinators=[
            coordinator(key=key, node_id=-1, host="", port=-1, error_code=code, error_message=None)
            for key in request.coordinator_keys])
    return FindCoordinatorResponse(version=version, error_code=code, error_message=None, node_id=-1, host="",
                                   port=-1)


@_builder(ApiKey.JOIN_GROUP)
def _join_group(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.consumer import JoinGroupResponse

    return JoinGroupResponse(version=version, error_code=code, generation_id=-1, protocol_type=None,
                             protocol_name=None if version >= 7 else "", leader="",
                             member_id=request.member_id or "", members=[])


@_builder(ApiKey.SYNC_GROUP)
def _sync_group(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.consumer import SyncGroupResponse

    return SyncGroupResponse(version=version, error_code=code, protocol_type=None, protocol_name=None,
                             assignment=b"")


@_builder(ApiKey.OFFSET_COMMIT)
def _offset_commit(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.consumer import OffsetCommitResponse

    topic = OffsetCommitResponse.OffsetCommitResponseTopic
    part = topic.OffsetCommitResponsePartition
    return OffsetCommitResponse(version=version, topics=[
        topic(name=t.name, topic_id=t.topic_id,
              partitions=[part(partition_index=p.partition_index, error_code=code) for p in t.partitions])
        for t in request.topics])


@_builder(ApiKey.OFFSET_FETCH)
def _offset_fetch(version: int, request: Any, code: int) -> Any:
    from kafka.protocol.consumer import OffsetFetchResponse

    if version >= 8:
        group = OffsetFetchResponse.OffsetFetchResponseGroup
        topic = group.OffsetFetchResponseTopics
        part = topic.OffsetFetchResponsePartitions
        return OffsetFetchResponse(version=version, groups=[
            group(group_id=g.group_id, error_code=code, topics=[
                topic(name=t.name, topic_id=t.topic_id, partitions=[
                    part(partition_index=i, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                         error_code=code) for i in t.partition_indexes])
                for t in g.topics or ()])
            for g in request.groups])
    topic = OffsetFetchResponse.OffsetFetchResponseTopic
    part = topic.OffsetFetchResponsePartition
    response = OffsetFetchResponse(version=version, topics=[
        topic(name=t.name, partitions=[part(partition_index=i, committed_offset=-1, committed_leader_epoch=-1,
                                            metadata="", error_code=code) for i in t.partition_indexes])
        for t in request.topics or ()])
    if version >= 2:
        response.error_code = code
    return response


@_builder(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def _describe_user_scram_credentials(version: int, request: Any, code: int) -> Any:
    from strom.broker.handlers.describe_user_scram_credentials import refusal

    return refusal(request, code, "Unexpected error while describing SCRAM credentials")
