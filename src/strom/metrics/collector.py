"""BrokerCollector: the broker's state as Prometheus metric families, built when /metrics is scraped.

Two steps, so a scrape never races the loop and costs the loop little: `snapshot()` runs on the
broker's loop and copies plain numbers out of the live objects (counters, partitions, groups);
`render(snapshot)` builds the families and the text format from that copy and may run in a
worker thread. Names follow Kafka's JMX names as jmx_exporter's Kafka rules render them
(`kafka_<domain>_<type>_<name>`, lower case, `_total` for the `...PerSec` meters); consumer
lag follows kafka_exporter's `kafka_consumergroup_*`. docs/metrics.md lists them all.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from strom.metrics.request_metrics import TIMES, cumulative_buckets, error_name
from strom.metrics.topic_stats import TOPIC_COUNTERS

if TYPE_CHECKING:
    from strom.broker.server import KafkaServer


class BrokerState(enum.IntEnum):
    """Kafka's BrokerState values (kafka.server:type=KafkaServer,name=BrokerState)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


@dataclass(slots=True)
class PartitionSnapshot:
    topic: str
    partition: int
    size: int
    segments: int
    log_start: int
    log_end: int
    high_watermark: int
    leader: bool
    replicas: int
    isr: int
    min_isr: int


@dataclass(slots=True)
class Snapshot:
    """Plain numbers copied on the loop; nothing here refers to live broker objects."""

    broker_id: int
    state: int
    ready: bool
    requests: list[tuple[str, dict[int, int], dict[int, int], list[int], list[float]]] = field(default_factory=list)
    topics: dict[str, tuple[int, ...]] = field(default_factory=dict)
    replication_bytes_in: int = 0
    replication_bytes_out: int = 0
    connections: dict[str, int] = field(default_factory=dict)
    connections_created: dict[str, int] = field(default_factory=dict)
    connections_closed: dict[str, int] = field(default_factory=dict)
    failed_authentications: dict[str, int] = field(default_factory=dict)
    successful_authentications: dict[str, int] = field(default_factory=dict)
    purgatories: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (watched, delayed)
    # quota kind (Produce, Fetch, Request) -> (throttled responses, throttle time in ms), since start
    quota_throttles: dict[str, tuple[int, int]] = field(default_factory=dict)
    # replication quota (LeaderReplication, FollowerReplication) -> (byte rate, throttled bytes,
    # partition fetches held back, ms over the bound), since start (KIP-73)
    replication_quotas: dict[str, tuple[float, int, int, float]] = field(default_factory=dict)
    partitions: list[PartitionSnapshot] = field(default_factory=list)
    offline_replicas: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0
    # incremental fetch sessions (FetchSessionCache): sessions, partitions cached, evictions since start
    fetch_sessions: tuple[int, int, int] = (0, 0, 0)
    controller: bool = False
    offline_partitions: int = 0
    global_partitions: int | None = None
    global_topics: int | None = None
    group_states: dict[str, int] = field(default_factory=dict)
    consumer_group_states: dict[str, int] = field(default_factory=dict)  # KIP-848 groups, per state
    group_offsets: int = 0
    group_members: dict[str, int] = field(default_factory=dict)
    # (group, topic, partition, committed offset, lag or None when the partition is not hosted here)
    group_offsets_detail: list[tuple[str, str, int, int, int | None]] = field(default_factory=list)
    loop_stall_max_s: float = 0.0
    loop_stalls: int = 0


GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


