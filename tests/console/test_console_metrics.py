"""The throughput chart fed by a broker's Prometheus endpoint (where the broker has one: strom.metrics)."""

from __future__ import annotations

import importlib.util
import re
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import expect

from tests.support.broker import BrokerProcess, free_port
from tests.support.console import ConsoleProcess

if importlib.util.find_spec("strom.metrics") is None:
    pytest.skip("this build of the broker has no Prometheus endpoint", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, metrics_port: int) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("console-metrics"),
                      {"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    b.start()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def console_process(broker: BrokerProcess, metrics_port: int,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    process = ConsoleProcess(broker.bootstrap, tmp_path_factory.mktemp("console"),
                             "--metrics-url", f"http://127.0.0.1:{metrics_port}/metrics")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_chart_draws_live_throughput(page, console_process, broker) -> None:
    topic = f"traffic-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    stop = threading.Event()

    def produce() -> None:  # a steady trickle for the chart, bounded by the test's own deadline
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            for _ in range(50):
                producer.produce(topic, b"x" * 1000)
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(10)

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    try:
        page.goto(console_process.url + "/")
        chart = page.locator("#throughput")
        expect(chart.locator("polyline.series.in")).to_have_count(1, timeout=20000)
        expect(chart.locator("[data-last=bytes_in]")).to_have_text(re.compile(r"^[0-9.]+ (B|KiB|MiB)/s$"))
        expect(chart.locator("[data-last=messages_in]")).to_have_text(re.compile(r"^[1-9][0-9,]* msg/s$"),
                                                                       timeout=20000)
        expect(chart.locator("[data-status]")).to_contain_text("last sample")
    finally:
        stop.set()
        worker.join(30)
    page.screenshot(path=str(console_process.log_path.parent / "overview.png"))
