"""Topic-level keys: their definitions, the broker keys their defaults come from, and the checks
CreateTopics, AlterConfigs and DescribeConfigs run on a topic's overrides and name."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.config.values import (
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Validator,
    at_least,
    between,
    format_value,
    list_of,
    one_of,
    parse_checked,
    unknown_key,
)

if TYPE_CHECKING:
    from strom.config.broker_config import BrokerConfig


class InvalidTopicName(ConfigError):
    """A topic name breaks Kafka's naming rules (maps to INVALID_TOPIC_EXCEPTION, code 17)."""


@dataclass(frozen=True)
class TopicConfigDef:
    """A topic key: type, validator and the broker keys its default comes from.

    ``synonyms`` lists broker keys in Kafka's precedence order (``log.retention.ms``
    before ``.minutes`` before ``.hours``); the first one is what ``BrokerConfig.get``
    resolves to the effective value. An empty tuple means a fixed default.
    """

    name: str
    type: ConfigType
    doc: str
    validator: Validator | None = None
    synonyms: tuple[str, ...] = ()
    default: Any = None

    def parse(self, raw: str) -> Any:
        return parse_checked(self.name, self.type, self.validator, raw)


_THROTTLED_REPLICA_RE = re.compile(r"[0-9]+:[0-9]+\Z")


def throttled_replicas(v: Any) -> str | None:
    """KIP-73's replica lists: the literal "*" alone, or "partitionId:brokerId" entries (Kafka's
    ThrottledReplicaListValidator; empty entries are allowed and dropped)."""
    items = list(v or [])
    if items == ["*"] or all(_THROTTLED_REPLICA_RE.match(x) for x in items):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


T = ConfigType
_TOPIC_DEFS: list[TopicConfigDef] = [
    TopicConfigDef("cleanup.policy", T.LIST, "delete and/or compact.", list_of("compact", "delete"), ("log.cleanup.policy",)),
    TopicConfigDef(
        "compression.type",
        T.STRING,
        "Compression on disk; producer keeps the producer's codec.",
        one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ("compression.type",),
    ),
    TopicConfigDef("delete.retention.ms", T.LONG, "How long tombstones survive compaction.", at_least(0), ("log.cleaner.delete.retention.ms",)),
    TopicConfigDef("file.delete.delay.ms", T.LONG, "Delay before a deleted segment's file is removed.", at_least(0), ("log.segment.delete.delay.ms",)),
    TopicConfigDef("flush.messages", T.LONG, "Messages appended before an fsync.", at_least(1), ("log.flush.interval.messages",)),
    TopicConfigDef(
        "flush.ms",
        T.LONG,
        "Time between fsyncs.",
        at_least(0),
        ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ),
    TopicConfigDef(
        "follower.replication.throttled.replicas", T.LIST,
        "Replicas (partition:broker, or *) whose fetches from the leader the follower's "
        "follower.replication.throttled.rate limits while they are out of the ISR.", throttled_replicas, (), []
    ),
    TopicConfigDef("index.interval.bytes", T.INT, "Bytes between sparse index entries.", at_least(0), ("log.index.interval.bytes",)),
    TopicConfigDef(
        "leader.replication.throttled.replicas", T.LIST,
        "Replicas (partition:broker, or *) whose answers to out-of-ISR followers the leader's "
        "leader.replication.throttled.rate limits.", throttled_replicas, (), []
    ),
    TopicConfigDef(
        "max.compaction.lag.ms", T.LONG, "Maximum age before a record must be compacted.", at_least(1), ("log.cleaner.max.compaction.lag.ms",)
    ),
    TopicConfigDef("max.message.bytes", T.INT, "Largest record batch accepted.", at_least(0), ("message.max.bytes",)),
    TopicConfigDef(
        "message.downconversion.enable", T.BOOLEAN, "Down-convert batches for old fetch versions.", None, ("log.message.downconversion.enable",)
    ),
    TopicConfigDef(
        "message.timestamp.difference.max.ms",
        T.LONG,
        "Maximum allowed CreateTime skew.",
        at_least(0),
        ("log.message.timestamp.difference.max.ms",),
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms",
        T.LONG,
        "How far in the past a CreateTime may be.",
        at_least(0),
        ("log.message.timestamp.before.max.ms",),
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms",
        T.LONG,
        "How far in the future a CreateTime may be.",
        at_least(0),
        ("log.message.timestamp.after.max.ms",),
    ),
    TopicConfigDef(
        "message.timestamp.type",
        T.STRING,
        "CreateTime or LogAppendTime.",
        one_of("CreateTime", "LogAppendTime"),
        ("log.message.timestamp.type",),
    ),
    TopicConfigDef(
        "min.cleanable.dirty.ratio", T.DOUBLE, "Dirty ratio that triggers compaction.", between(0, 1), ("log.cleaner.min.cleanable.ratio",)
    ),
    TopicConfigDef(
        "min.compaction.lag.ms", T.LONG, "Minimum age before a record may be compacted.", at_least(0), ("log.cleaner.min.compaction.lag.ms",)
    ),
    TopicConfigDef("min.insync.replicas", T.INT, "ISR size needed for acks=all.", at_least(1), ("min.insync.replicas",)),
    TopicConfigDef("preallocate", T.BOOLEAN, "Preallocate segment files.", None, ("log.preallocate",)),
    TopicConfigDef("retention.bytes", T.LONG, "Maximum partition size before old segments go; -1 = unlimited.", None, ("log.retention.bytes",)),
    TopicConfigDef(
        "retention.ms",
        T.LONG,
        "How long data is kept; -1 = unlimited.",
        at_least(-1),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ),
    TopicConfigDef("segment.bytes", T.INT, "Size at which a segment rolls.", at_least(14), ("log.segment.bytes",)),
    TopicConfigDef("segment.index.bytes", T.INT, "Maximum size of an offset/time index.", at_least(4), ("log.index.size.max.bytes",)),
    TopicConfigDef("segment.jitter.ms", T.LONG, "Random jitter subtracted from the roll time.", at_least(0), ("log.roll.jitter.ms", "log.roll.jitter.hours")),
    TopicConfigDef("segment.ms", T.LONG, "Age at which a segment rolls.", at_least(1), ("log.roll.ms", "log.roll.hours")),
    TopicConfigDef(
        "unclean.leader.election.enable",
        T.BOOLEAN,
        "Allow an out-of-sync replica to become leader.",
        None,
        ("unclean.leader.election.enable",),
    ),
]
del T

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in _TOPIC_DEFS}
"""All topic-level keys Strom accepts (CreateTopics, AlterConfigs), by name."""


