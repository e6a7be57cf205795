"""Per-group configs (KIP-848's GROUP config resource, type 32), as Kafka 4.0 has them for consumer groups.

A group may override the broker's ``group.consumer.session.timeout.ms`` and
``group.consumer.heartbeat.interval.ms`` with ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``, within the broker's ``group.consumer.min/max.*`` bounds.
IncrementalAlterConfigs writes them and DescribeConfigs reads them. They live with the other
dynamic entity configs (``/config/groups/<group>`` in ZooKeeper, announced under
``/config/changes`` so every broker, and so the group's coordinator wherever it moves, sees them).
The coordinator reads them at every heartbeat: a change reaches the members with their next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import kafka.errors as Errors

from strom.config.values import ConfigEntry, ConfigSource, ConfigType

if TYPE_CHECKING:
    from strom.config.broker_config import BrokerConfig
    from strom.metadata.store import MetadataStore

GROUP_RESOURCE_TYPE = 32
GROUP_ENTITY_TYPE = "groups"
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
# Group key -> the broker key that gives its default and, with min./max., its bounds.
GROUP_CONFIGS: dict[str, str] = {
    SESSION_TIMEOUT: "session.timeout.ms",
    HEARTBEAT_INTERVAL: "heartbeat.interval.ms",
}
_DOCS = {
    SESSION_TIMEOUT: "A consumer-protocol member of this group that does not heartbeat for this long is removed.",
    HEARTBEAT_INTERVAL: "The heartbeat interval given to consumer-protocol members of this group.",
}


@dataclass(frozen=True, slots=True)
class GroupTimeouts:
    session_timeout_ms: int
    heartbeat_interval_ms: int


class GroupConfigs:
    """Validates, describes and resolves per-group configs against the broker's defaults and bounds."""

    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.config = config
        self.metadata = metadata

    def _broker(self, key: str, prefix: str = "") -> int:
        return int(self.config.get(f"group.consumer.{prefix}{GROUP_CONFIGS[key]}"))

    def overrides(self, group_id: str) -> dict[str, str]:
        return self.metadata.entity_configs(GROUP_ENTITY_TYPE, group_id)

    def timeouts(self, group_id: str) -> GroupTimeouts:
        """The session timeout and heartbeat interval this group's members get."""
        values = {key: self._broker(key) for key in GROUP_CONFIGS}
        for key, value in self.overrides(group_id).items():
            if key in values:
                try:
                    values[key] = int(value)
                except ValueError:
                    pass  # validated when written; an unreadable value falls back to the broker's
        return GroupTimeouts(values[SESSION_TIMEOUT], values[HEARTBEAT_INTERVAL])

    def validate(self, configs: Mapping[str, str]) -> None:
        """Raise INVALID_CONFIG unless every key is a group config with a value in the broker's bounds."""
        for key, value in configs.items():
            if key not in GROUP_CONFIGS:
                raise Errors.InvalidConfigurationError(f"Unknown group config name: {key}")
            try:
                number = int(value)
            except ValueError:
                raise Errors.InvalidConfigurationError(
                    f"Invalid value {value} for configuration {key}: Not a number of type INT") from None
            lo, hi = self._broker(key, "min."), self._broker(key, "max.")
            if number < lo:
                raise Errors.InvalidConfigurationError(f"{key} must be greater than or equal to {lo}")
            if number > hi:
                raise Errors.InvalidConfigurationError(f"{key} must be less than or equal to {hi}")

    def describe(self, group_id: str) -> list[ConfigEntry]:
        overrides = self.overrides(group_id)
        out = []
        for key in GROUP_CONFIGS:
            set_here = key in overrides
            out.append(ConfigEntry(
                name=key, value=overrides[key] if set_here else str(self._broker(key)),
                source=int(ConfigSource.GROUP_CONFIG if set_here else ConfigSource.DEFAULT_CONFIG), is_default=not set_here,
                read_only=False, is_sensitive=False, config_type=int(ConfigType.INT), documentation=_DOCS[key]))
        return out
