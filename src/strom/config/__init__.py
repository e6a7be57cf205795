"""Broker and topic configuration with Kafka's key names, defaults and validation.

The bottom layer of the broker: it imports nothing from Strom outside this package, so any
package (and tools that never run a broker) can read a configuration.

- ``values``: types, sources, parsing and validators every key definition builds on;
- ``broker_defs`` / ``topic``: the broker and topic key tables, and the topic-level checks;
- ``dynamic``: which keys AlterConfigs may change at run time, at which level;
- ``properties``: the Java-properties reader for ``server.properties``;
- ``listeners``, ``jaas``, ``metrics_listener``: values of the listener, ``sasl.jaas.config``
  and ``metrics.listener`` settings;
- ``broker_config``: :class:`BrokerConfig`, the layered (static, dynamic) view a broker reads.
"""

from strom.config.broker_config import LISTENER_PREFIX, BrokerConfig
from strom.config.broker_defs import BROKER_CONFIGS, ConfigDef
from strom.config.dynamic import (
    DYNAMIC_BROKER_CONFIGS,
    LISTENER_ONLY_DYNAMIC_CONFIGS,
    PER_BROKER_CONFIGS,
    THREAD_CONFIGS,
)
from strom.config.properties import parse_properties
from strom.config.topic import (
    MAX_TOPIC_NAME_LENGTH,
    TOPIC_CONFIGS,
    InvalidTopicName,
    TopicConfigDef,
    describe_topic_configs,
    effective_topic_configs,
    validate_topic_configs,
    validate_topic_name,
)
from strom.config.values import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    SHORT_MAX,
    SHORT_MIN,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    DynamicUpdateError,
    Validator,
    at_least,
    between,
    list_of,
    one_of,
)

__all__ = [
    "BROKER_CONFIGS",
    "DYNAMIC_BROKER_CONFIGS",
    "INT_MAX",
    "INT_MIN",
    "LISTENER_ONLY_DYNAMIC_CONFIGS",
    "LISTENER_PREFIX",
    "LONG_MAX",
    "LONG_MIN",
    "MAX_TOPIC_NAME_LENGTH",
    "PER_BROKER_CONFIGS",
    "SHORT_MAX",
    "SHORT_MIN",
    "THREAD_CONFIGS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "DynamicUpdateError",
    "InvalidTopicName",
    "TopicConfigDef",
    "Validator",
    "at_least",
    "between",
    "describe_topic_configs",
    "effective_topic_configs",
    "list_of",
    "one_of",
    "parse_properties",
    "validate_topic_configs",
    "validate_topic_name",
]
