"""Which broker keys AlterConfigs may change at run time, and at which level (per broker, cluster default,
per listener only): Kafka's DynamicBrokerConfig rules."""

from __future__ import annotations

from strom.config.broker_defs import KAFKA_DYNAMIC_ONLY_DEFS
from strom.config.topic import TOPIC_CONFIGS

# Kafka's DynamicThreadPool and LogCleaner keys: a change may at most halve or double the current value.
THREAD_CONFIGS = frozenset({
    "log.cleaner.threads", "num.io.threads", "num.network.threads", "num.replica.fetchers",
    "num.recovery.threads.per.data.dir", "background.threads",
})

# Kafka's DynamicListenerConfig keys except its cluster-level ones (max.connections,
# max.connection.creation.rate, num.network.threads): listeners and security settings of one broker.
PER_BROKER_CONFIGS = frozenset({
    "advertised.listeners", "listeners", "listener.security.protocol.map", "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation", "ssl.client.auth",
    "ssl.engine.factory.class", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config",
    "sasl.enabled.mechanisms", "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds",
})
"""Dynamic keys that only make sense for one broker (Kafka refuses them at the cluster default)."""

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener.name.<listener>. prefix.
LISTENER_ONLY_DYNAMIC_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.truststore.certificates",
})

DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    # Kafka's DynamicLogConfig: the first broker synonym of each topic key (log.retention.ms, not .hours)
    {d.synonyms[0] for d in TOPIC_CONFIGS.values() if d.synonyms}
    | THREAD_CONFIGS
    | {"log.cleaner.backoff.ms"}
    | PER_BROKER_CONFIGS
    | {d.name for d in KAFKA_DYNAMIC_ONLY_DEFS}
    | {"background.threads", "message.max.bytes", "producer.id.expiration.ms"}
    | {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
)
"""Broker keys AlterConfigs may change at run time, per broker or as the cluster default."""

# A broker key -> the keys that feed its effective value, in Kafka's precedence (log.retention.ms first).
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {d.synonyms[0]: d.synonyms for d in TOPIC_CONFIGS.values() if d.synonyms}