class BrokerCollector:
    """Reads a KafkaServer's state; tolerates a broker still starting (parts not built yet)."""

    def __init__(self, server: KafkaServer) -> None:
        self._server = server

    def snapshot(self) -> Snapshot:
        srv = self._server
        snap = Snapshot(broker_id=srv.broker_id, state=int(srv.broker_state), ready=srv.ready)
        stalls = getattr(srv, "stall_detector", None)
        if stalls is not None:
            snap.loop_stall_max_s, snap.loop_stalls = stalls.stats.max_stall_s, stalls.stats.stalls
        if srv.request_metrics is not None:
            snap.requests = srv.request_metrics.snapshot()
        rm = getattr(srv, "replica_manager", None)
        if rm is not None:
            self._replica_manager(snap, rm)
        sock = getattr(srv, "socket_server", None)
        if sock is not None:
            snap.connections = dict(Counter(c.endpoint.listener_name for c in sock.connections))
            for ep in sock.endpoints:
                snap.connections.setdefault(ep.listener_name, 0)
            snap.connections_created = dict(sock.connections_created)
            snap.connections_closed = dict(sock.connections_closed)
            snap.failed_authentications = dict(sock.failed_authentications)
            snap.successful_authentications = dict(sock.successful_authentications)
        quotas = getattr(srv, "quotas", None)
        if quotas is not None:
            for kind, manager in (("Produce", quotas.produce), ("Fetch", quotas.fetch), ("Request", quotas.request)):
                snap.quota_throttles[kind] = (manager.throttled_requests, manager.throttle_time_ms_total)
        replication = getattr(srv, "replication_quotas", None)
        if replication is not None:
            for rq in replication.managers():
                snap.replication_quotas[rq.replication_type] = (
                    rq.byte_rate(), rq.throttled_bytes_total, rq.held_back_total, rq.throttle_time_ms())
        self._controller(snap, srv)
        gc = getattr(srv, "group_coordinator", None)
        if gc is not None:
            for purgatory in (gc.heartbeat_purgatory, gc.rebalance_purgatory):
                snap.purgatories[purgatory.name] = (purgatory.watched(), purgatory.pending())
            self._groups(snap, gc, rm)
        return snap

    @staticmethod
    def _replica_manager(snap: Snapshot, rm: Any) -> None:
        if rm.topic_stats is not None:
            snap.topics, snap.replication_bytes_in, snap.replication_bytes_out = rm.topic_stats.snapshot()
        for purgatory in (rm.produce_purgatory, rm.fetch_purgatory, rm.delete_records_purgatory):
            snap.purgatories[purgatory.name] = (purgatory.watched(), purgatory.pending())
        snap.offline_replicas = len(rm.offline_partitions)
        snap.isr_shrinks, snap.isr_expands = rm.isr_shrinks, rm.isr_expands
        cache = rm.fetch_manager.cache
        snap.fetch_sessions = (len(cache.sessions), cache.num_partitions, cache.evictions)
        for (topic, index), part in list(rm.partitions.items()):
            snap.partitions.append(PartitionSnapshot(
                topic, index, part.size_in_bytes, part.num_log_segments, part.log_start_offset, part.log_end_offset,
                part.high_watermark, part.is_leader, len(part.replicas), len(part.isr), part.min_insync_replicas))

    @staticmethod
    def _controller(snap: Snapshot, srv: Any) -> None:
        if not srv.clustered:
            # A single node is its own controller: partitions without a leader are those in offline dirs.
            snap.controller = hasattr(srv, "replica_manager")
            if snap.controller:
                snap.offline_partitions = len(srv.replica_manager.offline_partitions)
                topics = srv.metadata.topics()
                snap.global_topics = len(topics)
                snap.global_partitions = sum(len(t.partitions) for t in topics.values())
            return
        controller = getattr(srv, "controller", None)
        if controller is None or not controller.active:
            return
        snap.controller = True
        ctx = controller.ctx
        snap.global_partitions = len(ctx.partitions)
        snap.global_topics = len({tp[0] for tp in ctx.partitions})
        snap.offline_partitions = sum(1 for tp, pl in ctx.partitions.items()
                                      if tp[0] not in ctx.deleting and (pl.leader < 0 or not ctx.is_live(pl.leader)))

    @staticmethod
    def _groups(snap: Snapshot, gc: Any, rm: Any) -> None:
        states = dict.fromkeys(GROUP_STATES, 0)
        parts = rm.partitions if rm is not None else {}
        for group_id, group in list(gc.manager.groups.items()):
            cg = group.consumer_group
            if cg is not None:  # a KIP-848 consumer group: its own states and members
                cstate = str(cg.state)
                snap.consumer_group_states[cstate] = snap.consumer_group_states.get(cstate, 0) + 1
                snap.group_members[group_id] = len(cg.members)
            else:
                state = str(group.state)
                states[state] = states.get(state, 0) + 1
                snap.group_members[group_id] = len(group.members)
            for tp, off in list(group.offsets.items()):
                snap.group_offsets += 1
                part = parts.get(tp)
                lag = max(part.high_watermark - off.offset, 0) if part is not None else None
                snap.group_offsets_detail.append((group_id, tp[0], tp[1], off.offset, lag))
        snap.group_states = states


