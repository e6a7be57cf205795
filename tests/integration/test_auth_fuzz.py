"""Hostile input before authentication: random bytes and mutated SASL exchanges never crash the broker, and a
request other than ApiVersions/SaslHandshake/SaslAuthenticate is never answered to a client that has not
authenticated. Also: failed logins from one host queue behind each other, and a client that never
authenticates is dropped."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from tests.integration.test_sasl import PLAIN_JAAS, authenticate, handshake
from tests.support.broker import BrokerProcess, free_port
from tests.support.raw_client import RawClient
from tests.support.security import start_sasl_broker

# Tokens a fuzzer mutates: right shape, wrong secrets (no mutation of these can log in).
SEED_TOKENS = [b"\0alice\0wrong-password", b"n,,n=alice,r=abcdefgh", b"c=biws,r=abcdefgh,p=AAAA",
               b"n,a=alice,n=alice,r=x,ext=1", b"\0\0", b""]


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_sasl_broker(tmp_path_factory.mktemp("fuzz"), PLAIN_JAAS, {
        "connection.failed.authentication.delay.ms": 0,  # fuzz at full speed; the delay has its own test
        "connection.authentication.timeout.ms": 1000,
    })
    try:
        yield broker
    finally:
        broker.close()


def _frame(request, correlation_id: int, version: int) -> bytes:  # noqa: ANN001
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return bytes(request.encode(version=version, header=True, framed=True))


def _mutate(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    buf = bytearray(data)
    for pos, value in flips:
        if buf:
            buf[pos % len(buf)] = value
        else:
            buf.append(value)
    return bytes(buf)


step = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=64)),
    st.tuples(st.just("handshake"), st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""]),
              st.integers(0, 1)),
    st.tuples(st.just("token"), st.sampled_from(SEED_TOKENS),
              st.lists(st.tuples(st.integers(0, 63), st.integers(0, 255)), max_size=4), st.integers(0, 2)),
    st.tuples(st.just("bare"), st.sampled_from(SEED_TOKENS)),  # a size-prefixed token without a header
    st.tuples(st.just("metadata"), st.integers(0, 12)),
    st.tuples(st.just("api_versions"),),
)


def _read_answers(sock: socket.socket) -> list[bytes]:
    """Frames until the broker closes (bounded by connection.authentication.timeout.ms)."""
    sock.settimeout(15)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    frames = []
    while len(data) >= 4:
        (size,) = struct.unpack_from(">i", data)
        frames.append(data[4 : 4 + size])
        data = data[4 + size :]
    return frames


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(step, max_size=8))
def test_hostile_sequences_before_authentication(fuzz_broker: BrokerProcess, steps: list[tuple]) -> None:
    forbidden: set[int] = set()
    out = b""
    for i, s in enumerate(steps, start=1):
        kind = s[0]
        if kind == "bytes":
            out += s[1]
        elif kind == "handshake":
            out += _frame(SaslHandshakeRequest(mechanism=s[1]), i, s[2])
        elif kind == "token":
            out += _frame(SaslAuthenticateRequest(auth_bytes=_mutate(s[1], s[2])), i, s[3])
        elif kind == "bare":
            out += struct.pack(">i", len(s[1])) + s[1]
        elif kind == "metadata":
            out += _frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), i, s[1])
            forbidden.add(i)
        else:
            out += _frame(ApiVersionsRequest(), i, 0)
    probe = len(steps) + 1
    out += _frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), probe, 4)
    forbidden.add(probe)
    with socket.create_connection(("127.0.0.1", fuzz_broker.sasl_port), timeout=10) as sock:
        try:
            sock.sendall(out)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed early: what it received made the broker hang up
        answers = _read_answers(sock)
    answered = {struct.unpack_from(">i", a)[0] for a in answers if len(a) >= 4}
    assert not answered & forbidden, f"answered a request before authentication: {answered & forbidden}"
    assert fuzz_broker.proc is not None and fuzz_broker.proc.poll() is None


def test_the_broker_still_serves_after_the_fuzzing(fuzz_broker: BrokerProcess) -> None:
    c = RawClient(fuzz_broker, port=fuzz_broker.sasl_port)
    try:
        assert handshake(c).error_code == 0
        assert authenticate(c, b"\0alice\0alice-secret", 2).error_code == 0
    finally:
        c.close()
    assert "Traceback" not in fuzz_broker.log_path.read_text()


def test_a_client_that_never_authenticates_is_dropped(fuzz_broker: BrokerProcess) -> None:
    c = RawClient(fuzz_broker, port=fuzz_broker.sasl_port)
    try:
        assert handshake(c).error_code == 0  # starts, then goes silent
        assert c.is_closed_by_peer()
    finally:
        c.close()
    assert "not authenticated within connection.authentication.timeout.ms" in fuzz_broker.log_tail(100)


def test_failed_logins_from_one_host_queue_behind_each_other(tmp_path) -> None:
    """Ten parallel wrong guesses from one host cannot all be answered in less than ten delays: each failure
    takes the host's next slot. (A lower bound the design guarantees, not a speed measurement.)"""
    plain, sasl = free_port(), free_port()
    delay_ms = 200
    with BrokerProcess(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                                  "sasl.enabled.mechanisms": "PLAIN",
                                  "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                                  "connection.failed.authentication.delay.ms": delay_ms}, port=plain) as broker:
        clients = [RawClient(broker, sasl) for _ in range(10)]
        for c in clients:
            assert handshake(c).error_code == 0
        codes: list[int] = []
        started = time.monotonic()
        threads = [threading.Thread(target=lambda c=c: codes.append(authenticate(c, b"\0alice\0guess", 1).error_code))
                   for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        elapsed = time.monotonic() - started
        for c in clients:
            c.close()
        assert codes == [58] * 10
        assert elapsed >= 10 * delay_ms / 1000 * 0.95
        # a correct login is not held up behind the failures
        good = RawClient(broker, sasl)
        try:
            assert handshake(good).error_code == 0
            assert authenticate(good, b"\0alice\0alice-secret", 1).error_code == 0
        finally:
            good.close()


def test_a_flood_of_failing_logins_is_turned_away_unchecked_then_the_host_may_log_in_again(tmp_path) -> None:
    """Past 50 queued failures a host's attempts are refused at once (sockets are not held for ever); once the
    queue drains, its correct login works."""
    from kafka.protocol.sasl import SaslAuthenticateResponse

    plain, sasl = free_port(), free_port()
    with BrokerProcess(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                                  "sasl.enabled.mechanisms": "PLAIN",
                                  "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                                  "connection.failed.authentication.delay.ms": 20}, port=plain) as broker:
        clients = [RawClient(broker, sasl) for _ in range(70)]
        for c in clients:
            assert handshake(c).error_code == 0
        answers: list[SaslAuthenticateResponse] = []
        threads = [threading.Thread(target=lambda c=c: answers.append(authenticate(c, b"\0alice\0guess", 1)))
                   for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for c in clients:
            c.close()
        assert [a.error_code for a in answers] == [58] * 70
        assert any("Too many failed authentications" in a.error_message for a in answers)
        for _ in range(100):
            good = RawClient(broker, sasl)
            try:
                assert handshake(good).error_code == 0
                if authenticate(good, b"\0alice\0alice-secret", 1).error_code == 0:
                    break
            finally:
                good.close()
            time.sleep(0.1)
        else:
            pytest.fail("the host could not log in after its queue drained")
        assert "too many failed authentications from this host" in broker.log_path.read_text()
