"""The hand-written Produce response must be byte-identical to the generic codec's."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceResponse

from strom.broker.handlers.produce import PartitionResult, encode_response

R = ProduceResponse
TR = R.TopicProduceResponse
PR = TR.PartitionProduceResponse


@pytest.mark.parametrize("version", range(3, 11))
def test_matches_generic_codec(version: int) -> None:
    results = [("topic-a", [PartitionResult(0, 0, 42, -1, 0), PartitionResult(1, 10, -1, -1, -1, "too big")]),
               ("b", [PartitionResult(7, 0, 0, 1_700_000_000_000, 5)])]
    generic = R(throttle_time_ms=0, responses=[
        TR(name=name, partition_responses=[
            PR(index=p.index, error_code=p.error_code, base_offset=p.base_offset,
               log_append_time_ms=p.log_append_time_ms, log_start_offset=p.log_start_offset, record_errors=[],
               error_message=p.error_message) for p in parts])
        for name, parts in results])
    assert encode_response(version, results) == bytes(generic.encode(version=version))
    decoded = R.decode(encode_response(version, results), version=version)
    assert decoded.responses[0].partition_responses[0].base_offset == 42
