"""Topic-level log configuration with Kafka 3.x key names and defaults.

Validation of user-supplied values happens in the broker's config layer; this
class only parses and carries values so the storage code reads typed fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def _to_bool(value: str | int | bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    return value.strip().lower() == "true"


def _to_policy(value: str | int) -> tuple[str, ...]:
    return tuple(p.strip() for p in str(value).split(",") if p.strip())


def _to_list(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    return tuple(p.strip() for p in items if p.strip())


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One partition log's settings. Field names are the Kafka keys with dots as underscores."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    cleanup_policy: tuple[str, ...] = ("delete",)
    min_insync_replicas: int = 1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    compression_type: str = "producer"
    unclean_leader_election_enable: bool = False
    preallocate: bool = False
    message_downconversion_enable: bool = True  # Fetch v0-v3 get message format v0/v1 (else UNSUPPORTED_VERSION)
    # KIP-73: "partition:broker" entries or "*"; the broker's replication quotas read them.
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()

    @classmethod
    def from_props(
        cls, props: Mapping[str, str | int] | None = None, base: LogConfig | None = None
    ) -> LogConfig:
        """Build from topic-level keys (``"segment.bytes": "1024"``), overriding ``base`` or defaults.

        Unknown keys are ignored: broker-level and non-storage topic keys share the map.
        """
        updates: dict[str, Any] = {}
        for key, value in (props or {}).items():
            entry = _KEYS.get(key)
            if entry is None or value is None:
                continue
            field_name, convert = entry
            updates[field_name] = convert(value)
        return replace(base or cls(), **updates)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def timestamp_before_max_ms(self) -> int:
        """Effective lower bound window (the older difference.max.ms key still applies like in 3.6+)."""
        return min(self.message_timestamp_before_max_ms, self.message_timestamp_difference_max_ms)

    @property
    def timestamp_after_max_ms(self) -> int:
        return min(self.message_timestamp_after_max_ms, self.message_timestamp_difference_max_ms)


_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "segment.bytes": ("segment_bytes", int),
    "segment.ms": ("segment_ms", int),
    "segment.jitter.ms": ("segment_jitter_ms", int),
    "segment.index.bytes": ("segment_index_bytes", int),
    "index.interval.bytes": ("index_interval_bytes", int),
    "retention.ms": ("retention_ms", int),
    "retention.bytes": ("retention_bytes", int),
    "max.message.bytes": ("max_message_bytes", int),
    "message.timestamp.type": ("message_timestamp_type", str),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", int),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", int),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", int),
    "cleanup.policy": ("cleanup_policy", _to_policy),
    "min.insync.replicas": ("min_insync_replicas", int),
    "flush.messages": ("flush_messages", int),
    "flush.ms": ("flush_ms", int),
    "file.delete.delay.ms": ("file_delete_delay_ms", int),
    "delete.retention.ms": ("delete_retention_ms", int),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", int),
    "compression.type": ("compression_type", str),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _to_bool),
    "preallocate": ("preallocate", _to_bool),
    "message.downconversion.enable": ("message_downconversion_enable", _to_bool),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", _to_list),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas", _to_list),
}

assert {f.name for f in fields(LogConfig)} == {name for name, _ in _KEYS.values()}
