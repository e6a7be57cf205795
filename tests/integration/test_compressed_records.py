"""Compressed batches wherever the broker looks inside them, with every codec: the log cleaner
compacts them, ListOffsets by timestamp finds records in them, and a topic whose
``compression.type`` names a codec stores every batch in that codec (as Kafka does)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.record_batch import iter_batches
from tests.integration.test_compaction import OVERRIDES, read_all, wait_for
from tests.support.broker import BrokerProcess
from tests.support.compression_bomb import produce_raw, vm_hwm_kib
from tests.support.record_batches import zero_value_batch

CODECS = ["gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    b = BrokerProcess(tmp_path_factory.mktemp("compressed"), OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.close()


def create_topic(broker: BrokerProcess, **configs: str) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1, config=configs)]).values():
        f.result(15)
    return name


def produce_batched(broker: BrokerProcess, topic: str, codec: str, records: list[tuple[bytes, bytes, int]]) -> None:
    """Records in compressed batches of up to 20 (linger lets the producer fill them)."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 50,
                  "batch.num.messages": 20})
    errors: list[object] = []
    for k, v, ts in records:
        p.produce(topic, key=k, value=v, timestamp=ts, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(30) == 0
    assert errors == []


def stored_codecs(broker: BrokerProcess, topic: str) -> set[int]:
    """The codecs of the batches in the partition's segment files, as a dump of the log shows them."""
    found = set()
    for log_file in (Path(broker.data_dir) / f"{topic}-0").glob("*.log"):
        found |= {h.compression for h in iter_batches(log_file.read_bytes())}
    return found


@pytest.mark.parametrize("codec", CODECS)
def test_cleaner_compacts_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = create_topic(broker, **{"cleanup.policy": "compact", "segment.bytes": "1024",
                                    "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})
    records = [(f"k{i % 5}".encode(), f"value-{i}-".encode() * 8, 1_700_000_000_000 + i) for i in range(300)]
    produce_batched(broker, topic, codec, records)
    produce_batched(broker, topic, codec, [(f"filler{i}".encode(), b"x" * 300, 1_700_000_001_000) for i in range(40)])
    assert CODEC_IDS[codec] in stored_codecs(broker, topic)

    def compacted() -> list[tuple[int, bytes | None, bytes | None]] | None:
        rows = read_all(broker, topic)
        return rows if len([r for r in rows if r[1] and r[1].startswith(b"k")]) < 60 else None

    rows = wait_for(compacted, f"the cleaner to compact a {codec} topic")
    latest = {k: v for k, v, _ in records}
    seen = {k: v for _, k, v in rows if k and k.startswith(b"k")}
    assert seen == latest
    offsets = [r[0] for r in rows]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert "failed" not in broker.log_tail(400)


@pytest.mark.parametrize("codec", CODECS)
def test_offsets_for_times_inside_compressed_batches(broker: BrokerProcess, codec: str) -> None:
    topic = create_topic(broker)
    base = 1_700_000_000_000
    produce_batched(broker, topic, codec, [(b"k", b"v%d" % i, base + 10 * i) for i in range(100)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"times-{uuid.uuid4().hex[:6]}"})
    try:
        found = c.offsets_for_times([TopicPartition(topic, 0, base + 10 * 37 - 5)], timeout=15)
        assert found[0].error is None
        assert found[0].offset == 37
    finally:
        c.close()


@pytest.mark.parametrize(("topic_codec", "producer_codec", "stored"), [
    ("gzip", "zstd", "gzip"),
    ("zstd", "gzip", "zstd"),
    ("lz4", "snappy", "lz4"),
    ("snappy", "lz4", "snappy"),
    ("uncompressed", "zstd", "none"),
    ("zstd", "none", "zstd"),
    ("producer", "zstd", "zstd"),
])
def test_topic_compression_type_recompresses(broker: BrokerProcess, topic_codec: str, producer_codec: str,
                                             stored: str) -> None:
    topic = create_topic(broker, **{"compression.type": topic_codec})
    records = [(b"k%d" % i, b"value-%d-" % i * 10, 1_700_000_000_000 + i) for i in range(120)]
    produce_batched(broker, topic, producer_codec, records)
    assert stored_codecs(broker, topic) == {CODEC_IDS[stored]}
    rows = read_all(broker, topic)
    assert [(k, v) for _, k, v in rows] == [(k, v) for k, v, _ in records]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"times-{uuid.uuid4().hex[:6]}"})
    try:  # record timestamps survive the conversion
        assert c.offsets_for_times([TopicPartition(topic, 0, 1_700_000_000_050)], timeout=15)[0].offset == 50
    finally:
        c.close()


def test_bomb_to_uncompressed_topic_is_refused_without_inflating(broker: BrokerProcess) -> None:
    """A 92 KB zstd batch that inflates to 2 GiB, sent to a topic that stores records
    uncompressed: the conversion stops at max.message.bytes and answers MESSAGE_TOO_LARGE."""
    topic = create_topic(broker, **{"compression.type": "uncompressed"})
    assert broker.pid is not None
    before = vm_hwm_kib(broker.pid)
    bomb = zero_value_batch("zstd", [b"key-%05d" % i for i in range(2048)], 1024 * 1024, 1_700_000_000_000)
    assert produce_raw(broker, topic, bomb) == 10  # MESSAGE_TOO_LARGE
    assert (vm_hwm_kib(broker.pid) - before) / 1024 < 128
    assert stored_codecs(broker, topic) == set()
    produce_batched(broker, topic, "zstd", [(b"k", b"still fine", 1_700_000_000_000)])
    assert [(k, v) for _, k, v in read_all(broker, topic)] == [(b"k", b"still fine")]
