"""Every broker key Strom accepts: type, default, validator and the one-line doc DescribeConfigs shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strom.config.metrics_listener import validate_metrics_listener
from strom.config.values import (
    INT_MAX,
    LONG_MAX,
    ConfigType,
    Validator,
    at_least,
    between,
    list_of,
    one_of,
    parse_checked,
)


def _retention_ms(v: Any) -> str | None:
    # Kafka rejects 0: it would delete every segment as soon as it rolls.
    return None if v is None or v == -1 or v >= 1 else "must be unlimited (-1) or at least 1"


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
        return parse_checked(self.name, self.type, self.validator, raw)


T = ConfigType
_BROKER_DEFS: list[ConfigDef] = [
    # identity and listeners
    ConfigDef("broker.id", T.INT, 0, "Id of this broker; unique in the cluster.", at_least(0)),
    ConfigDef("node.id", T.INT, None, "Alias of broker.id (KRaft name)."),
    ConfigDef("broker.rack", T.STRING, None, "Rack of the broker, for rack-aware replica placement."),
    ConfigDef("replica.selector.class", T.CLASS, None,
              "Picks the replica a consumer with client.rack reads from (KIP-392); unset = the leader only.",
              one_of("org.apache.kafka.common.replica.RackAwareReplicaSelector",
                     "strom.broker.replica_selector.RackAwareReplicaSelector")),
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
    ConfigDef("max.incremental.fetch.session.cache.slots", T.INT, 1000,
              "Incremental fetch sessions (KIP-227) this broker keeps; 0 turns them off.", at_least(0)),
    ConfigDef("min.incremental.fetch.session.eviction.ms", T.LONG, 120000,
              "A fetch session unused this long may lose its slot to a new one.", at_least(0)),
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
    # self-balancing (beyond Kafka; docs/decisions/0042-self-balancing.md)
    ConfigDef("strom.balancer.enable", T.BOOLEAN, False,
              "The controller evens replicas, leaders and disk use by throttled reassignments (`strom rebalance`)."),
    ConfigDef("strom.balancer.interval.ms", T.LONG, 300000, "How often the controller's balancer plans.", at_least(1)),
    ConfigDef("strom.balancer.max.partition.movements", T.INT, 10, "Partitions the balancer moves at once.",
              at_least(1)),
    ConfigDef("strom.balancer.throttle.bytes.per.sec", T.LONG, 50000000,
              "Replication throttle of the balancer's moves in bytes/s; -1 = none.", at_least(-1)),
    ConfigDef("strom.balancer.disk.threshold.percent", T.INT, 80,
              "Share of a broker's disk its replicas may fill before the balancer moves partitions away.",
              between(1, 100)),
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
    # KIP-848 consumer groups (group.protocol=consumer)
    ConfigDef("group.coordinator.rebalance.protocols", T.LIST, ["classic", "consumer"],
              "Group protocols the coordinator serves.", list_of("classic", "consumer")),
    ConfigDef("group.consumer.heartbeat.interval.ms", T.INT, 5000,
              "Heartbeat interval given to consumer-protocol members.", at_least(1)),
    ConfigDef("group.consumer.session.timeout.ms", T.INT, 45000,
              "A consumer-protocol member that does not heartbeat for this long is removed.", at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", T.INT, 45000,
              "Lower bound of group.consumer.session.timeout.ms.", at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", T.INT, 60000,
              "Upper bound of group.consumer.session.timeout.ms.", at_least(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", T.INT, 5000,
              "Lower bound of group.consumer.heartbeat.interval.ms.", at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", T.INT, 15000,
              "Upper bound of group.consumer.heartbeat.interval.ms.", at_least(1)),
    ConfigDef("group.consumer.max.size", T.INT, INT_MAX, "Maximum members of a consumer group.", at_least(1)),
    ConfigDef("group.consumer.assignors", T.LIST, ["uniform", "range"],
              "Server-side assignors (short or Kafka class names); the first is the default.",
              list_of("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                      "org.apache.kafka.coordinator.group.assignor.RangeAssignor")),
    ConfigDef("group.consumer.migration.policy", T.STRING, "bidirectional",
              "Online migration between the classic and consumer protocols: bidirectional, upgrade, downgrade "
              "or disabled.", one_of("bidirectional", "upgrade", "downgrade", "disabled")),
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
    # -- replication quotas (KIP-73): dynamic rates, applied to the replicas the topic configs name
    ConfigDef("leader.replication.throttled.rate", T.LONG, LONG_MAX,
              "Bytes/s this broker as leader sends to out-of-ISR followers of its leader-throttled replicas.",
              at_least(0)),
    ConfigDef("follower.replication.throttled.rate", T.LONG, LONG_MAX,
              "Bytes/s this broker as follower fetches for its follower-throttled replicas while out of the ISR.",
              at_least(0)),
    ConfigDef("replication.quota.window.num", T.INT, 11, "Samples kept to compute a replication rate.", at_least(1)),
    ConfigDef("replication.quota.window.size.seconds", T.INT, 1, "Length of one replication quota sample.",
              at_least(1)),
    # -- metrics and health (Prometheus endpoint)
    ConfigDef("metrics.listener", T.STRING, "",
              "http://host:port of the Prometheus /metrics, /healthz and /readyz endpoint; empty = off.",
              validate_metrics_listener),
    ConfigDef("strom.loop.stall.warn.ms", T.INT, 200,
              "Log a WARN with the blocking callback's stack when the event loop runs nothing for this long; "
              "0 = off (docs/decisions/0025-threading-model.md).", at_least(0)),
]

# Kafka 3.9 dynamic broker keys Strom has no machinery for (Kerberos, JVM TLS providers, connection
# limits, remote storage...): accepted in server.properties and by AlterConfigs
# with Kafka's types and defaults, stored, described, and without effect here (see 0023).
_NO_EFFECT = "Kafka dynamic broker config, accepted and stored for compatibility; no effect in Strom."
KAFKA_DYNAMIC_ONLY_DEFS: list[ConfigDef] = [
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
        ("remote.log.manager.copy.max.bytes.per.second", T.LONG, LONG_MAX),
        ("remote.log.manager.fetch.max.bytes.per.second", T.LONG, LONG_MAX),
        ("replica.alter.log.dirs.io.max.bytes.per.second", T.LONG, LONG_MAX),
    )
]
_BROKER_DEFS += [d for d in KAFKA_DYNAMIC_ONLY_DEFS if d.name not in {b.name for b in _BROKER_DEFS}]
del T

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_DEFS}
"""All broker keys Strom accepts, by name."""

# Keys whose `get()` answers with the effective value Kafka derives from sibling keys.
ALIASES = {"node.id": "broker.id"}
