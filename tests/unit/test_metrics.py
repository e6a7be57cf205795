"""Metrics building blocks: the listener setting, request histograms, error counting, rendering."""

from __future__ import annotations

import pytest
from tests.support.metrics import Samples

from strom.config.metrics_listener import parse_metrics_listener
from strom.metrics.collector import PartitionSnapshot, Snapshot, render
from strom.metrics.request_metrics import RequestMetrics, api_name, count_response_errors, error_name
from strom.protocol import codec
from strom.protocol.api_keys import ApiKey


@pytest.mark.parametrize(("value", "expected"), [
    ("", None), ("  ", None), ("http://127.0.0.1:9308", ("127.0.0.1", 9308)), ("127.0.0.1:9308", ("127.0.0.1", 9308)),
    ("http://[::1]:9308/", ("::1", 9308)), ("http://0.0.0.0:0", ("0.0.0.0", 0)), ("http://:9308", ("", 9308)),
])
def test_metrics_listener_values(value: str, expected: tuple[str, int] | None) -> None:
    assert parse_metrics_listener(value) == expected


@pytest.mark.parametrize("value", ["ftp://h:1", "http://h", "http://h:70000", "http://h:1/metrics", "h:x"])
def test_bad_metrics_listener_values(value: str) -> None:
    with pytest.raises(ValueError):
        parse_metrics_listener(value)


def test_names_follow_kafka() -> None:
    assert api_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert api_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(10) == "MESSAGE_TOO_LARGE"


def test_request_times_split_into_queue_local_remote_send() -> None:
    m = RequestMetrics()
    # Arrived at 0, handled 1 ms .. 3 ms, waited 100 ms for the ISR, written at 104 ms.
    m.record(ApiKey.PRODUCE, 9, 0.0, 0.001, 0.003, 0.100, 0.104)
    m.record(ApiKey.PRODUCE, 9, 0.0, 0.0, 0.0, 0.0, 0.0)
    m.record(ApiKey.PRODUCE, 7, 0.0, 0.0, 0.0, 0.0, 0.0)
    snap = Snapshot(broker_id=0, state=3, ready=True, requests=m.snapshot())
    s = Samples(render(snap).decode())
    assert s.get("kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 2
    assert s.get("kafka_network_requestmetrics_requests_total", request="Produce", version="7") == 1
    expected = {"requestqueuetimems": 1, "localtimems": 2, "remotetimems": 100, "responsesendtimems": 1,
                "totaltimems": 104}
    for hist, ms in expected.items():
        assert s.get(f"kafka_network_requestmetrics_{hist}_sum", request="Produce") == pytest.approx(ms)
        assert s.get(f"kafka_network_requestmetrics_{hist}_count", request="Produce") == 3
    assert s.get("kafka_network_requestmetrics_remotetimems_bucket", request="Produce", le="50.0") == 2
    assert s.get("kafka_network_requestmetrics_remotetimems_bucket", request="Produce", le="100.0") == 3
    assert s.get("kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == 3


def test_errors_are_counted_at_any_depth_of_a_response() -> None:
    cls = codec.response_class(ApiKey.METADATA)
    topic, part = cls.MetadataResponseTopic, cls.MetadataResponseTopic.MetadataResponsePartition
    response = cls(version=12, error_code=0, brokers=[], topics=[
        topic(version=12, error_code=3, name="a", partitions=[part(version=12, error_code=5), part(version=12)]),
        topic(version=12, error_code=0, name="b", partitions=[]),
    ])
    m = RequestMetrics()
    count_response_errors(m, ApiKey.METADATA, response)
    (name, versions, errors, _, _), = m.snapshot()
    assert (name, versions, errors) == ("Metadata", {}, {3: 1, 5: 1})


def test_a_snapshot_renders_every_family_in_the_text_format() -> None:
    snap = Snapshot(broker_id=1, state=3, ready=True, topics={"t": (10, 20, 1, 0, 1, 2, 0, 0, 3, 4)},
                    connections={"PLAINTEXT": 2}, purgatories={"Fetch": (3, 2)}, controller=True,
                    partitions=[PartitionSnapshot("t", 0, 100, 1, 0, 5, 5, True, 3, 2, 2)],
                    group_states={"Stable": 1}, group_offsets_detail=[("g", "t", 0, 3, 2), ("g", "u", 0, 1, None)],
                    consumer_group_states={"Reconciling": 2})
    s = Samples(render(snap).decode())
    assert s.get("kafka_server_brokertopicmetrics_bytesin_total", topic="t") == 10
    assert s.get("kafka_server_brokertopicmetrics_bytesin_total") == 10  # the broker-wide series
    assert s.get("kafka_server_brokertopicmetrics_producemessageconversions_total", topic="t") == 3
    assert s.get("kafka_server_brokertopicmetrics_fetchmessageconversions_total", topic="t") == 4
    assert s.get("kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert s.get("kafka_server_replicamanager_atminisrpartitioncount") == 1
    assert s.get("kafka_cluster_partition_underreplicated", topic="t", partition="0") == 1
    assert s.get("kafka_consumergroup_lag", consumergroup="g", topic="t", partition="0") == 2
    assert s.get("kafka_consumergroup_lag", consumergroup="g", topic="u", partition="0") is None
    assert s.get("kafka_consumergroup_current_offset", consumergroup="g", topic="u", partition="0") == 1
    assert s.get("kafka_coordinator_group_groupmetadatamanager_numgroupsstable") == 1
    assert s.get("kafka_coordinator_group_groupmetadatamanager_numgroups") == 3
    assert s.get("kafka_server_group_coordinator_metrics_group_count", protocol="consumer") == 2
    assert s.get("kafka_server_group_coordinator_metrics_group_count", protocol="classic") == 1
    assert s.get("kafka_server_group_coordinator_metrics_consumer_group_count", state="reconciling") == 2
    assert s.get("kafka_server_delayedoperationpurgatory_numdelayedoperations", delayedoperation="Fetch") == 2
    assert s.types["kafka_network_requestmetrics_totaltimems"] == "histogram"


def test_error_counting_ignores_what_is_not_a_message_struct() -> None:
    m = RequestMetrics()
    count_response_errors(m, ApiKey.METADATA, {"error_code": 3})
    count_response_errors(m, ApiKey.METADATA, None)
    assert m.snapshot() == []