def validate_topic_configs(props: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic overrides (CreateTopics/AlterConfigs) and return them normalised.

    A None value means "no override" (fall back to the broker default) and is dropped.
    """
    out: dict[str, str] = {}
    for key, raw in props.items():
        d = TOPIC_CONFIGS.get(key)
        if d is None:
            raise unknown_key(key, TOPIC_CONFIGS, "topic configuration")
        if raw is None:
            continue
        value = d.parse(raw)
        out[key] = format_value(d.type, value) or ""
    return out


def effective_topic_configs(cfg: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, Any]:
    """Typed value of every topic key for a topic (Kafka's LogConfig): override or broker default."""
    out: dict[str, Any] = {}
    for name, d in TOPIC_CONFIGS.items():
        raw = overrides.get(name)
        out[name] = d.parse(raw) if raw is not None else cfg.topic_default(name)
    return out


def describe_topic_configs(
    cfg: BrokerConfig, overrides: Mapping[str, str], keys: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a topic resource, with sources and synonyms.

    Source is DYNAMIC_TOPIC_CONFIG for an override; otherwise that of the broker key the
    default comes from: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG (set at run time),
    STATIC_BROKER_CONFIG (server.properties) or DEFAULT_CONFIG.
    """
    names = list(TOPIC_CONFIGS) if keys is None else list(keys)
    out: list[ConfigEntry] = []
    for name in names:
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            continue  # Kafka answers unknown keys by omitting them
        synonyms: list[ConfigSynonym] = []
        if overrides.get(name) is not None:
            synonyms.append(ConfigSynonym(name, overrides[name], int(ConfigSource.DYNAMIC_TOPIC_CONFIG)))
        synonyms += cfg.synonyms(d.synonyms)
        if synonyms and synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG:
            source, value = ConfigSource.DYNAMIC_TOPIC_CONFIG, overrides[name]
        else:
            # As Kafka: the source of the broker synonym that decides the default.
            source = ConfigSource(synonyms[0].source) if synonyms else ConfigSource.DEFAULT_CONFIG
            value = cfg.topic_default_str(name)
        out.append(
            ConfigEntry(
                name=name,
                value=value,
                source=int(source),
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                is_sensitive=False,
                config_type=int(d.type),
                documentation=d.doc,
                synonyms=tuple(synonyms),
            )
        )
    return out


_TOPIC_NAME_RE = re.compile(r"[a-zA-Z0-9._-]+\Z")
MAX_TOPIC_NAME_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Kafka's topic naming rules; the name becomes a directory, hence the strict charset."""
    if not name:
        raise InvalidTopicName("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicName("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        )
    if not _TOPIC_NAME_RE.match(name):
        raise InvalidTopicName(
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
