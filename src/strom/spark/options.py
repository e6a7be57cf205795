"""Option parsing and validation for the `strom` Spark data source.

Options mirror Spark's built-in Kafka source and sink, so a user moving from
``format("kafka")`` keeps their option names. Everything is parsed once, on the
driver, into small picklable dataclasses that travel to the executor tasks.

Beyond Spark's options: the sink's ``delivery`` (``at-least-once`` by default, or
``exactly-once``: Kafka transactions per task, see strom.spark.sink), which also allows
``kafka.transactional.id`` as the prefix of the per-task transactional ids, and the
test-only ``failAfterWriteForTesting``. The source passes ``kafka.isolation.level`` to the
consumer and to ListOffsets (read_committed ends batches at the last stable offset).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.security.client_properties import java_to_librdkafka
from strom.spark.errors import StromUserError

log = logging.getLogger("strom.spark")

BOOTSTRAP = "kafka.bootstrap.servers"
# Source/sink option: let librdkafka log to stderr again (it is silenced by default, see client_config).
DEBUG = "strom.debug"
STRATEGIES = ("subscribe", "subscribepattern", "assign")

# Kafka client options Spark's Kafka source refuses, with the reason it gives.
_FORBIDDEN_SOURCE = {
    "auto.offset.reset": "use 'startingOffsets' instead; offsets are tracked by Spark's checkpoint",
    "enable.auto.commit": "offsets are tracked by Spark's checkpoint, never committed to the broker",
    "key.deserializer": "keys are always returned as binary; cast them in the query",
    "value.deserializer": "values are always returned as binary; cast them in the query",
    "interceptor.classes": "interceptors are not supported",
}
_FORBIDDEN_SINK = {
    "key.serializer": "keys are written as binary or string; cast them in the query",
    "value.serializer": "values are written as binary or string; cast them in the query",
    "interceptor.classes": "interceptors are not supported",
}

# Java-only client settings that have no librdkafka meaning; dropped silently.
_JAVA_ONLY = {"key.deserializer", "value.deserializer", "key.serializer", "value.serializer"}


class StromOptionError(StromUserError, ValueError):
    """An invalid or unsupported option; the message says which and why."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark passes options case-insensitively; normalise keys once."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise StromOptionError(f"Option '{name}' must be true or false, got {raw!r}")


