"""The follower's hand-written Fetch v12 codec agrees with the generic codec, byte for byte."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from strom.protocol.codec import MalformedRequest
from strom.protocol.inter_broker import build
from strom.protocol.replica_fetch import FETCH_VERSION, FetchPartition, decode_response, encode_request


def test_request_bytes_match_the_generic_codec() -> None:
    topics = {"orders": [FetchPartition(0, 3, 1234, 2, 10, 1 << 20), FetchPartition(7, 3, 0, -1, 0, 4096)],
              "ünïcode": [FetchPartition(1, 0, 5, 0, 0, 100)]}
    generic = build(FetchRequest, replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=0x7FFFFFFF,
                    isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                    topics=[{"topic": t, "partitions": [p._asdict() for p in ps]} for t, ps in topics.items()])
    assert encode_request(2, 500, 1, 0x7FFFFFFF, topics) == bytes(generic.encode(version=FETCH_VERSION))


def _response(partitions: list[dict]) -> bytes:
    return bytes(build(FetchResponse, throttle_time_ms=0, error_code=0, session_id=0,
                       responses=[{"topic": "t", "partitions": partitions}]).encode(version=FETCH_VERSION))


def test_response_partitions_records_and_skipped_fields() -> None:
    body = _response([
        {"partition_index": 1, "error_code": 0, "high_watermark": 50, "last_stable_offset": 40,
         "log_start_offset": 7, "aborted_transactions": [{"producer_id": 9, "first_offset": 3}],
         "preferred_read_replica": -1, "records": b"batch-bytes",
         "diverging_epoch": {"epoch": 4, "end_offset": 30}},
        {"partition_index": 2, "error_code": 6, "high_watermark": -1, "last_stable_offset": -1,
         "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": None},
    ])
    error, parts = decode_response(body)
    assert error == 0
    assert [(p.topic, p.partition, p.error_code, p.high_watermark, p.log_start_offset) for p in parts] == [
        ("t", 1, 0, 50, 7), ("t", 2, 6, -1, -1)]
    assert bytes(parts[0].records) == b"batch-bytes" and parts[1].records is None


def test_truncated_response_is_an_error_not_a_short_read() -> None:
    body = _response([{"partition_index": 1, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
                       "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1,
                       "records": b"x" * 100}])
    with pytest.raises(MalformedRequest):
        decode_response(body[:60])
