"""Pure helpers of the web console: formatting, record rendering, input validation, lag, metrics, sessions."""

from __future__ import annotations

import json

import pytest

from strom.console import inputs
from strom.console.errors import ConsoleError
from strom.console.formatting import (
    escape_controls,
    format_timestamp,
    hex_dump,
    human_bytes,
    partition_lag,
    render_bytes,
    total_lag,
)
from strom.console.kafka_client import legacy_client_config, state_name
from strom.console.metrics import (
    BYTES_IN,
    BYTES_OUT,
    MESSAGES_IN,
    ThroughputTracker,
    counter_total,
    parse_prometheus,
)
from strom.console.sessions import Credentials, SessionStore


@pytest.mark.parametrize(("size", "shown"), [(None, "–"), (-1, "–"), (0, "0 B"), (1023, "1023 B"),
                                             (1536, "1.5 KiB"), (5 * 1024**3, "5.0 GiB")])
def test_human_bytes(size: int | None, shown: str) -> None:
    assert human_bytes(size) == shown


def test_format_timestamp_is_utc_with_milliseconds() -> None:
    assert format_timestamp(1706702400123) == "2024-01-31 12:00:00.123 UTC"
    assert format_timestamp(-1) == "–"
    assert format_timestamp(None) == "–"


def test_json_object_is_pretty_printed() -> None:
    shown = render_bytes(b'{"b":[1,2],"a":"\xc3\xa9"}')
    assert shown.kind == "json"
    assert shown.text == json.dumps({"b": [1, 2], "a": "é"}, indent=2, ensure_ascii=False)


@pytest.mark.parametrize("raw", [b'"just a string"', b"42", b"{not json", b"[1, 2"])
def test_scalars_and_broken_json_stay_text(raw: bytes) -> None:
    shown = render_bytes(raw)
    assert shown.kind == "text"
    assert shown.text == raw.decode()


def test_null_empty_and_html_values() -> None:
    assert render_bytes(None).kind == "null"
    assert render_bytes(b"").kind == "empty"
    html = render_bytes(b"<script>alert(1)</script>")
    assert (html.kind, html.text) == ("text", "<script>alert(1)</script>")  # the template escapes it


def test_control_characters_are_made_visible() -> None:
    assert escape_controls("a\x00b\x1b[31m\r\nc\td") == "a\\x00b\\x1b[31m\\r\nc\td"
    assert render_bytes(b"ring the bell\x07").text == "ring the bell\\x07"


def test_binary_is_a_hex_dump() -> None:
    shown = render_bytes(bytes([0x00, 0xFF, 0x41, 0x0A]))
    assert shown.kind == "binary"
    assert shown.text == "00000000  00 ff 41 0a" + " " * 36 + "  |..A.|"
    assert hex_dump(bytes(range(32))).count("\n") == 1
    assert render_bytes(bytes(range(40))).kind == "binary"  # valid UTF-8, but mostly control characters
    assert render_bytes(b"one\x00two three four").kind == "text"  # a stray NUL in text stays text


def test_big_values_are_truncated() -> None:
    shown = render_bytes(b"x" * 100, limit=10)
    assert shown.truncated and shown.text == "x" * 10 and shown.size == 100


def test_lag_is_end_minus_committed_and_unknown_without_commit() -> None:
    assert partition_lag(3, 11) == 8
    assert partition_lag(12, 12) == 0
    assert partition_lag(15, 12) == 0  # a commit past the end (truncated log) is not negative lag
    assert partition_lag(None, 12) is None
    assert partition_lag(-1001, 12) is None
    assert partition_lag(3, None) is None
    assert total_lag([8, 0, None, 2]) == 10


@pytest.mark.parametrize("name", ["orders", "a.b_c-d", "x" * 249])
def test_legal_topic_names(name: str) -> None:
    assert inputs.topic_name(f"  {name} ") == name


@pytest.mark.parametrize(("name", "why"), [("", "required"), (".", "not allowed"), ("..", "not allowed"),
                                           ("x" * 250, "longer than 249"), ("bad name", "only ASCII"),
                                           ("<script>", "only ASCII"), ("été", "only ASCII")])
