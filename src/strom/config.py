"""Broker and topic configuration with Kafka's key names, defaults and validation.

The broker reads a Java-properties file in Kafka's ``server.properties`` format, so an
operator can carry a Kafka configuration over unchanged. Keys are strict: a typo such as
``log.segmnt.bytes`` fails at start-up instead of being silently ignored.

Topic-level configs (``segment.bytes``, ``retention.ms``...) take their defaults from
broker keys (``log.segment.bytes``, ``log.retention.*``...), exactly as Kafka's LogConfig
does; :func:`describe_topic_configs` reports where each value comes from using the
DescribeConfigs source and type codes that admin clients understand.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.broker.listeners import EndPoint, ListenerError, parse_listeners, parse_protocol_map
from strom.metrics.listener import validate_metrics_listener
from strom.security.jaas import JaasConfig, JaasConfigError, parse_jaas_config

__all__ = [
    "BROKER_CONFIGS",
    "DYNAMIC_BROKER_CONFIGS",
    "PER_BROKER_CONFIGS",
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
    "describe_topic_configs",
    "effective_topic_configs",
    "validate_topic_configs",
    "validate_topic_name",
]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid (Kafka's ConfigException)."""


class DynamicUpdateError(ConfigError):
    """Keys that cannot change at run time, or not at this level (Kafka answers INVALID_REQUEST)."""


class InvalidTopicName(ConfigError):
    """A topic name breaks Kafka's naming rules (maps to INVALID_TOPIC_EXCEPTION, code 17)."""


class ConfigType(enum.IntEnum):
    """Config value types with the codes DescribeConfigs v3+ puts on the wire."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs config sources (v1+), telling an admin where a value came from."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


Validator = Callable[[Any], str | None]
"""Returns None when the parsed value is acceptable, else the reason it is not."""


# --------------------------------------------------------------------------- validators


def at_least(lo: float) -> Validator:
    def check(v: Any) -> str | None:
        return None if v is None or v >= lo else f"must be at least {lo}"

    return check


def between(lo: float, hi: float) -> Validator:
    def check(v: Any) -> str | None:
        return None if v is None or lo <= v <= hi else f"must be between {lo} and {hi}"

    return check


def one_of(*choices: str) -> Validator:
    def check(v: Any) -> str | None:
        return None if v is None or v in choices else f"must be one of {', '.join(choices)}"

    return check


def list_of(*choices: str) -> Validator:
    def check(v: Any) -> str | None:
        bad = [x for x in (v or []) if x not in choices]
        return f"each item must be one of {', '.join(choices)}" if bad else None

    return check


def _retention_ms(v: Any) -> str | None:
    # Kafka rejects 0: it would delete every segment as soon as it rolls.
    return None if v is None or v == -1 or v >= 1 else "must be unlimited (-1) or at least 1"


# ------------------------------------------------------------------------ type handling

_INT_RE = re.compile(r"[+-]?\d+\Z")


def _parse(ctype: ConfigType, raw: str) -> tuple[Any, str | None]:
    """Parse a string into the config type; returns (value, error reason or None)."""
    text = raw.strip()
    if ctype in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        if not _INT_RE.match(text):
            return None, "must be an integer"
        n = int(text)
        lo, hi, what = {
            ConfigType.INT: (INT_MIN, INT_MAX, "a 32-bit integer"),
            ConfigType.SHORT: (SHORT_MIN, SHORT_MAX, "a 16-bit integer"),
            ConfigType.LONG: (LONG_MIN, LONG_MAX, "a 64-bit integer"),
        }[ctype]
        return (n, None) if lo <= n <= hi else (None, f"must be {what}")
    if ctype is ConfigType.BOOLEAN:
        low = text.lower()
        if low in ("true", "false"):
            return low == "true", None
        return None, "must be true or false"
    if ctype is ConfigType.DOUBLE:
        try:
            d = float(text)
        except ValueError:
            return None, "must be a number"
        if d != d or d in (float("inf"), float("-inf")):
            return None, "must be a finite number"
        return d, None
    if ctype is ConfigType.LIST:
        return [p.strip() for p in text.split(",") if p.strip()], None
    return text, None


def _format(ctype: ConfigType, value: Any) -> str | None:
    """Render a parsed value the way Kafka shows it in DescribeConfigs."""
    if value is None:
        return None
    if ctype is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if ctype is ConfigType.LIST:
        return ",".join(value)
    return str(value)


def _unknown(key: str, known: Iterable[str], what: str = "configuration") -> ConfigError:
    near = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    return ConfigError(f"Unknown {what} '{key}'{hint}")


def _invalid(key: str, raw: str, reason: str) -> ConfigError:
    return ConfigError(f"Invalid value '{raw}' for configuration '{key}': {reason}")


# ------------------------------------------------------------------------ definitions


@dataclass(frozen=True)
class ConfigDef:
    """One broker key: type, default (already parsed; None = unset/null) and validator."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    sensitive: bool = False

    def parse(self, raw: str) -> Any:
        value, reason = _parse(self.type, raw)
        if reason is None and self.validator is not None:
            reason = self.validator(value)
        if reason is not None:
            raise _invalid(self.name, raw.strip(), reason)
        return value


