"""Every request gets an answer or the connection is closed: mutated Produce and Metadata frames, sent raw.

A seeded mutator damages real, well-formed requests (bytes flipped, inserted, removed, the frame cut)
while keeping the API key, version and correlation id, so the broker's answer can be matched. After each
mutated frame an ApiVersions request follows on the same connection; the broker answers in order, so
within a bounded wait one of these must happen:

- the mutated request's answer arrives (matching correlation id), or
- the connection is closed, or
- the ApiVersions answer arrives first, which is only right for a Produce with acks=0 that was
  appended (Kafka answers nothing then, and closes the connection when such a produce fails).

and no handler may fail on what decoded (an ERROR in the broker's log: UNKNOWN_SERVER_ERROR answers).

Replay a failure with STROM_FUZZ_SEED=<seed printed by the test>.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import struct
import time
from collections.abc import Callable

from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tests.integration.test_produce_consume import new_topic
from tests.support.broker import BrokerProcess

FRAMES = int(os.environ.get("STROM_FUZZ_FRAMES", "2000"))
# Generous: the machine may be loaded; an unanswered request is what this test is after, not a slow one.
ANSWER_WAIT_S = 20.0
PRODUCE_VERSIONS = (3, 4, 5, 6, 7, 8, 9, 10)
METADATA_VERSIONS = (0, 1, 2, 4, 7, 8, 9, 10, 11, 12, 13)
FOLLOW_UP_CORRELATION = 0x7EEE_0000


def _batch(values: list[bytes], producer_id: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
                                  producer_epoch=0 if producer_id >= 0 else -1,
                                  base_sequence=0 if producer_id >= 0 else -1, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000, key=b"k%d" % i, value=v, headers=[])
    return bytes(b.build())


@functools.cache
def _seeds(topic: str) -> list[tuple[str, int, int, bytes]]:
    """(api name, version, acks, frame without size) of the well-formed requests the mutator starts from."""
    out = []
    for version in PRODUCE_VERSIONS:
        for acks in (1, -1, 0):
            req = ProduceRequest[version](transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
                (topic, [(0, _batch([b"a" * 10, b"b" * 30]))])])
            out.append(("produce", version, acks, _encode(req, version)))
    for version in METADATA_VERSIONS:
        if version == 0:
            req = MetadataRequest[0](topics=[topic])
        else:
            kwargs = {"topics": [(topic,)] if version < 10 else [(None, topic)]}
            if version >= 4:
                kwargs["allow_auto_topic_creation"] = True
            if 8 <= version <= 10:
                kwargs["include_cluster_authorized_operations"] = True
            if version >= 8:
                kwargs["include_topic_authorized_operations"] = True
            req = MetadataRequest[version](**kwargs)
        out.append(("metadata", version, 1, _encode(req, version)))
    return out


def _encode(req, version: int) -> bytes:  # noqa: ANN001
    req.with_header(correlation_id=0, client_id="fuzz")
    return bytes(req.encode(version=version, header=True, framed=False))


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """Damage everything after the correlation id: flips, small integers, inserts, deletes, a cut."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(8, len(data)) if len(data) > 8 else 8
        kind = rng.random()
        if kind < 0.45 and pos < len(data):
            data[pos] = rng.randrange(256)
        elif kind < 0.65 and pos < len(data):
            data[pos] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
        elif kind < 0.75 and pos + 2 <= len(data):
            data[pos : pos + 2] = struct.pack(">h", rng.choice((-1, 0, 1, 0x7FFF, -0x8000)))
        elif kind < 0.85:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif kind < 0.95 and pos < len(data):
            del data[pos : pos + rng.randint(1, 4)]
        else:
            del data[max(8, pos) :]
    return bytes(data)