# -------------------------------------------------------------------------------------- rendering
def _labelled(name: str, doc: str, labels: list[str], items: Iterable[tuple[list[str], float]],
              kind: type[Metric] = GaugeMetricFamily) -> Metric:
    fam = kind(name, doc, labels=labels)
    for values, value in items:
        fam.add_metric(values, value)
    return fam


def _gauge(name: str, doc: str, value: float) -> Metric:
    return GaugeMetricFamily(name, doc, value=value)


def families(snap: Snapshot) -> list[Metric]:
    """Every Strom metric family of one snapshot (process metrics come from prometheus_client)."""
    out: list[Metric] = []
    out += _server_families(snap)
    out += _request_families(snap)
    out += _topic_families(snap)
    out += _network_families(snap)
    out += _replica_families(snap)
    out += _log_families(snap)
    out += _group_families(snap)
    return out


def _server_families(snap: Snapshot) -> list[Metric]:
    return [
        _gauge("kafka_server_kafkaserver_brokerstate",
               "Broker state (Kafka's BrokerState: 1 starting, 2 recovering logs, 3 running, 7 shutting down).",
               snap.state),
        _gauge("strom_broker_ready", "1 once the listeners are open and log recovery is done (as /readyz).",
               1 if snap.ready else 0),
        _gauge("strom_loop_stall_max_seconds",
               "Longest time the event loop ran no callback since start (docs/decisions/0025-threading-model.md).",
               snap.loop_stall_max_s),
        CounterMetricFamily("strom_loop_stalls", "Event loop stalls longer than strom.loop.stall.warn.ms.",
                            value=snap.loop_stalls),
    ]


def _request_families(snap: Snapshot) -> list[Metric]:
    requests = CounterMetricFamily("kafka_network_requestmetrics_requests_total",
                                   "Requests answered, per API and version (RequestsPerSec).",
                                   labels=["request", "version"])
    errors = CounterMetricFamily("kafka_network_requestmetrics_errors_total",
                                 "Error codes returned, per API and error (ErrorsPerSec; NONE is not counted).",
                                 labels=["request", "error"])
    hists = [HistogramMetricFamily(f"kafka_network_requestmetrics_{t}", f"Request {_TIME_DOCS[t]}, in ms.",
                                   labels=["request"]) for t in TIMES]
    for name, versions, errs, buckets, sums in snap.requests:
        for version, n in sorted(versions.items()):
            requests.add_metric([name, str(version)], n)
        for code, n in sorted(errs.items()):
            errors.add_metric([name, error_name(code)], n)
        if versions:
            for i, fam in enumerate(hists):
                fam.add_metric([name], cumulative_buckets(buckets, i), sums[i] * 1000.0)
    return [requests, errors, *hists]


_TIME_DOCS = {
    "requestqueuetimems": "time from arrival until its handler started",
    "localtimems": "time in its handler, purgatory waits excluded",
    "remotetimems": "time waiting in a purgatory (acks=all produce, long-poll fetch)",
    "responsesendtimems": "time from the answer being ready until it was written to the socket",
    "totaltimems": "time from arrival until its answer was written",
}