def test_illegal_topic_names(name: str, why: str) -> None:
    with pytest.raises(ConsoleError) as caught:
        inputs.topic_name(name)
    assert caught.value.status == 400 and why in caught.value.message


def test_integer_fields() -> None:
    assert inputs.integer(" 7 ", "Offset", minimum=0) == 7
    assert inputs.integer("", "Partitions", default=-1) == -1
    for raw, message in [("abc", "must be a whole number, not 'abc'"), ("-1", "at least 0"), ("", "is required")]:
        with pytest.raises(ConsoleError, match=message):
            inputs.integer(raw, "Offset", minimum=0)
    with pytest.raises(ConsoleError, match="at most 500"):
        inputs.integer("501", "N", maximum=500)


def test_timestamps_as_milliseconds_or_iso() -> None:
    assert inputs.timestamp_ms("1706702400000") == 1706702400000
    assert inputs.timestamp_ms("2024-01-31T12:00:00Z") == 1706702400000
    assert inputs.timestamp_ms("2024-01-31T12:00:00") == 1706702400000  # no zone: UTC
    assert inputs.timestamp_ms("2024-01-31T13:00:00+01:00") == 1706702400000
    with pytest.raises(ConsoleError, match="neither milliseconds"):
        inputs.timestamp_ms("yesterday")


def test_headers_json() -> None:
    assert inputs.headers("") == []
    assert inputs.headers('{"a": "1", "b": null}') == [("a", b"1"), ("b", None)]
    assert inputs.headers('[["a", "1"], ["a", "2"]]') == [("a", b"1"), ("a", b"2")]
    for raw, message in [("{bad", "not valid JSON"), ('"text"', "must be a JSON object"),
                         ('{"a": 1}', "must be a string or null"), ('{"": "x"}', "non-empty string name")]:
        with pytest.raises(ConsoleError, match=message):
            inputs.headers(raw)


def test_config_lines() -> None:
    assert inputs.config_lines("# comment\nretention.ms = 1000\n\ncleanup.policy=compact\n") == {
        "retention.ms": "1000", "cleanup.policy": "compact"}
    with pytest.raises(ConsoleError, match="line 1 'oops' is not key=value"):
        inputs.config_lines("oops")


PROMETHEUS = f"""# HELP {BYTES_IN} Bytes in
# TYPE {BYTES_IN} counter
{BYTES_IN} 1000.0
{BYTES_IN}{{topic="a"}} 600
{BYTES_IN}{{topic="b"}} 400
{BYTES_OUT}{{topic="a",le="x\\"y"}} 50
{BYTES_OUT}{{topic="b"}} 25 1706702400000
{MESSAGES_IN}{{topic=""}} 10
{MESSAGES_IN}{{topic="a"}} 10
garbage line here
"""


def test_prometheus_parsing_prefers_the_all_topics_series() -> None:
    samples = parse_prometheus(PROMETHEUS)
    assert counter_total(samples, BYTES_IN) == 1000.0  # not 2000: per-topic series are not added twice
    assert counter_total(samples, BYTES_OUT) == 75.0  # no all-topics series: sum of the topics
    assert counter_total(samples, MESSAGES_IN) == 10.0  # topic="" is the all-topics series too
    assert counter_total(samples, "missing_total") is None
    assert dict(samples[BYTES_OUT][0][0]) == {"le": 'x\\"y', "topic": "a"}


def test_throughput_rates_from_counters() -> None:
    tracker = ThroughputTracker("http://127.0.0.1:1/metrics")
    assert tracker.add_sample(100.0, {"bytes_in": 0, "bytes_out": 0, "messages_in": 0}) is None
    point = tracker.add_sample(102.0, {"bytes_in": 2048, "bytes_out": 512, "messages_in": 20})
    assert point is not None and (point.bytes_in, point.bytes_out, point.messages_in) == (1024, 256, 10)
    assert tracker.add_sample(103.0, {"bytes_in": 10, "bytes_out": 0, "messages_in": 0}) is None  # restart
    assert len(tracker.points) == 1
    tracker.add_sample(104.0, {"bytes_in": None, "bytes_out": 0, "messages_in": 0})
    assert tracker.error == f"the endpoint has no {BYTES_IN}"