def _body_offset(frame: bytes) -> int:
    """Where the request body starts: after api key, version, correlation id, client id (and tagged fields)."""
    version = struct.unpack_from(">h", frame, 2)[0]
    pos = 8
    (n,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + max(n, 0)
    if version >= 9:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    return pos


def produce_acks(frame: bytes) -> int | None:
    """The acks field as the broker reads it (None if the frame is too damaged to say)."""
    try:
        version = struct.unpack_from(">h", frame, 2)[0]
        pos = _body_offset(frame)
        if version >= 9:
            length, pos = _uvarint(frame, pos)
            pos += max(length - 1, 0)
        else:
            (n,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(n, 0)
        return struct.unpack_from(">h", frame, pos)[0]
    except (struct.error, IndexError):
        return None


def surely_fails(frame: bytes, topic: str) -> bool:
    """A Produce the broker cannot append: undecodable, another topic or partition, no records or a bad CRC.
    Lenient on purpose (anything else may or may not be appended); an acks=0 produce that fails must
    close the connection, as in Kafka."""
    version = struct.unpack_from(">h", frame, 2)[0]
    try:
        req = ProduceRequest[version].decode(frame[_body_offset(frame):], version=version)
    except Exception:  # noqa: BLE001 - the decoder raises many types on garbage
        return True
    for t in req.topic_data or []:
        for p in t.partition_data or []:  # a topic without partitions asks for nothing, so nothing fails
            if t.name != topic or p.index != 0 or not p.records:
                return True
            try:
                if not DefaultRecordBatch(bytes(p.records)).validate_crc():
                    return True
            except Exception:  # noqa: BLE001
                return True
    return False


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _api_versions_frame() -> bytes:
    body = struct.pack(">hhih", 18, 0, FOLLOW_UP_CORRELATION, 4) + b"fuzz"
    return struct.pack(">i", len(body)) + body


def exchange(port: int, frame: bytes) -> str:
    """Send the mutated frame then an ApiVersions; say what came back first: 'answer', 'closed',
    'follow-up' (no answer to the mutated frame) or 'timeout'."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT_S)
    try:
        sock.sendall(struct.pack(">i", len(frame)) + frame + _api_versions_frame())
        deadline = time.monotonic() + ANSWER_WAIT_S
        buf = b""
        while len(buf) < 8:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return "timeout"
            except ConnectionError:
                return "closed"
            if not chunk:
                return "closed"
            buf += chunk
        correlation = struct.unpack_from(">i", buf, 4)[0]
        if correlation == FOLLOW_UP_CORRELATION:
            return "follow-up"
        assert correlation == struct.unpack_from(">i", frame, 4)[0], f"answer with a foreign correlation id {correlation}"
        return "answer"
    finally:
        sock.close()


def test_every_mutated_request_is_answered_or_closed(broker_factory: Callable[..., BrokerProcess]) -> None:
    # No auto-creation: a mutated topic name must stay unknown, so the oracle knows such a produce fails.
    broker = broker_factory({"auto.create.topics.enable": "false"})
    topic = new_topic(broker)
    seed = int(os.environ.get("STROM_FUZZ_SEED", random.SystemRandom().randrange(1 << 32)))
    print(f"fuzz seed {seed} (replay with STROM_FUZZ_SEED={seed})")
    rng = random.Random(seed)
    seeds = _seeds(topic)
    unanswered: list[str] = []
    outcomes: dict[str, int] = {}
    for i in range(FRAMES):
        api, version, _acks, original = rng.choice(seeds)
        frame = bytearray(mutate(rng, original))
        struct.pack_into(">i", frame, 4, i + 1)
        frame = bytes(frame)
        outcome = exchange(broker.port, frame)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "follow-up" and api == "produce" and produce_acks(frame) == 0:
            if not surely_fails(frame, topic):
                continue  # appended: acks=0 gets no answer
            outcome = "failed acks=0 produce, not closed"
        if outcome in ("answer", "closed"):
            continue
        unanswered.append(f"#{i} {api} v{version} {outcome}: {frame.hex()}")
    print(f"outcomes: {outcomes}")
    assert broker.proc is not None and broker.proc.poll() is None
    assert not unanswered, f"seed {seed}: {len(unanswered)} request(s) neither answered nor closed:\n" + "\n".join(
        unanswered[:20])
    # Whatever decodes, the handlers take in their stride: no UNKNOWN_SERVER_ERROR, no stack trace in the log.
    choked = [line for line in broker.log_path.read_text(errors="replace").splitlines() if " ERROR " in line]
    assert not choked, f"seed {seed}: handlers failed on decoded requests:\n" + "\n".join(choked[:10])