def _topic_families(snap: Snapshot) -> list[Metric]:
    docs = {
        "bytesin": "Record bytes appended by clients (BytesInPerSec).",
        "bytesout": "Record bytes sent to consumers (BytesOutPerSec).",
        "messagesin": "Records appended (MessagesInPerSec).",
        "bytesrejected": "Record bytes refused (too large, corrupt) (BytesRejectedPerSec).",
        "totalproducerequests": "Produce requests, counted per partition (TotalProduceRequestsPerSec).",
        "totalfetchrequests": "Consumer fetches, counted per partition (TotalFetchRequestsPerSec).",
        "failedproducerequests": "Produce requests that failed, per partition (FailedProduceRequestsPerSec).",
        "failedfetchrequests": "Consumer fetches that failed, per partition (FailedFetchRequestsPerSec).",
        "producemessageconversions": "Records produced in message format v0/v1 and converted to v2 "
                                     "(ProduceMessageConversionsPerSec).",
        "fetchmessageconversions": "Records converted to message format v0/v1 for old fetchers "
                                   "(FetchMessageConversionsPerSec).",
    }
    out: list[Metric] = []
    for i, counter in enumerate(TOPIC_COUNTERS):
        fam = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{counter}_total", docs[counter],
                                  labels=["topic"])
        # Kafka's broker-wide meter has no topic tag, and jmx_exporter renders it as the same name without
        # one: an empty topic label is the same series to Prometheus (dashboards pick it with topic="").
        fam.add_metric([""], sum(values[i] for values in snap.topics.values()))
        for topic, values in sorted(snap.topics.items()):
            fam.add_metric([topic], values[i])
        out.append(fam)
    out.append(CounterMetricFamily("kafka_server_brokertopicmetrics_replicationbytesin_total",
                                   "Bytes followers here fetched from leaders (ReplicationBytesInPerSec).",
                                   value=snap.replication_bytes_in))
    out.append(CounterMetricFamily("kafka_server_brokertopicmetrics_replicationbytesout_total",
                                   "Bytes leaders here sent to followers (ReplicationBytesOutPerSec).",
                                   value=snap.replication_bytes_out))
    return out


def _network_families(snap: Snapshot) -> list[Metric]:
    prefix = "kafka_server_socket_server_metrics_"
    return [
        _labelled(prefix + "connection_count", "Open client connections per listener.", ["listener"],
                  (([k], v) for k, v in sorted(snap.connections.items()))),
        _labelled(prefix + "connection_creation_total", "Connections accepted per listener.", ["listener"],
                  (([k], v) for k, v in sorted(snap.connections_created.items())), CounterMetricFamily),
        _labelled(prefix + "connection_close_total", "Connections closed per listener.", ["listener"],
                  (([k], v) for k, v in sorted(snap.connections_closed.items())), CounterMetricFamily),
        _labelled(prefix + "failed_authentication_total", "Failed SASL authentications per listener.", ["listener"],
                  (([k], v) for k, v in sorted(snap.failed_authentications.items())), CounterMetricFamily),
        _labelled(prefix + "successful_authentication_total", "Successful SASL authentications per listener.",
                  ["listener"], (([k], v) for k, v in sorted(snap.successful_authentications.items())),
                  CounterMetricFamily),
        _labelled("kafka_server_quota_throttled_requests_total",
                  "Responses throttled by a client quota, per quota kind (Produce, Fetch, Request).", ["quota"],
                  (([k], v[0]) for k, v in sorted(snap.quota_throttles.items())), CounterMetricFamily),
        _labelled("kafka_server_quota_throttle_time_ms_total",
                  "Throttle time given to clients by a client quota, in ms, per quota kind.", ["quota"],
                  (([k], v[1]) for k, v in sorted(snap.quota_throttles.items())), CounterMetricFamily),
        _labelled("kafka_server_replication_byte_rate",
                  "Bytes/s of throttled replicas over the quota window (KIP-73 byte-rate).", ["replication"],
                  (([k], v[0]) for k, v in sorted(snap.replication_quotas.items()))),
        _labelled("kafka_server_replication_throttled_bytes_total",
                  "Bytes of throttled replicas counted against the replication quota.", ["replication"],
                  (([k], v[1]) for k, v in sorted(snap.replication_quotas.items())), CounterMetricFamily),
        _labelled("kafka_server_replication_held_back_total",
                  "Partition fetches a replication throttle held back.", ["replication"],
                  (([k], v[2]) for k, v in sorted(snap.replication_quotas.items())), CounterMetricFamily),
        _labelled("kafka_server_replication_throttle_time_ms_total",
                  "Time the replication quota spent over its bound, in ms.", ["replication"],
                  (([k], v[3]) for k, v in sorted(snap.replication_quotas.items())), CounterMetricFamily),
        _labelled("kafka_server_delayedoperationpurgatory_purgatorysize",
                  "Watch-list entries of a purgatory (PurgatorySize).", ["delayedoperation"],
                  (([k], v[0]) for k, v in sorted(snap.purgatories.items()))),
        _labelled("kafka_server_delayedoperationpurgatory_numdelayedoperations",
                  "Operations waiting in a purgatory (NumDelayedOperations).", ["delayedoperation"],
                  (([k], v[1]) for k, v in sorted(snap.purgatories.items()))),
    ]