def test_unreachable_metrics_endpoint_is_an_error_message() -> None:
    from tests.support.broker import free_port

    tracker = ThroughputTracker(f"http://127.0.0.1:{free_port()}/metrics", timeout=2)
    tracker.sample()
    assert tracker.error is not None and tracker.error.startswith("cannot read http://127.0.0.1:")
    assert tracker.as_json()["points"] == []
    assert ThroughputTracker(None).as_json()["configured"] is False


def test_legacy_client_config_translates_librdkafka_names() -> None:
    config = legacy_client_config({"bootstrap.servers": "a:1,b:2", "security.protocol": "SASL_SSL",
                                   "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p",
                                   "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none"})
    assert config["bootstrap_servers"] == ["a:1", "b:2"]
    assert (config["security_protocol"], config["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (config["sasl_plain_username"], config["sasl_plain_password"]) == ("u", "p")
    assert config["ssl_cafile"] == "/ca.pem" and config["ssl_check_hostname"] is False


def test_group_state_names_match_kafka_tools() -> None:
    class State:
        def __init__(self, name: str) -> None:
            self.name = name

    assert state_name(State("PREPARING_REBALANCING")) == "PreparingRebalance"
    assert state_name(State("STABLE")) == "Stable"
    assert state_name(State("EMPTY")) == "Empty"


def test_sessions_keep_credentials_server_side_and_rotate_ids() -> None:
    store = SessionStore(idle_seconds=3600)
    anonymous = store.create()
    assert store.get(anonymous.id) is anonymous
    assert anonymous.csrf_ok(anonymous.csrf) and not anonymous.csrf_ok("forged") and not anonymous.csrf_ok(None)
    credentials = Credentials("alice", "s3cret")
    assert "s3cret" not in repr(credentials)
    logged_in = store.replace(anonymous, credentials)
    assert logged_in.id != anonymous.id and store.get(anonymous.id) is None
    assert store.get(logged_in.id).credentials == credentials
    assert credentials.client_settings()["sasl.mechanism"] == "SCRAM-SHA-256"


def test_idle_sessions_expire_and_the_store_is_bounded() -> None:
    store = SessionStore(idle_seconds=0.0, max_sessions=2)
    first = store.create()
    assert store.get(first.id) is None  # idle longer than 0 s
    bounded = SessionStore(max_sessions=2)
    ids = [bounded.create().id for _ in range(3)]
    assert len(bounded) == 2 and bounded.get(ids[0]) is None


def test_host_header_names() -> None:
    from strom.cli.console import allowed_hosts
    from strom.console.app import host_name

    assert host_name("127.0.0.1:8080") == "127.0.0.1"
    assert host_name("LocalHost") == "localhost"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("::1") == "::1"
    assert allowed_hosts("127.0.0.1") == ("127.0.0.1", "localhost", "::1")
    assert allowed_hosts("0.0.0.0") is None
    assert allowed_hosts("console.internal")[0] == "console.internal"


def test_config_values_in_human_units() -> None:
    from strom.console.formatting import human_config_value

    assert human_config_value("retention.ms", "604800000") == "7 d"
    assert human_config_value("segment.ms", "5400000") == "1.5 h"
    assert human_config_value("flush.ms", "9223372036854775807") == "unlimited"
    assert human_config_value("retention.bytes", "-1") == "unlimited"
    assert human_config_value("segment.bytes", "1073741824") == "1 GiB"
    assert human_config_value("max.message.bytes", "1048588") == "1.0 MiB"
    assert human_config_value("segment.jitter.ms", "0") == "0 ms"
    assert human_config_value("log.retention.hours", "168") == "7 d"
    assert human_config_value("log.retention.minutes", "90") == "1.5 h"
    assert human_config_value("cleanup.policy", "delete") is None
    assert human_config_value("retention.ms", "soon") is None


def test_spark_sink_marker_matches_the_sink() -> None:
    from strom.console.kafka_client import SPARK_SINK_MARKER

    sink = pytest.importorskip("strom.spark.sink")
    assert sink.MARKER == SPARK_SINK_MARKER
