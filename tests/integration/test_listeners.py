"""Several listeners: each client is told the endpoints of the listener it came in on."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.support.broker import BrokerProcess, free_port


def test_metadata_answers_with_the_listener_the_client_came_in_on(tmp_path) -> None:
    outside, inside = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{outside},INTERNAL://127.0.0.1:{inside}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{outside},INTERNAL://localhost:{inside}",
        "inter.broker.listener.name": "INTERNAL",
    }
    with BrokerProcess(tmp_path, overrides, port=outside) as broker:
        seen = {}
        for port in (outside, inside):
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
            meta = admin.list_topics(timeout=10)
            seen[port] = [(b.host, b.port) for b in meta.brokers.values()]
        assert seen[outside] == [("127.0.0.1", outside)]
        assert seen[inside] == [("localhost", inside)]

        producer = Producer({"bootstrap.servers": f"127.0.0.1:{inside}"})
        producer.produce("listeners", b"through the internal listener")
        assert producer.flush(15) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["listeners"])
        got = None
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got = msg.value()
                break
        consumer.close()
        assert got == b"through the internal listener"


def _start_fails(tmp_path, overrides: dict[str, str]) -> str:
    cmd = [sys.executable, "-m", "strom.broker.main", "--override", f"log.dirs={tmp_path / 'data'}"]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    return done.stdout + done.stderr


def test_a_listener_without_a_security_protocol_is_refused_at_start(tmp_path) -> None:
    out = _start_fails(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{free_port()},EXTERNAL://127.0.0.1:0"})
    assert "listener EXTERNAL has no security protocol" in out


def test_two_listeners_on_one_port_are_refused(tmp_path) -> None:
    port = free_port()
    out = _start_fails(tmp_path, {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"})
    assert "each listener needs its own port" in out


def test_an_inter_broker_listener_that_does_not_exist_is_refused(tmp_path) -> None:
    out = _start_fails(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                                  "inter.broker.listener.name": "INTERNAL"})
    assert "inter.broker.listener.name must be a listener name" in out