def _replica_families(snap: Snapshot) -> list[Metric]:
    led = [p for p in snap.partitions if p.leader]
    out = [
        _gauge("kafka_server_replicamanager_partitioncount", "Partitions hosted here (leaders and followers).",
               len(snap.partitions)),
        _gauge("kafka_server_replicamanager_leadercount", "Partitions led here.", len(led)),
        _gauge("kafka_server_replicamanager_underreplicatedpartitions",
               "Partitions led here whose ISR is smaller than their replica set.",
               sum(1 for p in led if p.isr < p.replicas)),
        _gauge("kafka_server_replicamanager_underminisrpartitioncount",
               "Partitions led here with fewer in-sync replicas than min.insync.replicas.",
               sum(1 for p in led if p.isr < p.min_isr)),
        _gauge("kafka_server_replicamanager_atminisrpartitioncount",
               "Partitions led here with exactly min.insync.replicas in-sync replicas.",
               sum(1 for p in led if p.isr == p.min_isr)),
        _gauge("kafka_server_replicamanager_offlinereplicacount", "Replicas here in an offline log dir.",
               snap.offline_replicas),
        CounterMetricFamily("kafka_server_replicamanager_isrshrinks_total",
                            "ISR shrinks this broker made as leader (IsrShrinksPerSec).", value=snap.isr_shrinks),
        CounterMetricFamily("kafka_server_replicamanager_isrexpands_total",
                            "ISR expansions this broker made as leader (IsrExpandsPerSec).", value=snap.isr_expands),
        _gauge("kafka_server_fetchsessioncache_numincrementalfetchsessions",
               "Incremental fetch sessions cached here (NumIncrementalFetchSessions).", snap.fetch_sessions[0]),
        _gauge("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
               "Partitions held by the cached fetch sessions (NumIncrementalFetchPartitionsCached).",
               snap.fetch_sessions[1]),
        CounterMetricFamily("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total",
                            "Fetch sessions evicted to make room (IncrementalFetchSessionEvictionsPerSec).",
                            value=snap.fetch_sessions[2]),
        _labelled("kafka_cluster_partition_underreplicated", "1 when a partition led here is under-replicated.",
                  ["topic", "partition"], (([p.topic, str(p.partition)], 1 if p.isr < p.replicas else 0)
                                           for p in led)),
        _labelled("kafka_cluster_partition_insyncreplicascount", "In-sync replicas of a partition led here.",
                  ["topic", "partition"], (([p.topic, str(p.partition)], p.isr) for p in led)),
        _labelled("kafka_cluster_partition_replicascount", "Replicas of a partition led here.",
                  ["topic", "partition"], (([p.topic, str(p.partition)], p.replicas) for p in led)),
        _gauge("kafka_controller_kafkacontroller_activecontrollercount",
               "1 on the active controller (a single node is its own controller).", 1 if snap.controller else 0),
    ]
    if snap.controller:
        out.append(_gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                          "Partitions without an available leader (reported by the controller).",
                          snap.offline_partitions))
        if snap.global_partitions is not None:
            out.append(_gauge("kafka_controller_kafkacontroller_globalpartitioncount",
                              "Partitions in the cluster (reported by the controller).", snap.global_partitions))
        if snap.global_topics is not None:
            out.append(_gauge("kafka_controller_kafkacontroller_globaltopiccount",
                              "Topics in the cluster (reported by the controller).", snap.global_topics))
    return out


