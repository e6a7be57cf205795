"""A compression bomb sent to a compacted topic, and what it costs the broker: shared by the test
(asserts compaction and a bounded peak RSS) and bench/bench_compression_bomb.py (prints figures).

Two batches of zero-filled 1 MiB values go to a compacted topic whose segments hold one batch
each: the first with keys 0..n-1, the second with the first half of them, then a small record
rolls the segment. The cleaner must drop the first batch's older half, which means reading both
batches record by record and rebuilding the first one; the growth of the broker's peak RSS
(VmHWM) over its value before the bomb is what the bomb cost.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from strom.protocol.record_batch import iter_batches
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode
from tests.support.record_batches import zero_value_batch

MIB = 1024 * 1024
SCENARIOS = {"gzip": 950, "zstd": 2048}  # records of 1 MiB: ~978 KB gzip, ~92 KB zstd


@dataclass
class BombResult:
    codec: str
    records: int
    batch_bytes: int
    inflated_bytes: int
    baseline_hwm_mib: float
    peak_hwm_mib: float
    peak_rss_growth_mib: float
    compacted: bool
    first_batch_records_after: int | None
    seconds_to_compact: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def vm_hwm_kib(pid: int) -> int:
    """The process's peak resident set size (VmHWM), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc status")


def produce_raw(broker: BrokerProcess, topic: str, batch: bytes) -> int:
    """One batch as given, through a bare Produce v7 request; the partition's error code."""
    client = RawClient(broker, client_id="bomb-producer")
    client.sock.settimeout(120)
    try:
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=60_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
        resp = decode(ProduceResponse, client.request(req, 7), 7, flexible_header=False)
        return resp.responses[0].partition_responses[0].error_code
    finally:
        client.close()


def first_batch_count(partition_dir: Path) -> int | None:
    """Records left in the batch at offset 0 (None once it is gone), read from the segment files."""
    for log_file in sorted(partition_dir.glob("*.log")):
        data = log_file.read_bytes()[:4 * MIB]
        for h in iter_batches(data):
            if h.base_offset == 0:
                return h.records_count
            return None
    return None


def bomb_broker(workdir: str | os.PathLike[str]) -> BrokerProcess:
    return BrokerProcess(workdir, {"log.cleaner.backoff.ms": 200, "log.segment.delete.delay.ms": 0})


def run_bomb(broker: BrokerProcess, codec: str, timeout_s: float = 300.0) -> BombResult:
    """Send the bomb for ``codec`` to a new compacted topic and wait for the cleaner to compact it."""
    assert broker.pid is not None
    records = SCENARIOS[codec]
    topic = f"bomb-{codec}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    conf = {"cleanup.policy": "compact", "segment.bytes": str(16 * 1024), "min.cleanable.dirty.ratio": "0.01",
            "file.delete.delay.ms": "0"}
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=conf)]).values():
        f.result(30)
    keys = [b"key-%05d" % i for i in range(records)]
    now = int(time.time() * 1000)
    first = zero_value_batch(codec, keys, MIB, now)
    second = zero_value_batch(codec, keys[: records // 2], MIB, now)
    roll = zero_value_batch(codec, [b"roll"], 1, now)
    baseline = vm_hwm_kib(broker.pid)
    for batch in (first, second, roll):
        code = produce_raw(broker, topic, batch)
        if code != 0:
            raise AssertionError(f"produce answered error {code}")
    started = time.monotonic()
    partition_dir = Path(broker.data_dir) / f"{topic}-0"
    expected = records - records // 2
    count = first_batch_count(partition_dir)
    while time.monotonic() - started < timeout_s and count != expected:
        if broker.proc is not None and broker.proc.poll() is not None:
            break
        time.sleep(0.5)
        count = first_batch_count(partition_dir)
    elapsed = time.monotonic() - started
    peak = vm_hwm_kib(broker.pid) if broker.proc is not None and broker.proc.poll() is None else -1
    return BombResult(codec, records, len(first), records * MIB, round(baseline / 1024, 1), round(peak / 1024, 1),
                      round((peak - baseline) / 1024, 1), count == expected, count, round(elapsed, 2))


def run_recompression(broker: BrokerProcess, timeout_s: float = 300.0) -> dict[str, object]:
    """The zstd bomb sent to a topic with ``compression.type=gzip`` (and room for the result): the
    broker inflates 2 GiB and recompresses it. Meanwhile another connection asks for metadata
    every 50 ms; the longest wait for an answer shows whether the conversion held the event loop."""
    import threading

    from confluent_kafka.admin import AdminClient as _Admin

    assert broker.pid is not None
    topic = f"recompress-{uuid.uuid4().hex[:6]}"
    admin = _Admin({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": "gzip",
                                                                 "max.message.bytes": str(16 * MIB)})]).values():
        f.result(30)
    bomb = zero_value_batch("zstd", [b"key-%05d" % i for i in range(SCENARIOS["zstd"])], MIB, int(time.time() * 1000))
    baseline = vm_hwm_kib(broker.pid)
    outcome: dict[str, object] = {}

    def send() -> None:
        started = time.monotonic()
        outcome["error_code"] = produce_raw(broker, topic, bomb)
        outcome["produce_seconds"] = round(time.monotonic() - started, 2)

    sender = threading.Thread(target=send)
    sender.start()
    worst = 0.0
    pings = 0
    deadline = time.monotonic() + timeout_s
    while sender.is_alive() and time.monotonic() < deadline:
        t0 = time.monotonic()
        admin.list_topics(timeout=60)
        worst = max(worst, time.monotonic() - t0)
        pings += 1
        time.sleep(0.05)
    sender.join(timeout_s)
    stored = {h.compression for f in (Path(broker.data_dir) / f"{topic}-0").glob("*.log")
              for h in iter_batches(f.read_bytes())}
    return {"scenario": "zstd bomb to a gzip topic", **outcome, "stored_codecs": sorted(stored),
            "metadata_requests_meanwhile": pings, "max_metadata_wait_ms": round(worst * 1000, 1),
            "peak_rss_growth_mib": round((vm_hwm_kib(broker.pid) - baseline) / 1024, 1)}
