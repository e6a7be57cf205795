"""Offset planning without Spark or a broker: rate limits, range splitting, option parsing."""

from __future__ import annotations

import pytest

from strom.spark.offsets import from_json, rate_limit, split_ranges, to_json
from strom.spark.options import StromOptionError, parse_sink_options, parse_source_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BS = {"kafka.bootstrap.servers": "127.0.0.1:1"}


def test_rate_limit_is_exact_and_proportional_to_lag() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}  # partition 2 is new: starts at 0
    end = rate_limit(start, latest, 90)
    taken = {tp: end[tp] - start.get(tp, 0) for tp in end}
    assert sum(taken.values()) == 90
    assert taken == {("t", 0): 60, ("t", 1): 20, ("t", 2): 10}
    assert rate_limit(start, latest, 10_000) == latest


def test_split_ranges_honours_min_partitions() -> None:
    ranges = [("t", 0, 0, 1000), ("t", 1, 0, 10), ("t", 2, 5, 5)]
    out = split_ranges(ranges, 6)
    assert len(out) >= 6
    for part in (0, 1):
        pieces = sorted((s, e) for t, p, s, e in out if p == part)
        assert pieces[0][0] == 0 and pieces[-1][1] == (1000 if part == 0 else 10)
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
    assert split_ranges(ranges, None) == ranges[:2]


def test_offsets_json_round_trip() -> None:
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    assert to_json(offsets) == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert from_json(to_json(offsets)) == offsets


def test_option_parsing() -> None:
    o = parse_source_options({**BS, "Subscribe": "a, b", "maxOffsetsPerTrigger": "5",
                              "maxTriggerDelay": "30s", "kafka.isolation.level": "read_committed"}, streaming=True)
    assert o.topics == ("a", "b") and o.max_offsets_per_trigger == 5 and o.max_trigger_delay_ms == 30_000
    assert o.read_committed and o.starting == "latest"
    assert parse_source_options({**BS, "assign": '{"a":[1,0]}'}, streaming=False).assign == {"a": (0, 1)}
    # Accepted (with a warning) as Spark's Kafka source does, and not passed to the client.
    assert "group.id" not in parse_source_options({**BS, "subscribe": "a", "kafka.group.id": "g"}, streaming=True).client
    with pytest.raises(StromOptionError, match="auto.offset.reset"):
        parse_source_options({**BS, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, streaming=True)
    with pytest.raises(StromOptionError, match="transactional"):
        parse_sink_options({**BS, "kafka.transactional.id": "x"})
    # librdkafka's own logging is silenced unless strom.debug (or librdkafka's kafka.debug) asks for it.
    assert parse_source_options({**BS, "subscribe": "a"}, streaming=True).client["log_level"] == "0"
    assert "log_level" not in parse_source_options({**BS, "subscribe": "a", "strom.debug": "true"},
                                                   streaming=True).client
    assert "log_level" not in parse_sink_options({**BS, "kafka.debug": "broker"}).client
    sink = parse_sink_options({**BS, "topic": "out", "kafka.linger.ms": "5"})
    conf = sink.producer_config()
    assert conf["enable.idempotence"] is True and conf["linger.ms"] == "5"
