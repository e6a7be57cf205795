"""The metrics endpoint of a real broker: /metrics after a known workload, /healthz, /readyz.

Every figure checked here follows from what the test itself did with real clients (records
produced, records consumed and committed, requests that must fail), never from timings.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from strom.broker.server import HOLD_RECOVERY_ENV
from tests.support.broker import BrokerProcess, free_port
from tests.support.metrics import (
    Samples,
    http_request,
    listening_ports,
    metered_broker,
    metrics_port,
    raw_exchange,
    scrape,
)

RECORDS = 200
RECORD_SIZE = 1000
READ = 120


def wait_until(predicate, timeout: float, what: str):  # noqa: ANN001, ANN201 - small polling helper
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with metered_broker(tmp_path_factory.mktemp("metered")) as broker:
        yield broker


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)


def produce(bootstrap: str, topic: str, n: int, size: int, **conf: object) -> list[KafkaError | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    results: list[KafkaError | None] = []
    for i in range(n):
        producer.produce(topic, (b"%08d" % i).ljust(size, b"x"), partition=0,
                         on_delivery=lambda err, _msg: results.append(err))
    assert producer.flush(60) == 0
    return results


def test_counters_follow_a_known_workload(metered: BrokerProcess) -> None:
    port = metrics_port(metered)
    topic, group = f"m-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(metered.bootstrap, topic)
    assert produce(metered.bootstrap, topic, RECORDS, RECORD_SIZE, acks="all") == [None] * RECORDS
    consumer = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < READ and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got += 1
    assert got == READ
    consumer.commit(offsets=[TopicPartition(topic, 0, READ)], asynchronous=False)
    consumer.close()

    m = scrape(port)
    # Traffic per topic (BrokerTopicMetrics) and the broker-wide series (empty topic label).
    assert m.get("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS
    assert m.get("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) >= RECORDS * RECORD_SIZE
    assert m.get("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= READ * RECORD_SIZE
    assert m.get("kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
    assert m.get("kafka_server_brokertopicmetrics_messagesin_total") >= RECORDS
    assert (m.get("kafka_server_brokertopicmetrics_bytesin_total")
            >= m.get("kafka_server_brokertopicmetrics_bytesin_total", topic=topic))
    # Requests per API and version; every answered request has exactly one sample in each histogram.
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "FindCoordinator", "JoinGroup", "SyncGroup",
                "OffsetCommit", "OffsetFetch"):
        n = m.total("kafka_network_requestmetrics_requests_total", request=api)
        assert n >= 1, api
        for hist in ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems", "totaltimems"):
            assert m.get(f"kafka_network_requestmetrics_{hist}_count", request=api) == n, (api, hist)
            assert m.get(f"kafka_network_requestmetrics_{hist}_bucket", request=api, le="+Inf") == n
    assert all(int(lab["version"]) >= 3 for lab, _ in m.matching("kafka_network_requestmetrics_requests_total",
                                                                  request="Produce"))
    # As Kafka, every Fetch is also timed as FetchConsumer (clients) or FetchFollower (replicas; none here).
    fetches = m.total("kafka_network_requestmetrics_requests_total", request="Fetch")
    assert m.total("kafka_network_requestmetrics_requests_total", request="FetchConsumer") == fetches
    assert m.get("kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer") == fetches
    assert m.get("kafka_network_requestmetrics_totaltimems_count", request="FetchFollower") is None
    # The log, as this broker holds it.
    assert m.get("kafka_log_log_logendoffset", topic=topic, partition="0") == RECORDS
    assert m.get("kafka_log_log_logstartoffset", topic=topic, partition="0") == 0
    assert m.get("kafka_log_log_size", topic=topic, partition="0") >= RECORDS * RECORD_SIZE
    assert m.get("kafka_log_log_numlogsegments", topic=topic, partition="0") >= 1
    # The group this broker coordinates: committed 120 of 200.
    assert m.get("kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition="0") == READ
    assert m.get("kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == RECORDS - READ
    assert m.get("kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
    assert m.get("kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1  # it left: Empty
    # Replica and controller state of a single node.
    assert m.get("kafka_server_replicamanager_leadercount") >= 1
    assert m.get("kafka_server_replicamanager_partitioncount") >= 1
    assert m.get("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert m.get("kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert m.get("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert m.get("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert m.get("kafka_server_kafkaserver_brokerstate") == 3
    assert m.get("kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") >= 3
    assert m.get("kafka_server_socket_server_metrics_failed_authentication_total") is None  # no SASL here
    assert m.get("kafka_server_delayedoperationpurgatory_purgatorysize", delayedoperation="Fetch") is not None
    assert m.get("process_cpu_seconds_total") is not None


def test_long_poll_wait_counts_as_remote_time(metered: BrokerProcess) -> None:
    """A consumer at the end of the log parks its fetches in the purgatory: that wait is remote time."""
    port = metrics_port(metered)
    topic = f"m-{uuid.uuid4().hex[:8]}"
    create_topic(metered.bootstrap, topic)
    before = scrape(port).get("kafka_network_requestmetrics_remotetimems_sum", request="Fetch") or 0.0
    consumer = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "fetch.wait.max.ms": 200})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        # The Fetch series appears with the first fetch: until then it is absent, which counts as 0.
        wait_until(lambda: (scrape(port).get("kafka_network_requestmetrics_remotetimems_sum", request="Fetch")
                            or 0.0) > before, 30, "a parked fetch to be counted")
        assert consumer.poll(0.1) is None
    finally:
        consumer.close()


def test_failed_requests_count_per_topic_and_error_code(metered: BrokerProcess) -> None:
    port = metrics_port(metered)
    topic = f"m-{uuid.uuid4().hex[:8]}"
    create_topic(metered.bootstrap, topic, config={"max.message.bytes": "2000"})
    before = scrape(port)
    errors = produce(metered.bootstrap, topic, 1, 5000, retries=0, acks="1")
    assert errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    admin = AdminClient({"bootstrap.servers": metered.bootstrap})
    missing = ConfigResource(ConfigResource.Type.TOPIC, f"missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(Exception):  # noqa: B017 - the broker's error is checked in the metrics below
        admin.describe_configs([missing])[missing].result(30)
    m = scrape(port)
    assert m.get("kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 1
    assert m.get("kafka_server_brokertopicmetrics_bytesrejected_total", topic=topic) >= 5000
    assert m.get("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 0

    def delta(request: str, error: str) -> float:
        name = "kafka_network_requestmetrics_errors_total"
        return (m.get(name, request=request, error=error) or 0) - (before.get(name, request=request, error=error) or 0)

    assert delta("Produce", "MESSAGE_TOO_LARGE") == 1
    assert delta("DescribeConfigs", "UNKNOWN_TOPIC_OR_PARTITION") == 1


def test_health_readiness_and_http_edges(metered: BrokerProcess) -> None:
    port = metrics_port(metered)
    assert http_request(port, "/healthz").status == 200
    ready = http_request(port, "/readyz")
    assert (ready.status, ready.body) == (200, b"ready\n")
    answer = http_request(port, "/metrics?name[]=x")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = Samples(answer.body.decode())
    assert samples.get("strom_broker_ready") == 1
    # The loop stall detector runs in every broker (docs/decisions/0025-threading-model.md).
    assert samples.get("strom_loop_stall_max_seconds") is not None
    assert samples.get("strom_loop_stalls_total") is not None
    head = http_request(port, "/metrics", method="HEAD")
    assert head.status == 200 and head.body == b"" and int(head.headers["content-length"]) > 0
    assert http_request(port, "/nothing").status == 404
    assert http_request(port, "/metrics", method="POST").status == 405
    assert raw_exchange(port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    # Headers past the cap: the connection is dropped; the endpoint keeps serving.
    assert raw_exchange(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n") == b""
    assert http_request(port, "/healthz").status == 200


def test_scrapes_under_load_never_break_the_broker(metered: BrokerProcess) -> None:
    port = metrics_port(metered)
    topic = f"m-{uuid.uuid4().hex[:8]}"
    create_topic(metered.bootstrap, topic)
    results: list[list[KafkaError | None]] = []
    writer = threading.Thread(target=lambda: results.append(produce(metered.bootstrap, topic, 20000, 200)))
    writer.start()
    seen: list[float] = []
    stalled = 0
    try:
        for _ in range(200):  # bounded; stops early once the producer is done and a few scrapes followed
            m = scrape(port)
            seen.append(m.get("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) or 0)
            if not writer.is_alive():
                stalled += 1
                if stalled > 3:
                    break
    finally:
        writer.join(120)
    assert not writer.is_alive()
    assert results and results[0] == [None] * 20000
    assert seen == sorted(seen), "a counter went backwards between scrapes"
    assert seen[-1] == 20000
    assert metered.proc is not None and metered.proc.poll() is None


def test_endpoint_is_off_by_default(broker: BrokerProcess) -> None:
    assert broker.pid is not None
    assert listening_ports(broker.pid) == {broker.port}
    assert "metrics endpoint" not in broker.log_path.read_text()


def test_bad_or_busy_metrics_listener_stops_the_broker_with_a_message(tmp_path: Path) -> None:
    for name in ("bad", "busy"):
        (tmp_path / name).mkdir()
    bad = BrokerProcess(tmp_path / "bad", {"metrics.listener": "ftp://nowhere"})
    with pytest.raises(RuntimeError, match="metrics.listener"):
        bad.start()
    taken = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        busy = BrokerProcess(tmp_path / "busy", {"metrics.listener": f"http://127.0.0.1:{taken}"})
        with pytest.raises(RuntimeError, match="cannot listen on metrics.listener"):
            busy.start()


@pytest.mark.slow
def test_readyz_is_503_while_logs_recover_after_a_crash(tmp_path: Path) -> None:
    """kill -9 leaves no clean-shutdown marker, so the next start recovers every log; the test hook holds
    that recovery open so the endpoint can be seen during it: alive, not ready, broker state 2."""
    mport = free_port()
    broker = BrokerProcess(tmp_path, {"metrics.listener": f"http://127.0.0.1:{mport}"})
    broker.start()
    try:
        topic = f"m-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic)
        assert produce(broker.bootstrap, topic, 500, 100) == [None] * 500
        broker.kill9()
        hold = tmp_path / "hold-recovery"
        hold.write_text("remove me to let recovery run")
        broker.env[HOLD_RECOVERY_ENV] = str(hold)
        broker.start(wait=False)
        wait_until(lambda: _status(mport, "/healthz") == 200, 30, "/healthz during recovery")
        assert _status(mport, "/readyz") == 503
        m = scrape(mport)
        assert m.get("kafka_server_kafkaserver_brokerstate") == 2
        assert m.get("strom_broker_ready") == 0
        assert broker.port not in listening_ports(broker.pid)
        os.unlink(hold)
        wait_until(lambda: _status(mport, "/readyz") == 200, 60, "/readyz after recovery")
        assert scrape(mport).get("kafka_log_log_logendoffset", topic=topic, partition="0") == 500
    finally:
        broker.close()


def _status(port: int, path: str) -> int | None:
    try:
        return http_request(port, path, timeout=2).status
    except OSError:
        return None


def test_authentications_and_connections_are_counted_per_listener(tmp_path: Path) -> None:
    """A wrong password and a good login on a SASL listener show in the authentication counters of that
    listener, and the connections it opened show in its connection counters."""
    from tests.integration.test_sasl import PLAIN_JAAS

    plain_port, sasl_port, mport = free_port(), free_port(), free_port()
    broker = BrokerProcess(tmp_path, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "metrics.listener": f"http://127.0.0.1:{mport}",
    }, port=plain_port)
    broker.start()
    try:
        def admin(password: str) -> AdminClient:
            return AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": password})

        admin("alice-secret").list_topics(timeout=15)
        with pytest.raises(Exception):  # noqa: B017 - librdkafka's error type varies; the counter is the point
            admin("wrong").list_topics(timeout=5)
        wait_until(lambda: (scrape(mport).get("kafka_server_socket_server_metrics_failed_authentication_total",
                                              listener="SASL_PLAINTEXT") or 0) >= 1, 15, "a failed login counted")
        m = scrape(mport)
        assert (m.get("kafka_server_socket_server_metrics_successful_authentication_total",
                      listener="SASL_PLAINTEXT") or 0) >= 1
        assert (m.get("kafka_server_socket_server_metrics_failed_authentication_total", listener="PLAINTEXT")
                or 0) == 0
        assert (m.get("kafka_server_socket_server_metrics_connection_creation_total", listener="SASL_PLAINTEXT")
                or 0) >= 2
    finally:
        broker.close()


def test_quota_throttling_is_counted(metered: BrokerProcess) -> None:
    """A producer over a tiny client-id quota: the Produce throttle counters move, the Fetch ones stay."""
    from tests.support.quotas import set_quotas

    port = metrics_port(metered)
    client_id = f"throttled-{uuid.uuid4().hex[:6]}"
    set_quotas(metered, [("client-id", client_id)], {"producer_byte_rate": 1024})
    topic = f"quota-metrics-{uuid.uuid4().hex[:6]}"
    create_topic(metered.bootstrap, topic)
    errors = produce(metered.bootstrap, topic, 20, 1000, **{"client.id": client_id})
    assert errors == [None] * 20
    m = scrape(port)
    assert (m.get("kafka_server_quota_throttled_requests_total", quota="Produce") or 0) >= 1
    assert (m.get("kafka_server_quota_throttle_time_ms_total", quota="Produce") or 0) > 0
    assert (m.get("kafka_server_quota_throttled_requests_total", quota="Fetch") or 0) == 0
