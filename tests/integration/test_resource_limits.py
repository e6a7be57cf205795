"""Connections, request memory and file descriptors stay bounded; the broker keeps serving at its limits.

Memory is judged by the broker's peak resident size (VmHWM in /proc/<pid>/status), never by timings.
"""

from __future__ import annotations

import os
import resource
import socket
import struct
import threading
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

MiB = 1 << 20


def peak_rss(broker: BrokerProcess) -> int:
    """Highest resident set size the broker process has had, in bytes."""
    for line in Path(f"/proc/{broker.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def assert_answers(client: RawClient) -> None:
    resp = decode(ApiVersionsResponse, client.request(ApiVersionsRequest(), 0), 0, False)
    assert resp.error_code == 0
    meta = decode(MetadataResponse, client.request(MetadataRequest[1](topics=None), 1), 1, False)
    assert [b.node_id for b in meta.brokers] == [0]


def closed_by_broker(sock: socket.socket, timeout: float = 20) -> bool:
    """True when the broker closes the connection within the timeout (False if it stays open)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def _batch(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=64 * MiB)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000, key=None, value=v, headers=[])
    return bytes(b.build())


def _fetch(topic: str, max_wait_ms: int, min_bytes: int, max_bytes: int) -> FetchRequest:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                  log_start_offset=-1, partition_max_bytes=max_bytes)
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
                        forgotten_topics_data=[], rack_id="")


# -- request memory --------------------------------------------------------------------------------------


def test_declared_but_unsent_frames_cost_little(broker: BrokerProcess) -> None:
    """20 clients each announce a 100 MiB request and send 4 bytes of it: the broker must not take 2 GiB."""
    probe = RawClient(broker)
    assert_answers(probe)
    before = peak_rss(broker)
    hostile = [socket.create_connection(("127.0.0.1", broker.port), timeout=10) for _ in range(20)]
    try:
        for s in hostile:
            s.sendall(struct.pack(">i", 100 * MiB) + b"\x00\x00\x00\x00")
        assert_answers(probe)  # handled after the hostile headers, which arrived first
        grown = peak_rss(broker) - before
        assert grown < 64 * MiB, f"broker peak RSS grew by {grown / MiB:.0f} MiB"
        assert not any(closed_by_broker(s, timeout=0.2) for s in hostile[:3])  # slow senders are not dropped
    finally:
        for s in hostile:
            s.close()
        probe.close()


def test_large_produce_received_in_growing_pieces_is_stored_intact(broker_factory) -> None:  # noqa: ANN001
    """A 12 MiB produce (beyond the size allocated up front) sent in small pieces arrives byte for byte."""
    broker = broker_factory({"message.max.bytes": 32 * MiB, "socket.request.max.bytes": 64 * MiB})
    topic = new_topic(broker)
    values = [os.urandom(MiB) + bytes([i]) for i in range(12)]
    req = ProduceRequest[7](transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
        (topic, [(0, _batch(values))])])
    req.with_header(correlation_id=1, client_id="pieces")
    frame = bytes(req.encode(version=7, header=True, framed=True))
    c = RawClient(broker)
    try:
        for pos in range(0, len(frame), 100_000):
            c.send_raw(frame[pos : pos + 100_000])
        resp = decode(ProduceResponse, c.read_frame(), 7, False)
        assert resp.responses[0].partition_responses[0].error_code == 0
        fetched = decode(FetchResponse, c.request(_fetch(topic, 0, 0, 64 * MiB), 11), 11, False)
        records = MemoryRecords(bytes(fetched.responses[0].partitions[0].records))
        got = []
        while (batch := records.next_batch()) is not None:
            got += [r.value for r in batch]
        assert got == values
    finally:
        c.close()


def test_queued_max_request_bytes_bounds_request_memory(broker_factory) -> None:  # noqa: ANN001
    """10 clients send 50 MiB requests at once; with a 4 MiB budget the broker takes them a few at a time."""
    broker = broker_factory({"queued.max.request.bytes": 4 * MiB})
    probe = RawClient(broker)
    assert_answers(probe)
    before = peak_rss(broker)
    # A frame the broker receives in full and then refuses as malformed (it closes the connection).
    body = struct.pack(">hhih", 999, 0, 1, -1) + bytes(50 * MiB - 10)
    frame = struct.pack(">i", len(body)) + body
    sent: list[bool] = []

    def send() -> None:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as s:
            try:
                s.sendall(frame)
            except ConnectionError:
                pass  # the broker may already have answered with a close
            sent.append(closed_by_broker(s, timeout=120))

    threads = [threading.Thread(target=send) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    try:
        assert sent == [True] * 10  # every request was read and handled in the end
        grown = peak_rss(broker) - before
        assert grown < 200 * MiB, f"broker peak RSS grew by {grown / MiB:.0f} MiB for 500 MiB sent"
        assert_answers(probe)
    finally:
        probe.close()


# -- idle connections -------------------------------------------------------------------------------------


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory) -> None:  # noqa: ANN001
    broker = broker_factory({"connections.max.idle.ms": 1000})
    used = RawClient(broker)
    assert_answers(used)
    silent = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    partial = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    partial.sendall(struct.pack(">i", 1000) + b"\x00\x12")  # a request that never completes
    try:
        assert closed_by_broker(used.sock)
        assert closed_by_broker(silent)
        assert closed_by_broker(partial)
    finally:
        used.close()
        silent.close()
        partial.close()
    assert "idle for longer than connections.max.idle.ms=1000" in broker.log_path.read_text()


def test_long_poll_in_flight_is_not_idle(broker_factory) -> None:  # noqa: ANN001
    """A fetch waiting longer than connections.max.idle.ms keeps its connection; it is answered."""
    broker = broker_factory({"connections.max.idle.ms": 500})
    topic = new_topic(broker)
    c = RawClient(broker)
    try:
        resp = decode(FetchResponse, c.request(_fetch(topic, 2000, 1, MiB), 11), 11, False)
        assert resp.responses[0].partitions[0].error_code == 0
        assert closed_by_broker(c.sock)  # and once answered, the quiet connection goes
    finally:
        c.close()


# -- file descriptors ---------------------------------------------------------------------------------------


def _open_nonblocking(port: int, n: int) -> list[socket.socket]:
    """Start n connections without waiting: those beyond the listen backlog just stay pending."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


def test_out_of_descriptors_keeps_serving_existing_connections(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, rlimit_nofile=(200, 200))
    with broker:
        existing = RawClient(broker)
        assert_answers(existing)
        flood = _open_nonblocking(broker.port, 400)
        try:
            # The broker runs out of descriptors accepting these; meanwhile the old connection is served.
            for _ in range(20):
                assert_answers(existing)
            threading.Event().wait(2)  # let the accept back-off cycle a few times
            assert_answers(existing)
        finally:
            for s in flood:
                s.close()
        fresh = RawClient(broker)  # accepting resumes once descriptors are free again
        assert_answers(fresh)
        fresh.close()
        existing.close()
        log_text = broker.log_path.read_text()
    errors = [line for line in log_text.splitlines() if " ERROR " in line]
    assert "cannot accept connections" in log_text
    assert len(errors) <= 3, errors[:5]
    assert "Traceback" not in log_text


def test_soft_open_files_limit_is_raised_to_the_hard_limit(tmp_path: Path) -> None:
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    with BrokerProcess(tmp_path, rlimit_nofile=(150, hard)) as broker:
        limits = Path(f"/proc/{broker.pid}/limits").read_text()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    assert line.split()[3:5] == [str(hard), str(hard)]


def test_too_low_open_files_limit_fails_at_start_with_the_ulimit_to_use(tmp_path: Path) -> None:
    """300 segments cannot be opened with `ulimit -n 256`: exit status 2 and one clear line, no traceback."""
    broker = BrokerProcess(tmp_path, {"log.segment.bytes": 1024})
    with broker:
        topic = new_topic(broker)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for i in range(300):
            p.produce(topic, value=b"%04d" % i + b"x" * 1100)
            p.poll(0)
        assert p.flush(60) == 0
    segments = sum(1 for _ in Path(broker.data_dir).rglob("*.log"))
    assert segments >= 300
    low = BrokerProcess(tmp_path, rlimit_nofile=(256, 256))
    with pytest.raises(RuntimeError, match="exited with 2"):
        low.start(timeout=60)
    output = low.log_path.read_text()
    assert "Traceback" not in output
    error_lines = [x for x in output.splitlines() if x.startswith("Error:")]
    assert len(error_lines) == 1
    assert f"ulimit -n {segments + 128}" in error_lines[0]