T = ConfigType
_BROKER_DEFS: list[ConfigDef] = [
    # identity and listeners
    ConfigDef("broker.id", T.INT, 0, "Id of this broker; unique in the cluster.", at_least(0)),
    ConfigDef("node.id", T.INT, None, "Alias of broker.id (KRaft name)."),
    ConfigDef("broker.rack", T.STRING, None, "Rack of the broker, for rack-aware replica placement."),
    ConfigDef("cluster.id", T.STRING, None, "Cluster id; generated and stored by the metadata store if unset."),
    ConfigDef("listeners", T.LIST, ["PLAINTEXT://127.0.0.1:9092"], "Addresses the broker binds to."),
    ConfigDef("advertised.listeners", T.LIST, None, "Addresses given to clients in Metadata; defaults to listeners."),
    ConfigDef(
        "listener.security.protocol.map",
        T.LIST,
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        "Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).",
    ),
    ConfigDef("inter.broker.listener.name", T.STRING, None,
              "Listener used between brokers; defaults to the one whose protocol is security.inter.broker.protocol."),
    ConfigDef("security.inter.broker.protocol", T.STRING, "PLAINTEXT",
              "Security protocol between brokers when inter.broker.listener.name is unset."),
    # storage
    ConfigDef("log.dirs", T.LIST, None, "Directories holding partition logs; overrides log.dir."),
    ConfigDef("log.dir", T.STRING, "./data", "Log directory used when log.dirs is unset."),
    ConfigDef("num.partitions", T.INT, 1, "Partitions of an auto-created topic.", at_least(1)),
    ConfigDef("default.replication.factor", T.INT, 1, "Replication factor of an auto-created topic.", at_least(1)),
    ConfigDef("auto.create.topics.enable", T.BOOLEAN, True, "Create a topic on Metadata/Produce for an unknown name."),
    ConfigDef("delete.topic.enable", T.BOOLEAN, True, "Allow DeleteTopics."),
    ConfigDef("log.segment.bytes", T.INT, 1073741824, "Size at which a segment rolls.", at_least(14)),
    ConfigDef("log.roll.ms", T.LONG, None, "Age at which a segment rolls; wins over log.roll.hours.", at_least(1)),
    ConfigDef("log.roll.hours", T.INT, 168, "Age in hours at which a segment rolls.", at_least(1)),
    ConfigDef("log.roll.jitter.ms", T.LONG, None, "Random jitter subtracted from the roll time."),
    ConfigDef("log.roll.jitter.hours", T.INT, 0, "Roll jitter in hours.", at_least(0)),
    ConfigDef("log.index.size.max.bytes", T.INT, 10485760, "Maximum size of an offset/time index.", at_least(4)),
    ConfigDef("log.index.interval.bytes", T.INT, 4096, "Bytes between sparse index entries.", at_least(0)),
    ConfigDef("log.retention.ms", T.LONG, None, "Retention time; wins over minutes and hours; -1 = unlimited.", _retention_ms),
    ConfigDef("log.retention.minutes", T.INT, None, "Retention time in minutes; wins over hours."),
    ConfigDef("log.retention.hours", T.INT, 168, "Retention time in hours."),
    ConfigDef("log.retention.bytes", T.LONG, -1, "Maximum partition size before old segments go; -1 = unlimited."),
    ConfigDef("log.retention.check.interval.ms", T.LONG, 300000, "How often retention runs.", at_least(1)),
    ConfigDef("log.flush.interval.messages", T.LONG, LONG_MAX, "Messages appended before an fsync.", at_least(1)),
    ConfigDef("log.flush.interval.ms", T.LONG, None, "Time between fsyncs; defaults to log.flush.scheduler.interval.ms."),
    ConfigDef("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX, "How often the flusher checks logs."),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", T.INT, 60000, "How often recovery points are checkpointed.", at_least(0)),
    ConfigDef("log.cleanup.policy", T.LIST, ["delete"], "delete and/or compact.", list_of("compact", "delete")),
    ConfigDef(
        "log.message.timestamp.type",
        T.STRING,
        "CreateTime",
        "Timestamp kept in batches: CreateTime or LogAppendTime.",
        one_of("CreateTime", "LogAppendTime"),
    ),
    ConfigDef("log.message.timestamp.difference.max.ms", T.LONG, LONG_MAX, "Maximum allowed CreateTime skew.", at_least(0)),
    ConfigDef("log.message.timestamp.before.max.ms", T.LONG, LONG_MAX, "How far in the past a CreateTime may be.", at_least(0)),
    ConfigDef("log.message.timestamp.after.max.ms", T.LONG, LONG_MAX, "How far in the future a CreateTime may be.", at_least(0)),
    ConfigDef("log.message.downconversion.enable", T.BOOLEAN, True, "Down-convert batches for old fetch versions."),
    ConfigDef("log.preallocate", T.BOOLEAN, False, "Preallocate segment files."),
    ConfigDef("log.cleaner.enable", T.BOOLEAN, True, "Run the log cleaner for compacted topics."),
    ConfigDef("log.cleaner.threads", T.INT, 1, "Log cleaner workers.", at_least(0)),
    ConfigDef("log.cleaner.delete.retention.ms", T.LONG, 86400000, "How long tombstones survive compaction.", at_least(0)),
    ConfigDef("log.cleaner.backoff.ms", T.LONG, 15000, "Pause between log cleaner passes when nothing needs cleaning.", at_least(0)),
    ConfigDef("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, "Dirty ratio that triggers compaction.", between(0, 1)),
    ConfigDef("log.cleaner.min.compaction.lag.ms", T.LONG, 0, "Minimum age before a record may be compacted.", at_least(0)),
    ConfigDef("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX, "Maximum age before a record must be compacted.", at_least(1)),
    ConfigDef("log.segment.delete.delay.ms", T.LONG, 60000, "Delay before a deleted segment's file is removed.", at_least(0)),
    ConfigDef("num.recovery.threads.per.data.dir", T.INT, 1, "Threads for log recovery at start-up.", at_least(1)),
    ConfigDef(
        "compression.type",
        T.STRING,
        "producer",
        "Compression on disk; producer keeps the producer's codec.",
        one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    # requests and sockets
    ConfigDef("message.max.bytes", T.INT, 1048588, "Largest record batch accepted.", at_least(0)),
    ConfigDef("socket.request.max.bytes", T.INT, 104857600, "Largest request frame accepted.", at_least(1)),
    ConfigDef("socket.send.buffer.bytes", T.INT, 102400, "SO_SNDBUF; -1 = OS default."),
    ConfigDef("socket.receive.buffer.bytes", T.INT, 102400, "SO_RCVBUF; -1 = OS default."),
    ConfigDef("num.network.threads", T.INT, 3, "Accepted for compatibility; Strom uses one event loop.", at_least(1)),
    ConfigDef("num.io.threads", T.INT, 8, "Accepted for compatibility; Strom uses one event loop.", at_least(1)),
    ConfigDef("connections.max.idle.ms", T.LONG, 600000,
              "Connections with no request in flight and no bytes received for this long are closed; "
              "-1 = never."),
    ConfigDef("queued.max.request.bytes", T.LONG, 536870912,
              "Broker-wide bytes of requests received but not yet handled (partly received frames included) "
              "before sockets stop being read; -1 = unbounded. Kafka's default is -1; Strom bounds it at "
              "512 MiB by default because all connections share one process heap.", at_least(-1)),
    ConfigDef("fetch.max.bytes", T.INT, 57671680, "Largest Fetch response.", at_least(1024)),
    # replication
    ConfigDef("min.insync.replicas", T.INT, 1, "ISR size needed for acks=all.", at_least(1)),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False, "Allow an out-of-sync replica to become leader."),
    ConfigDef("replica.lag.time.max.ms", T.LONG, 30000, "A follower not caught up for this long leaves the ISR."),
    ConfigDef("replica.fetch.max.bytes", T.INT, 1048576, "Bytes a follower fetches per partition.", at_least(0)),
    ConfigDef("replica.fetch.min.bytes", T.INT, 1, "Minimum bytes of a follower fetch response."),
    ConfigDef("replica.fetch.wait.max.ms", T.INT, 500, "Longest wait of a follower fetch."),
    ConfigDef("replica.socket.timeout.ms", T.INT, 30000, "Socket timeout of follower fetches."),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", T.LONG, 5000, "How often the HW is checkpointed."),
    ConfigDef("num.replica.fetchers", T.INT, 1, "Replica fetchers per source broker."),
    ConfigDef("auto.leader.rebalance.enable", T.BOOLEAN, True, "Move leadership back to preferred replicas."),
    ConfigDef("controlled.shutdown.enable", T.BOOLEAN, True, "Move leadership away before shutting down."),
    ConfigDef("controlled.shutdown.max.retries", T.INT, 3, "Attempts of a controlled shutdown.", at_least(1)),
    ConfigDef("controlled.shutdown.retry.backoff.ms", T.LONG, 5000, "Pause between controlled shutdown attempts."),
    ConfigDef("controller.socket.timeout.ms", T.INT, 30000, "Socket timeout of controller requests."),
    ConfigDef("leader.imbalance.per.broker.percentage", T.INT, 10,
              "Share of a broker's preferred partitions led elsewhere that triggers a preferred leader election."),
    ConfigDef("leader.imbalance.check.interval.seconds", T.LONG, 300, "How often leader imbalance is checked."),
    # coordination store
    ConfigDef("zookeeper.connect", T.STRING, "", "ZooKeeper connect string; empty = embedded single-node store."),
    ConfigDef("zookeeper.session.timeout.ms", T.INT, 18000, "ZooKeeper session timeout."),
    ConfigDef("zookeeper.connection.timeout.ms", T.INT, None, "Connect timeout; defaults to the session timeout."),
    # group and transaction coordinators
    ConfigDef("offsets.topic.num.partitions", T.INT, 50, "Partitions of __consumer_offsets.", at_least(1)),
    ConfigDef("offsets.topic.replication.factor", T.SHORT, 3, "Replication of __consumer_offsets (capped to brokers).", at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", T.INT, 104857600, "Segment size of __consumer_offsets.", at_least(1)),
    ConfigDef("offsets.retention.minutes", T.INT, 10080, "How long committed offsets of empty groups are kept.", at_least(1)),
    ConfigDef("offset.metadata.max.bytes", T.INT, 4096, "Largest metadata string accepted with an offset commit.", at_least(0)),
    ConfigDef("offsets.retention.check.interval.ms", T.LONG, 600000, "How often stale offsets are removed.", at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", T.INT, 3000, "Wait for more members before the first rebalance."),
    ConfigDef("group.min.session.timeout.ms", T.INT, 6000, "Smallest session timeout a member may ask for."),
    ConfigDef("group.max.session.timeout.ms", T.INT, 1800000, "Largest session timeout a member may ask for."),
    ConfigDef("group.max.size", T.INT, INT_MAX, "Maximum members of a group.", at_least(1)),
    ConfigDef("transaction.state.log.num.partitions", T.INT, 50, "Partitions of __transaction_state.", at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", T.SHORT, 3, "Replication of __transaction_state.", at_least(1)),
    ConfigDef("transaction.state.log.min.isr", T.INT, 2, "min.insync.replicas of __transaction_state.", at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", T.INT, 104857600, "Segment size of __transaction_state.", at_least(1)),
    ConfigDef("transaction.max.timeout.ms", T.INT, 900000, "Largest transaction timeout a producer may ask for.", at_least(1)),
    ConfigDef("transactional.id.expiration.ms", T.INT, 604800000, "Idle transactional ids expire after this.", at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10000,
              "How often the coordinator aborts transactions past their timeout.", at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, 3600000,
              "How often the coordinator removes expired transactional ids.", at_least(1)),
    ConfigDef("producer.id.expiration.ms", T.INT, 86400000, "Idle producer ids expire after this.", at_least(1)),
    ConfigDef("producer.id.expiration.check.interval.ms", T.INT, 600000,
              "How often partitions forget producer ids idle for producer.id.expiration.ms.", at_least(1)),
    # -- TLS (SSL and SASL_SSL listeners; PEM files through Python's ssl module)
    ConfigDef("ssl.keystore.type", T.STRING, "PEM", "Key store format; Strom reads PEM.", one_of("PEM")),
    ConfigDef("ssl.client.auth", T.STRING, "none", "Ask TLS clients for a certificate: none, requested, required.",
              one_of("none", "requested", "required")),
    ConfigDef("ssl.keystore.location", T.STRING, None,
              "PEM file with this broker's private key and certificate chain (SSL and SASL_SSL listeners)."),
    ConfigDef("ssl.keystore.certificate.chain", T.PASSWORD, None,
              "The certificate chain as PEM text, instead of ssl.keystore.location.", sensitive=True),
    ConfigDef("ssl.keystore.key", T.PASSWORD, None,
              "The private key as PEM text (with ssl.keystore.certificate.chain).", sensitive=True),
    ConfigDef("ssl.key.password", T.PASSWORD, None, "Password of an encrypted private key.", sensitive=True),
    ConfigDef("ssl.truststore.type", T.STRING, "PEM", "Trust store format; Strom reads PEM.", one_of("PEM")),
    ConfigDef("ssl.truststore.location", T.STRING, None,
              "PEM file of the CA certificates trusted for client certificates and, between brokers, servers."),
    ConfigDef("ssl.truststore.certificates", T.PASSWORD, None,
              "Trusted CA certificates as PEM text, instead of ssl.truststore.location.", sensitive=True),
    ConfigDef("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted.",
              list_of("TLSv1.2", "TLSv1.3")),
    ConfigDef("ssl.protocol", T.STRING, "TLSv1.3", "Kafka's SSLContext protocol; Strom negotiates within "
              "ssl.enabled.protocols.", one_of("TLS", "TLSv1.2", "TLSv1.3")),
    ConfigDef("ssl.cipher.suites", T.LIST, [], "OpenSSL names of the TLS 1.2 cipher suites allowed; empty = "
              "the system's secure defaults."),
    ConfigDef("ssl.principal.mapping.rules", T.STRING, "DEFAULT",
              "Rules mapping a client certificate's distinguished name to a user name: "
              "RULE:pattern/replacement/[LU],...,DEFAULT."),
    ConfigDef("ssl.endpoint.identification.algorithm", T.STRING, "https",
              "Between brokers: 'https' checks the server certificate names the host; empty = no check.",
              one_of("https", "HTTPS", "")),
    # -- SASL (SASL_PLAINTEXT and SASL_SSL listeners)
    ConfigDef("connections.max.reauth.ms", T.LONG, 0,
              "Longest a SASL session lasts before the client must re-authenticate; 0 = forever.", at_least(0)),
    ConfigDef("sasl.enabled.mechanisms", T.LIST, ["SCRAM-SHA-256", "SCRAM-SHA-512"],
              "SASL mechanisms SASL listeners offer. Kafka's default is GSSAPI (Kerberos), which Strom does not "
              "implement; PLAIN must be enabled explicitly.", list_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    ConfigDef("sasl.mechanism.inter.broker.protocol", T.STRING, "SCRAM-SHA-512",
              "SASL mechanism brokers use with each other on a SASL inter-broker listener.",
              one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    ConfigDef("sasl.jaas.config", T.PASSWORD, None,
              "JAAS login module line: PlainLoginModule users (user_<name>=\"password\") and this broker's own "
              "username/password on the inter-broker listener. Usually set per listener and mechanism: "
              "listener.name.<listener>.<mechanism>.sasl.jaas.config.", sensitive=True),
    ConfigDef("sasl.server.max.receive.size", T.INT, 524288,
              "Largest request accepted on a SASL connection before it has authenticated.", at_least(1)),
    ConfigDef("connection.failed.authentication.delay.ms", T.INT, 100,
              "Delay before answering a failed authentication; failures from one client host queue behind "
              "each other, so a host gets at most one answer per delay.", at_least(0)),
    ConfigDef("connection.authentication.timeout.ms", T.LONG, 10000,
              "A connection that has not finished its TLS handshake or SASL authentication within this time "
              "is closed (Strom's key; Kafka only has connections.max.idle.ms for this).", at_least(1)),
    # -- authorization (ACLs)
    ConfigDef("authorizer.class.name", T.STRING, "",
              "Authorizer to enable; Kafka's AclAuthorizer or StandardAuthorizer class names turn ACLs on.",
              one_of("", "kafka.security.authorizer.AclAuthorizer",
                     "org.apache.kafka.metadata.authorizer.StandardAuthorizer")),
    ConfigDef("super.users", T.STRING, "", "Principals allowed everything, separated by ';' (User:admin;User:bob)."),
    ConfigDef("allow.everyone.if.no.acl.found", T.BOOLEAN, False,
              "With an authorizer, allow a request on a resource no ACL names (otherwise only super users may)."),
    # -- quotas (client byte-rate and request-percentage quotas)
    ConfigDef("quota.window.num", T.INT, 11, "Samples kept to compute a client's rate.", at_least(1)),
    ConfigDef("quota.window.size.seconds", T.INT, 1, "Length of one quota sample.", at_least(1)),
    # -- metrics and health (Prometheus endpoint)
    ConfigDef("metrics.listener", T.STRING, "",
              "http://host:port of the Prometheus /metrics, /healthz and /readyz endpoint; empty = off.",
              validate_metrics_listener),
    ConfigDef("strom.loop.stall.warn.ms", T.INT, 200,
              "Log a WARN with the blocking callback's stack when the event loop runs nothing for this long; "
              "0 = off (docs/decisions/0025-threading-model.md).", at_least(0)),
]

# Kafka 3.9 dynamic broker keys Strom has no machinery for (Kerberos, JVM TLS providers, connection
# limits, remote storage, replication throttles...): accepted in server.properties and by AlterConfigs
# with Kafka's types and defaults, stored, described, and without effect here (see 0023).
_NO_EFFECT = "Kafka dynamic broker config, accepted and stored for compatibility; no effect in Strom."
_LONG_MAX = 2**63 - 1
_KAFKA_DYNAMIC_ONLY_DEFS: list[ConfigDef] = [
    ConfigDef(name, ctype, default, _NO_EFFECT, sensitive=ctype is T.PASSWORD)
    for name, ctype, default in (
        ("background.threads", T.INT, 10),
        ("principal.builder.class", T.CLASS, None),
        ("sasl.kerberos.service.name", T.STRING, None),
        ("sasl.kerberos.kinit.cmd", T.STRING, "/usr/bin/kinit"),
        ("sasl.kerberos.ticket.renew.window.factor", T.DOUBLE, 0.8),
        ("sasl.kerberos.ticket.renew.jitter", T.DOUBLE, 0.05),
        ("sasl.kerberos.min.time.before.relogin", T.LONG, 60000),
        ("sasl.kerberos.principal.to.local.rules", T.LIST, ["DEFAULT"]),
        ("sasl.login.refresh.window.factor", T.DOUBLE, 0.8),
        ("sasl.login.refresh.window.jitter", T.DOUBLE, 0.05),
        ("sasl.login.refresh.min.period.seconds", T.SHORT, 60),
        ("sasl.login.refresh.buffer.seconds", T.SHORT, 300),
        ("ssl.provider", T.STRING, None),
        ("ssl.keymanager.algorithm", T.STRING, "SunX509"),
        ("ssl.trustmanager.algorithm", T.STRING, "PKIX"),
        ("ssl.secure.random.implementation", T.STRING, None),
        ("ssl.engine.factory.class", T.CLASS, None),
        ("ssl.keystore.password", T.PASSWORD, None),
        ("ssl.truststore.password", T.PASSWORD, None),
        ("max.connections", T.INT, 2**31 - 1),
        ("max.connection.creation.rate", T.INT, 2**31 - 1),
        ("max.connections.per.ip", T.INT, 2**31 - 1),
        ("max.connections.per.ip.overrides", T.STRING, ""),
        ("metric.reporters", T.LIST, []),
        ("log.cleaner.dedupe.buffer.size", T.LONG, 134217728),
        ("log.cleaner.io.buffer.load.factor", T.DOUBLE, 0.9),
        ("log.cleaner.io.buffer.size", T.INT, 524288),
        ("log.cleaner.io.max.bytes.per.second", T.DOUBLE, 1.7976931348623157e308),
        ("log.local.retention.ms", T.LONG, -2),
        ("log.local.retention.bytes", T.LONG, -2),
        ("transaction.partition.verification.enable", T.BOOLEAN, True),
        ("remote.log.index.file.cache.total.size.bytes", T.LONG, 1073741824),
        ("remote.fetch.max.wait.ms", T.INT, 500),
        ("remote.log.manager.copy.max.bytes.per.second", T.LONG, _LONG_MAX),
        ("remote.log.manager.fetch.max.bytes.per.second", T.LONG, _LONG_MAX),
        ("leader.replication.throttled.rate", T.LONG, _LONG_MAX),
        ("follower.replication.throttled.rate", T.LONG, _LONG_MAX),
        ("replica.alter.log.dirs.io.max.bytes.per.second", T.LONG, _LONG_MAX),
    )
]
_BROKER_DEFS += [d for d in _KAFKA_DYNAMIC_ONLY_DEFS if d.name not in {b.name for b in _BROKER_DEFS}]
del T

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_DEFS}
"""All broker keys Strom accepts, by name."""

# Keys whose `get()` answers with the effective value Kafka derives from sibling keys.
_ALIASES = {"node.id": "broker.id"}


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
        value, reason = _parse(self.type, raw)
        if reason is None and self.validator is not None:
            reason = self.validator(value)
        if reason is not None:
            raise _invalid(self.name, raw.strip(), reason)
        return value


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
        "follower.replication.throttled.replicas", T.LIST, "Replicas throttled on the follower side.", None, (), []
    ),
    TopicConfigDef("index.interval.bytes", T.INT, "Bytes between sparse index entries.", at_least(0), ("log.index.interval.bytes",)),
    TopicConfigDef(
        "leader.replication.throttled.replicas", T.LIST, "Replicas throttled on the leader side.", None, (), []
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
    {d.synonyms[0] for d in _TOPIC_DEFS if d.synonyms}
    | THREAD_CONFIGS
    | {"log.cleaner.backoff.ms"}
    | PER_BROKER_CONFIGS
    | {d.name for d in _KAFKA_DYNAMIC_ONLY_DEFS}
    | {"background.threads", "message.max.bytes", "producer.id.expiration.ms"}
)
"""Broker keys AlterConfigs may change at run time, per broker or as the cluster default."""

# A broker key -> the keys that feed its effective value, in Kafka's precedence (log.retention.ms first).
_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {d.synonyms[0]: d.synonyms for d in _TOPIC_DEFS if d.synonyms}


# ------------------------------------------------------------------- properties parser

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Join backslash-continued lines like java.util.Properties; yields (line number, line)."""
    pending: str | None = None
    start = 0
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" \t\f")
        if pending is None:
            if not stripped or stripped[0] in "#!":
                continue
            start, pending = no, ""
        pending += stripped
        trailing = len(pending) - len(pending.rstrip("\\"))
        if trailing % 2 == 1:  # odd backslashes: the line continues
            pending = pending[:-1]
            continue
        yield start, pending
        pending = None
    if pending:
        yield start, pending


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text into key → value (later keys win, as in Java)."""
    props: dict[str, str] = {}
    for _, line in _logical_lines(text):
        n, i = len(line), 0
        while i < n and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key, j = line[:i], i
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
        while j < n and line[j] in " \t\f":
            j += 1
        props[_unescape(key)] = _unescape(line[j:]).rstrip()
    return props


# ----------------------------------------------------------------------- config entries


@dataclass(frozen=True)
class ConfigSynonym:
    """A DescribeConfigs synonym: another key that feeds this one, with its own source."""

    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    """One row of a DescribeConfigs response (all fields any version needs)."""

    name: str
    value: str | None
    source: int
    is_default: bool
    read_only: bool
    is_sensitive: bool
    config_type: int
    documentation: str
    synonyms: tuple[ConfigSynonym, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------------ BrokerConfig

LISTENER_PREFIX = "listener.name."
# Keys a listener may override, and the mechanisms that may prefix its sasl.* keys.
_LISTENER_KEY_PREFIXES = ("ssl.", "sasl.", "connections.", "connection.")
_PREFIXABLE_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"})


class BrokerConfig:
    """Parsed broker configuration (``server.properties`` plus ``--override`` values).

    ``get(key)`` returns typed values. For the time keys Kafka derives from siblings
    (``log.retention.ms``, ``log.roll.ms``, ``log.roll.jitter.ms``,
    ``log.flush.interval.ms``, ``zookeeper.connection.timeout.ms``) it returns the
    effective value, so callers never redo the precedence rules.
    """

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self._raw: dict[str, str] = {}
        self._static: dict[str, Any] = {}  # server.properties and --override
        # Kafka's dynamic layers (/config/brokers/<default> and /config/brokers/<id>), parsed.
        self._dynamic_default: dict[str, Any] = {}
        self._dynamic_broker: dict[str, Any] = {}
        self._values: dict[str, Any] = {}  # the merged view every reader sees
        # listener.name.<listener>.[<mechanism>.]<key>: listener (upper case) -> "[mechanism.]key" -> value
        self._listener_static: dict[str, dict[str, Any]] = {}
        for key, raw in (props or {}).items():
            self._set(key, raw)
        self._merge()
        self._check()

    # -- loading

    @classmethod
    def load(cls, path: str | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        """Read a properties file (or none) and apply ``key=value`` overrides on top."""
        props: dict[str, str] = {}
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    props.update(parse_properties(f.read()))
            except OSError as e:
                raise ConfigError(f"Cannot read configuration file {path}: {e.strerror}") from e
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Invalid override '{item}': expected key=value")
            props[key.strip()] = value.strip()
        return cls(props)

    def _set(self, key: str, raw: str) -> None:
        if key.startswith(LISTENER_PREFIX):
            self._set_listener_key(key, raw)
            return
        definition = BROKER_CONFIGS.get(key)
        if definition is None:
            raise _unknown(key, BROKER_CONFIGS)
        self._static[key] = definition.parse(raw)
        self._raw[key] = raw.strip()

    def _set_listener_key(self, key: str, raw: str) -> None:
        """`listener.name.<listener>.<key>` (and `...<mechanism>.sasl.*`): a broker key for one listener.

        Only the security keys may be prefixed (Kafka's per-listener configs); the value is checked like the
        unprefixed key's, the listener name against `listeners` once everything is read.
        """
        name, _, suffix = key[len(LISTENER_PREFIX):].partition(".")
        mechanism, base = "", suffix
        head, _, tail = suffix.partition(".")
        if head.upper() in _PREFIXABLE_MECHANISMS and tail.startswith("sasl."):
            mechanism, base = head.lower() + ".", tail
        definition = BROKER_CONFIGS.get(base)
        if not name or definition is None or not base.startswith(_LISTENER_KEY_PREFIXES):
            near = difflib.get_close_matches(base, [k for k in BROKER_CONFIGS if k.startswith(_LISTENER_KEY_PREFIXES)],
                                             n=1)
            hint = f" (did you mean '{LISTENER_PREFIX}{name}.{mechanism}{near[0]}'?)" if near else ""
            raise ConfigError(f"Unknown configuration '{key}': listener.name.<listener>. prefixes only ssl.*, "
                              f"sasl.* and connection(s).* keys{hint}")
        try:
            value = definition.parse(raw)
        except ConfigError as exc:
            raise _invalid(key, raw.strip(), str(exc).rsplit("': ", 1)[-1]) from None
        self._listener_static.setdefault(name.upper(), {})[mechanism + base] = value
        self._raw[key] = raw.strip()

    def listener_config(self, listener_name: str, key: str, mechanism: str | None = None) -> Any:
        """A key's value for one listener: `listener.name.<l>.<mechanism>.<key>`, then `listener.name.<l>.<key>`,
        then the broker-wide key (Kafka's per-listener lookup)."""
        props = self._listener_static.get(listener_name.upper())
        if props:
            if mechanism is not None and (found := props.get(f"{mechanism.lower()}.{key}")) is not None:
                return found
            if key in props:
                return props[key]
        return self.get(key)

    def listener_jaas_config(self, listener_name: str, mechanism: str) -> JaasConfig | None:
        """The JAAS login module a SASL listener uses for one mechanism (None when none is configured)."""
        text = self.listener_config(listener_name, "sasl.jaas.config", mechanism)
        return parse_jaas_config(text) if text else None

    def _check_security(self, names: set[str]) -> None:
        unknown = sorted(set(self._listener_static) - names)
        if unknown:
            raise ConfigError(f"listener.name.{unknown[0].lower()}.* names listener {unknown[0]}, which is not in "
                              f"listeners ({', '.join(sorted(names))})")
        jaas_keys = [k for k in self._raw if k == "sasl.jaas.config" or k.endswith(".sasl.jaas.config")]
        for key in jaas_keys:
            try:
                parse_jaas_config(self._raw[key])
            except JaasConfigError as exc:
                raise ConfigError(f"Invalid value for configuration '{key}': {exc}") from None
        inter = self.inter_broker_listener_name()
        for ep in self.listeners():
            if ep.listener_name == inter and ep.uses_sasl:
                mechanism = self.get("sasl.mechanism.inter.broker.protocol")
                enabled = self.listener_config(inter, "sasl.enabled.mechanisms")
                if mechanism not in enabled:
                    raise ConfigError(f"sasl.mechanism.inter.broker.protocol {mechanism} must be in "
                                      f"sasl.enabled.mechanisms of the inter-broker listener {inter} "
                                      f"({','.join(enabled)})")

    def _check_listeners(self) -> None:
        try:
            bound = self.listeners()
            advertised = self.advertised_listeners()
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None
        names = {ep.listener_name for ep in bound}
        ports = [ep.port for ep in bound if ep.port]
        if len(ports) != len(set(ports)):
            raise ConfigError(f"Invalid value '{','.join(self.get('listeners'))}' for configuration 'listeners': "
                              "each listener needs its own port")
        for ep in advertised:
            if ep.host == "0.0.0.0":
                raise ConfigError(
                    "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0; "
                    "set advertised.listeners to a routable address"
                )
            if ep.listener_name not in names:
                raise ConfigError(f"advertised.listeners names listener {ep.listener_name}, which is not in "
                                  "listeners")
        inter = self.inter_broker_listener_name()
        if inter not in names:
            raise ConfigError(f"inter.broker.listener.name must be a listener name in listeners "
                              f"({', '.join(sorted(names))}); got {inter}. Set inter.broker.listener.name or "
                              "security.inter.broker.protocol")
        self._check_security(names)

    def _merge(self) -> None:
        """Precedence as Kafka: per-broker dynamic > cluster-default dynamic > static > default.

        A new dict is swapped in whole, so a reader on another thread sees the old or the new view.
        """
        self._values = {**self._static, **self._dynamic_default, **self._dynamic_broker}

    def _check(self) -> None:
        """Cross-key rules Kafka enforces at start-up."""
        bid, nid = self._values.get("broker.id"), self._values.get("node.id")
        if bid is not None and nid is not None and bid != nid:
            raise ConfigError(f"broker.id ({bid}) and node.id ({nid}) must be equal when both are set")
        if not self.get("listeners"):
            raise ConfigError("Invalid value '' for configuration 'listeners': at least one listener is required")
        self._check_listeners()
        if "log.dirs" in self._values and not self._values["log.dirs"]:
            # Kafka refuses an empty list; silently falling back to log.dir would hide a typo.
            raise ConfigError("Invalid value '' for configuration 'log.dirs': at least one directory is required")
        if not self.get_raw("log.dir"):
            raise ConfigError("Invalid value '' for configuration 'log.dir': a directory is required")
        lo, hi = self.get("group.min.session.timeout.ms"), self.get("group.max.session.timeout.ms")
        if lo > hi:
            raise ConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        if self.get("replica.fetch.wait.max.ms") > self.get("replica.socket.timeout.ms"):
            raise ConfigError("replica.socket.timeout.ms must be at least replica.fetch.wait.max.ms: a follower's "
                              "fetch would time out while the leader still waits for data")

    # -- access

    def is_set(self, key: str) -> bool:
        """True when the key was given explicitly (file or override), not defaulted."""
        if key == "broker.id":
            return "broker.id" in self._values or "node.id" in self._values
        return key in self._values

    def get(self, key: str) -> Any:
        """Typed value of a broker key (effective value for derived time keys)."""
        if key not in BROKER_CONFIGS:
            raise _unknown(key, BROKER_CONFIGS)
        key = _ALIASES.get(key, key)
        v = self._values
        if key == "broker.id":
            return v.get("broker.id", v.get("node.id", 0))
        if key == "log.retention.ms":
            return self.retention_ms()
        if key == "log.roll.ms":
            return v["log.roll.ms"] if "log.roll.ms" in v else self.get_raw("log.roll.hours") * 3_600_000
        if key == "log.roll.jitter.ms":
            if "log.roll.jitter.ms" in v:
                return v["log.roll.jitter.ms"]
            return self.get_raw("log.roll.jitter.hours") * 3_600_000
        if key == "log.flush.interval.ms":
            if "log.flush.interval.ms" in v:
                return v["log.flush.interval.ms"]
            return self.get_raw("log.flush.scheduler.interval.ms")
        if key == "zookeeper.connection.timeout.ms":
            return v.get(key, self.get_raw("zookeeper.session.timeout.ms"))
        if key == "advertised.listeners":
            return v.get(key) or self.get("listeners")
        if key == "log.dirs":
            return self.log_dirs()
        return self.get_raw(key)

    __getitem__ = get

    def get_raw(self, key: str) -> Any:
        """The key's own typed value or its default, without derivation (None = unset)."""
        if key in self._values:
            return self._values[key]
        return BROKER_CONFIGS[key].default

    def retention_ms(self) -> int:
        """Effective retention: log.retention.ms > .minutes > .hours; any negative = -1."""
        v = self._values
        if "log.retention.ms" in v:
            ms = v["log.retention.ms"]
        elif "log.retention.minutes" in v:
            ms = v["log.retention.minutes"] * 60_000
        else:
            ms = self.get_raw("log.retention.hours") * 3_600_000
        return -1 if ms < 0 else ms

    def listener_security_protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.get("listener.security.protocol.map"))

    def listeners(self) -> list[EndPoint]:
        """Endpoints to bind, in the order configured (port 0 = any free port)."""
        return parse_listeners(self.get("listeners"), self.listener_security_protocol_map(), "listeners")

    def advertised_listeners(self, bound: Mapping[str, int] | None = None) -> list[EndPoint]:
        """Endpoints given to clients; an empty host becomes this host's name, port 0 the bound port."""
        key = "advertised.listeners" if self._values.get("advertised.listeners") else "listeners"
        out = []
        for ep in parse_listeners(self.get("advertised.listeners"), self.listener_security_protocol_map(), key):
            host = ep.host or socket.gethostname()  # Kafka advertises the canonical host name here
            port = ep.port or (bound or {}).get(ep.listener_name, 0)
            out.append(EndPoint(ep.listener_name, ep.security_protocol, host, port))
        return out

    def inter_broker_listener_name(self) -> str:
        name = self.get("inter.broker.listener.name")
        if name:
            return name.strip().upper()
        protocol = (self.get("security.inter.broker.protocol") or "PLAINTEXT").strip().upper()
        for ep in self.listeners():
            if ep.security_protocol == protocol:
                return ep.listener_name
        return protocol  # reported by _check: no listener speaks it

    def listener_host_port(self) -> tuple[str, int]:
        """(host, port) of the inter-broker listener (the first listener when there is one only)."""
        ep = self._inter_broker(self.listeners())
        return (ep.host or "0.0.0.0", ep.port)

    def advertised_host_port(self) -> tuple[str, int]:
        """(host, port) other brokers and tools reach this broker at: the inter-broker listener's."""
        ep = self._inter_broker(self.advertised_listeners())
        return ep.host, ep.port

    def _inter_broker(self, endpoints: list[EndPoint]) -> EndPoint:
        name = self.inter_broker_listener_name()
        for ep in endpoints:
            if ep.listener_name == name:
                return ep
        return endpoints[0]

    def log_dirs(self) -> list[str]:
        """Data directories: log.dirs if set, else log.dir."""
        dirs = self._values.get("log.dirs")
        return list(dirs) if dirs else [self.get("log.dir")]

    def check_log_dirs(self) -> tuple[list[str], dict[str, str]]:
        """Create missing data directories and prove each is a writable directory.

        Returns the usable ones (absolute) and, for the others, why they failed. As Kafka, a
        failing dir next to a usable one goes offline (the broker serves the rest); when none is
        usable, start-up fails with the key named instead of a traceback from deep inside log
        loading. Run at broker start-up (not at parse time: it touches the file system).
        """
        key = "log.dirs" if self._values.get("log.dirs") else "log.dir"
        usable: list[str] = []
        failed: dict[str, str] = {}
        first_error: ConfigError | None = None
        for d in self.log_dirs():
            path = os.path.abspath(d)
            if path in usable or path in failed:
                raise _invalid(key, ",".join(self.log_dirs()), f"{d} is listed twice")
            problem = None
            if os.path.exists(path) and not os.path.isdir(path):
                problem = "it is a file, not a directory"
            else:
                try:
                    os.makedirs(path, exist_ok=True)
                except OSError as e:
                    problem = f"cannot create the directory: {e.strerror}"
                else:
                    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
                        problem = "the directory is not readable and writable by this user"
            if problem is None:
                usable.append(path)
            else:
                failed[path] = problem
                first_error = first_error or _invalid(key, d, problem)
        if not usable and first_error is not None:
            raise first_error
        return usable, failed

    def _layers(self, per_broker: bool = True) -> list[tuple[ConfigSource, dict[str, Any]]]:
        layers = [(ConfigSource.DYNAMIC_BROKER_CONFIG, self._dynamic_broker)] if per_broker else []
        return layers + [(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._dynamic_default),
                         (ConfigSource.STATIC_BROKER_CONFIG, self._static)]

    def synonyms(self, names: Iterable[str], per_broker: bool = True) -> list[ConfigSynonym]:
        """DescribeConfigs synonyms of keys fed by ``names``: layer by layer, then the first default."""
        out: list[ConfigSynonym] = []
        for source, layer in self._layers(per_broker):
            for name in names:
                if name in layer:
                    out.append(ConfigSynonym(name, _format(BROKER_CONFIGS[name].type, layer[name]), int(source)))
        for name in names:
            d = BROKER_CONFIGS[name]
            if d.default is not None:
                out.append(ConfigSynonym(name, _format(d.type, d.default), int(ConfigSource.DEFAULT_CONFIG)))
                break
        return out

    def items(self, per_broker: bool = True) -> list[ConfigEntry]:
        """Broker resource rows for DescribeConfigs, with sources and synonyms.

        ``per_broker``: this broker's whole config (resource name = its id). Otherwise the cluster
        default resource (name ""), which as in Kafka lists only the keys set at that level.
        Dynamic keys are reported with read_only=False.
        """
        out = []
        for d in _BROKER_DEFS:
            if not per_broker and d.name not in self._dynamic_default:
                continue
            source = next((s for s, layer in self._layers(per_broker) if d.name in layer),
                          ConfigSource.DEFAULT_CONFIG)
            if d.name in ("broker.id", "node.id"):
                value = _format(d.type, self.get(d.name))
            elif per_broker:
                value = _format(d.type, self.get_raw(d.name))
            else:
                value = _format(d.type, self._dynamic_default[d.name])
            out.append(
                ConfigEntry(
                    name=d.name,
                    value=None if d.sensitive else value,
                    source=int(source),
                    is_default=source == ConfigSource.DEFAULT_CONFIG,
                    read_only=d.name not in DYNAMIC_BROKER_CONFIGS,
                    is_sensitive=d.sensitive,
                    config_type=int(d.type),
                    documentation=d.doc,
                    synonyms=tuple(self.synonyms(_BROKER_SYNONYMS.get(d.name, (d.name,)), per_broker)),
                )
            )
        return out

    # -- dynamic configs (AlterConfigs on a broker resource)

    def dynamic_configs(self, per_broker: bool) -> dict[str, str]:
        """One dynamic layer as strings: what ``/config/brokers/<id>`` (or ``<default>``) holds."""
        layer = self._dynamic_broker if per_broker else self._dynamic_default
        return {k: _format(BROKER_CONFIGS[k].type, v) or "" for k, v in layer.items()}

    def validate_dynamic_update(self, configs: Mapping[str, str], per_broker: bool) -> dict[str, str]:
        """Check a layer's new contents; returns them normalised for storage.

        Raises DynamicUpdateError for keys that are unknown, static, or per-broker only when the
        cluster default is changed (Kafka's INVALID_REQUEST), ConfigError for a bad value.
        """
        static = sorted(k for k in configs if k not in DYNAMIC_BROKER_CONFIGS)
        if static:
            raise DynamicUpdateError(f"Cannot update these configs dynamically: {', '.join(static)}")
        unprefixed = sorted(k for k in configs if k in LISTENER_ONLY_DYNAMIC_CONFIGS)
        if unprefixed:
            raise DynamicUpdateError("These security configs can be dynamically updated only per-listener using "
                                     f"the listener prefix: {', '.join(unprefixed)}")
        if not per_broker:
            only_one = sorted(k for k in configs if k in PER_BROKER_CONFIGS)
            if only_one:
                raise DynamicUpdateError("Cannot update these configs at default cluster level, broker id must "
                                         f"be specified: {', '.join(only_one)}")
        parsed = {k: BROKER_CONFIGS[k].parse(v or "") for k, v in configs.items()}
        for key in THREAD_CONFIGS & parsed.keys():
            current, new = self.get(key), parsed[key]
            if new < 1:
                raise _invalid(key, str(new), "must be at least 1 when changed dynamically")
            if current >= 1 and not current / 2 <= new <= current * 2:
                raise _invalid(key, str(new), f"may change to between half and double the current value {current}")
        candidate = object.__new__(BrokerConfig)
        candidate.__dict__.update(self.__dict__)
        if per_broker:
            candidate._dynamic_broker = parsed
        else:
            candidate._dynamic_default = parsed
        candidate._merge()
        candidate._check()  # cross-key rules (e.g. advertised.listeners must be routable)
        return {k: _format(BROKER_CONFIGS[k].type, v) or "" for k, v in parsed.items()}

    def set_dynamic_configs(self, per_broker: Mapping[str, str] | None = None,
                            default: Mapping[str, str] | None = None) -> tuple[set[str], list[str]]:
        """Replace the dynamic layers given (None keeps one); returns (keys whose effective value
        changed, problems). Entries that no longer validate are skipped, as Kafka skips invalid
        persisted dynamic configs instead of refusing to start."""
        problems: list[str] = []

        def parse(layer: Mapping[str, str], is_broker: bool) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for key, raw in layer.items():
                if key not in DYNAMIC_BROKER_CONFIGS or (not is_broker and key in PER_BROKER_CONFIGS):
                    problems.append(f"ignoring dynamic config {key}: not dynamic at this level")
                    continue
                try:
                    out[key] = BROKER_CONFIGS[key].parse(raw or "")
                except ConfigError as exc:
                    problems.append(f"ignoring dynamic config {key}: {exc}")
            return out

        before = {k: self.get(k) for k in BROKER_CONFIGS}
        saved = (self._dynamic_broker, self._dynamic_default)
        if per_broker is not None:
            self._dynamic_broker = parse(per_broker, True)
        if default is not None:
            self._dynamic_default = parse(default, False)
        self._merge()
        try:
            self._check()
        except ConfigError as exc:
            self._dynamic_broker, self._dynamic_default = saved
            self._merge()
            problems.append(f"ignoring dynamic configs: {exc}")
        changed = {k for k in BROKER_CONFIGS if self.get(k) != before[k]}
        return changed, problems

    def topic_defaults(self) -> dict[str, str]:
        """Topic key → default string derived from this broker's config."""
        return {name: self._topic_default_str(d) for name, d in TOPIC_CONFIGS.items()}

    def topic_default(self, name: str) -> Any:
        """Typed default of one topic key on this broker."""
        d = TOPIC_CONFIGS[name]
        return self.get(d.synonyms[0]) if d.synonyms else d.default

    def _topic_default_str(self, d: TopicConfigDef) -> str:
        return _format(d.type, self.topic_default(d.name)) or ""

    def __repr__(self) -> str:
        return f"BrokerConfig({self._raw!r})"


# --------------------------------------------------------------------- topic functions


def validate_topic_configs(props: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic overrides (CreateTopics/AlterConfigs) and return them normalised.

    A None value means "no override" (fall back to the broker default) and is dropped.
    """
    out: dict[str, str] = {}
    for key, raw in props.items():
        d = TOPIC_CONFIGS.get(key)
        if d is None:
            raise _unknown(key, TOPIC_CONFIGS, "topic configuration")
        if raw is None:
            continue
        value = d.parse(raw)
        out[key] = _format(d.type, value) or ""
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
            value = cfg._topic_default_str(d)
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