def _log_families(snap: Snapshot) -> list[Metric]:
    labels = ["topic", "partition"]
    parts = sorted(snap.partitions, key=lambda p: (p.topic, p.partition))

    def per(attr: str) -> Iterable[tuple[list[str], float]]:
        return (([p.topic, str(p.partition)], getattr(p, attr)) for p in parts)

    return [
        _labelled("kafka_log_log_size", "Bytes of a partition's log on disk.", labels, per("size")),
        _labelled("kafka_log_log_numlogsegments", "Segments of a partition's log.", labels, per("segments")),
        _labelled("kafka_log_log_logstartoffset", "First offset of a partition's log.", labels, per("log_start")),
        _labelled("kafka_log_log_logendoffset", "Log end offset (next offset to write).", labels, per("log_end")),
        _labelled("kafka_cluster_partition_highwatermark", "High watermark of a partition hosted here.", labels,
                  per("high_watermark")),
    ]


def _group_families(snap: Snapshot) -> list[Metric]:
    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    out = [
        _gauge(prefix + "numgroups", "Groups this broker coordinates.",
               sum(snap.group_states.values()) + sum(snap.consumer_group_states.values())),
        _gauge(prefix + "numoffsets", "Committed offsets of the groups this broker coordinates.", snap.group_offsets),
        _labelled(prefix + "numgroupsstate", "Groups this broker coordinates, per state.", ["state"],
                  (([k], v) for k, v in sorted(snap.group_states.items()))),
    ]
    for state in GROUP_STATES:  # Kafka's per-state gauges (NumGroupsStable, ...)
        out.append(_gauge(prefix + "numgroups" + state.lower(), f"Groups in state {state}.",
                          snap.group_states.get(state, 0)))
    # Kafka 4's group-coordinator-metrics: groups per protocol, consumer groups per state.
    coordinator = "kafka_server_group_coordinator_metrics_"
    out.append(_labelled(coordinator + "group_count", "Groups this broker coordinates, per protocol.", ["protocol"],
                         [(["classic"], sum(snap.group_states.values())),
                          (["consumer"], sum(snap.consumer_group_states.values()))]))
    out.append(_labelled(coordinator + "consumer_group_count", "Consumer-protocol groups coordinated here, per state.",
                         ["state"], (([k.lower()], v) for k, v in sorted(snap.consumer_group_states.items()))))
    out.append(_labelled("kafka_consumergroup_members", "Members of a group coordinated here.", ["consumergroup"],
                         (([g], n) for g, n in sorted(snap.group_members.items()))))
    detail = sorted(snap.group_offsets_detail)
    out.append(_labelled("kafka_consumergroup_current_offset", "Committed offset of a group on a partition.",
                         ["consumergroup", "topic", "partition"],
                         (([g, t, str(p)], off) for g, t, p, off, _ in detail)))
    out.append(_labelled("kafka_consumergroup_lag",
                         "High watermark minus committed offset (partitions with a replica on the coordinator).",
                         ["consumergroup", "topic", "partition"],
                         (([g, t, str(p)], lag) for g, t, p, _, lag in detail if lag is not None)))
    return out


class _Families:
    """A collector that hands out families built earlier (prometheus_client's custom collector protocol)."""

    def __init__(self, built: list[Metric]) -> None:
        self._built = built

    def collect(self) -> list[Metric]:
        return self._built


def render(snap: Snapshot) -> bytes:
    """The Prometheus text format of a snapshot plus this process's CPU, memory, GC and platform metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families(snap)))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return generate_latest(registry)