def _int(opts: Mapping[str, str], name: str, minimum: int = 1) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise StromOptionError(f"Option '{name}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise StromOptionError(f"Option '{name}' must be >= {minimum}, got {value}")
    return value


def _duration_ms(opts: Mapping[str, str], name: str, default_ms: int) -> int:
    """Parse Spark-style durations such as '15m', '30s', '500ms' or plain milliseconds."""
    raw = opts.get(name.lower())
    if raw is None:
        return default_ms
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", raw.lower())
    if not m:
        raise StromOptionError(f"Option '{name}' must be a duration like '15m' or '30s', got {raw!r}")
    scale = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
    return int(m.group(1)) * scale[m.group(2)]


def client_config(opts: Mapping[str, str], forbidden: Mapping[str, str]) -> dict[str, str]:
    """Collect ``kafka.*`` options into a librdkafka configuration, refusing forbidden keys.

    librdkafka logs every failed connection attempt to stderr (``%3|...|FAIL|rdkafka#producer-1|``,
    hundreds of lines while a broker is down, naming a "producer" on a read); the data source
    reports what went wrong itself, so client logging is off unless ``strom.debug`` is true or
    the user asked librdkafka for debug contexts (``kafka.debug``).
    """
    conf: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name == "group.id" and "group.id" not in forbidden:
            # Accepted, as Spark's Kafka source does since 3.0; offsets live in the checkpoint.
            log.warning(
                "Option 'kafka.group.id' (%s) is not used: the strom data source tracks progress in "
                "Spark's checkpoint and reads by offset, so it joins no consumer group.", value)
            continue
        if name in forbidden:
            raise StromOptionError(f"Kafka option '{name}' is not supported: {forbidden[name]}.")
        if name in _JAVA_ONLY:
            continue
        conf[name] = value
    for key in opts:
        # Spark also refuses the bare (un-prefixed) forms, a frequent mistake.
        if key in forbidden:
            raise StromOptionError(f"Kafka option '{key}' is not supported: {forbidden[key]}.")
    if "bootstrap.servers" not in conf:
        raise StromOptionError(f"Option '{BOOTSTRAP}' must be specified.")
    if not _bool(opts, DEBUG, False) and "debug" not in conf:
        conf.setdefault("log_level", "0")  # syslog level 0: librdkafka prints nothing
    try:  # kafka.sasl.jaas.config, PEM kafka.ssl.truststore.location etc., as Spark's Kafka source takes them
        return java_to_librdkafka(conf)
    except ValueError as exc:
        raise StromOptionError(f"Kafka option: {exc}") from None


@dataclass(frozen=True)
class SourceOptions:
    """Validated source options; picklable so read tasks receive them with the partition."""

    client: dict[str, str]
    strategy: str  # "subscribe" | "subscribepattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)
    starting: str = "latest"  # "earliest" | "latest" | JSON
    ending: str = "latest"
    starting_timestamp: int | None = None
    starting_by_timestamp: str | None = None
    ending_timestamp: int | None = None
    ending_by_timestamp: str | None = None
    timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    include_headers: bool = False
    poll_timeout_ms: int = 120_000

    @property
    def read_committed(self) -> bool:
        return self.client.get("isolation.level", "read_uncommitted") == "read_committed"


def parse_source_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate reader options the way Spark's Kafka source does and return them parsed."""
    opts = _lower(raw)
    client = client_config(opts, _FORBIDDEN_SOURCE)

    given = [s for s in STRATEGIES if s in opts]
    if len(given) != 1:
        raise StromOptionError(
            "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
            f"specified, got {len(given)}."
        )
    strategy = given[0]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = {}
    if strategy == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise StromOptionError("No topics to subscribe to in option 'subscribe'.")
    elif strategy == "subscribepattern":
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise StromOptionError("Pattern to subscribe is empty in option 'subscribePattern'.")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise StromOptionError(f"Option 'subscribePattern' is not a valid regex: {exc}") from None
    else:
        assign = _parse_assign(opts["assign"])

    default_start = "latest" if streaming else "earliest"
    starting = opts.get("startingoffsets", default_start).strip()
    ending = opts.get("endingoffsets", "latest").strip()
    if streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise StromOptionError(f"Option '{name}' is not supported for streaming queries.")
    else:
        if starting.lower() == "latest":
            raise StromOptionError("Option 'startingOffsets' can't be 'latest' for batch queries.")
        if ending.lower() == "earliest":
            raise StromOptionError("Option 'endingOffsets' can't be 'earliest' for batch queries.")
        _check_offsets_json(starting, "startingOffsets", forbid=-1)
        _check_offsets_json(ending, "endingOffsets", forbid=-2)
    if streaming:
        _check_offsets_json(starting, "startingOffsets", forbid=None)

    strategy_ts = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy_ts not in ("error", "latest"):
        raise StromOptionError("Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'.")

    return SourceOptions(
        client=client,
        strategy=strategy,
        topics=topics,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp=_int(opts, "startingTimestamp", minimum=0),
        starting_by_timestamp=opts.get("startingoffsetsbytimestamp"),
        ending_timestamp=_int(opts, "endingTimestamp", minimum=0),
        ending_by_timestamp=opts.get("endingoffsetsbytimestamp"),
        timestamp_strategy=strategy_ts,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_int(opts, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60_000),
        min_partitions=_int(opts, "minPartitions"),
        include_headers=_bool(opts, "includeHeaders", False),
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
    )


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not data:
        raise StromOptionError(
            'Option \'assign\' must be JSON like {"topicA":[0,1],"topicB":[2,4]}, got ' + repr(text)
        )
    out: dict[str, tuple[int, ...]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and p >= 0 for p in parts):
            raise StromOptionError(f"Option 'assign': partitions of topic {topic!r} must be a list of ints.")
        out[str(topic)] = tuple(sorted(set(parts)))
    return out


def _check_offsets_json(text: str, name: str, forbid: int | None) -> None:
    if text.lower() in ("earliest", "latest"):
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise StromOptionError(
            f"Option '{name}' must be 'earliest', 'latest' or JSON like "
            f'{{"topicA":{{"0":23,"1":-1}}}}, got {text!r}'
        )
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise StromOptionError(f"Option '{name}': offsets of topic {topic!r} must be an object.")
        for part, off in parts.items():
            if not str(part).lstrip("-").isdigit() or not isinstance(off, int) or off < -2:
                raise StromOptionError(f"Option '{name}': bad entry {topic}/{part} = {off!r}.")
            if forbid is not None and off == forbid:
                word = "latest (-1)" if forbid == -1 else "earliest (-2)"
                raise StromOptionError(f"Option '{name}' can't use {word} for batch queries ({topic}/{part}).")


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options; picklable so write tasks receive them."""

    client: dict[str, str]
    topic: str | None
    delivery: str = "at-least-once"  # "at-least-once" | "exactly-once"
    # Exactly-once: prefix of the per-task transactional.id (kafka.transactional.id), else "strom-spark".
    transactional_id_prefix: str | None = None
    # Test hook (option failAfterWriteForTesting): fail a task once its rows are durable.
    fail_after_write: dict[str, int] | None = None

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    def producer_config(self) -> dict[str, Any]:
        """Idempotent producer by default: a retried request inside a task cannot duplicate."""
        conf: dict[str, Any] = {
            "enable.idempotence": True,
            "acks": "all",
            "batch.size": 1_000_000,
            "compression.type": "none",
            # Bytes a task may have unacknowledged before it waits (strom.spark.producer).
            "queue.buffering.max.kbytes": 64 * 1024,
        }
        if self.exactly_once:
            # Long enough for a big task; a task killed mid-transaction is aborted sooner than
            # this by the next attempt's InitProducerId (same transactional.id).
            conf["transaction.timeout.ms"] = 300_000
        conf.update(self.client)
        return conf


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Validate writer options the way Spark's Kafka sink does, plus ``delivery``."""
    opts = _lower(raw)
    client = client_config(opts, _FORBIDDEN_SINK)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise StromOptionError("Option 'topic' must not be empty.")
    delivery = opts.get("delivery", "at-least-once").strip().lower()
    if delivery not in ("at-least-once", "exactly-once"):
        raise StromOptionError("Option 'delivery' must be 'at-least-once' or 'exactly-once'.")
    prefix = client.pop("transactional.id", None)
    if prefix is not None:
        if delivery != "exactly-once":
            raise StromOptionError(
                "Option 'kafka.transactional.id' needs delivery=exactly-once: the sink then uses it "
                "as the prefix of one transactional.id per Spark partition."
            )
        if not prefix.strip():
            raise StromOptionError("Option 'kafka.transactional.id' must not be empty.")
    if delivery == "exactly-once":
        for name, wanted in (("enable.idempotence", "true"), ("acks", "all")):
            given = client.get(name)
            if given is not None and given.strip().lower() not in (wanted, "-1"):
                raise StromOptionError(f"Option 'kafka.{name}' must be {wanted} with delivery=exactly-once.")
    return SinkOptions(
        client=client,
        topic=topic.strip() if topic else None,
        delivery=delivery,
        transactional_id_prefix=prefix.strip() if prefix else None,
        fail_after_write=_parse_fault(opts.get("failafterwritefortesting")),
    )


def _parse_fault(text: str | None) -> dict[str, int] | None:
    """``{"batch": 1, "partition": 0, "attempts": 1, "hold_ms": 0}``; any key may be left out.

    batch/partition select tasks (default: all); they fail after their rows are durable on
    attempts below ``attempts`` (default 1, or 0 with ``hold_ms``); with exactly-once,
    ``hold_ms`` keeps their transaction open that long before committing.
    """
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not all(
        k in ("batch", "partition", "attempts", "hold_ms") and isinstance(v, int) for k, v in data.items()
    ):
        raise StromOptionError(
            'Option \'failAfterWriteForTesting\' must be JSON like {"batch": 1, "partition": 0, "attempts": 1}.'
        )
    return {str(k): int(v) for k, v in data.items()}
