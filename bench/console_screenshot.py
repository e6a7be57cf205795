"""Screenshots of the web console for the README: a broker, some data, a consumer group, headless Chromium.

Run: PYTHONPATH=src python bench/console_screenshot.py [--out docs]
Writes console.png (message browser, one record opened), console-produce.png (the produce tab),
console-groups.png (a group's lag), console-groups-list.png (groups with the Spark sink markers shown),
console-topic.png (a topic: partitions, config overrides in human units), console-broker.png (a broker:
log dirs, counts, configs) and, when the broker has a Prometheus endpoint (metrics.listener),
console-overview.png with the live throughput chart.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402
from tests.support.broker import BrokerProcess, free_port  # noqa: E402
from tests.support.console import ConsoleProcess, launch_chromium  # noqa: E402


def seed(bootstrap: str) -> None:
    """A few topics with JSON, text and binary records, and a consumer group that is behind."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    orders = NewTopic("orders", 3, 1, config={"retention.ms": str(7 * 86_400_000), "segment.bytes": str(1 << 28),
                                              "max.message.bytes": str(4 << 20)})
    for future in admin.create_topics([orders, NewTopic("clicks", 6, 1),
                                       NewTopic("audit-log", 1, 1, config={"cleanup.policy": "compact"})]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(40):
        order = {"order_id": 1000 + i, "customer": f"c-{i % 7:03d}", "items": [{"sku": f"SKU-{i % 5}", "qty": 1 + i % 3}],
                 "total": round(19.9 + i * 3.25, 2), "currency": "EUR"}
        producer.produce("orders", json.dumps(order).encode(), key=f"c-{i % 7:03d}".encode(),
                         headers=[("source", b"checkout"), ("trace-id", f"{i:016x}".encode())])
    producer.produce("orders", b"plain text note: <b>not</b> JSON", key=b"note", partition=0)
    producer.produce("orders", bytes(range(0, 40)), key=b"binary", partition=0)
    for i in range(500):
        producer.produce("clicks", json.dumps({"user": f"u{i % 13}", "page": f"/p/{i % 9}"}).encode())
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    seen = 0
    while seen < 15:
        message = consumer.poll(5)
        if message is not None and not message.error():
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    # What the exactly-once Spark sink leaves behind: one marker group per task (hidden by default).
    for partition in range(4):
        marker = Consumer({"bootstrap.servers": bootstrap, "group.id": f"strom-spark-clicks-4f1c9e-{partition}",
                           "enable.auto.commit": False})
        note = json.dumps({"batch": 12, "partition": partition, "rows": 125})
        marker.commit(offsets=[TopicPartition("clicks", 0, 12, f"strom-spark-sink {note}")], asynchronous=False)
        marker.close()


def traffic(bootstrap: str, stop: threading.Event) -> None:
    """Clicks at a varying rate for the throughput chart, until stopped (at most two minutes)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    started = time.monotonic()
    while not stop.is_set() and time.monotonic() - started < 120:
        burst = 20 + int(30 * abs(((time.monotonic() - started) % 10) - 5))
        for i in range(burst):
            producer.produce("clicks", json.dumps({"user": f"u{i % 13}", "page": f"/p/{i % 9}"}).encode())
        producer.poll(0)
        time.sleep(0.1)
    producer.flush(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="docs")
    args = parser.parse_args()
    out = Path(args.out)
    written = []
    has_metrics = importlib.util.find_spec("strom.metrics") is not None
    metrics_port = free_port()
    overrides = {"metrics.listener": f"http://127.0.0.1:{metrics_port}"} if has_metrics else {}
    console_args = ["--metrics-url", f"http://127.0.0.1:{metrics_port}/metrics"] if has_metrics else []
    with tempfile.TemporaryDirectory(prefix="strom-shot-") as tmp, BrokerProcess(tmp, overrides) as broker:
        seed(broker.bootstrap)
        with ConsoleProcess(broker.bootstrap, tmp, *console_args) as console, sync_playwright() as pw:
            browser = launch_chromium(pw)
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.goto(console.url + "/topics/orders/messages?partition=0&limit=20")
            page.locator("#messages tr.record").nth(2).click()
            page.screenshot(path=str(out / "console.png"))
            page.goto(console.url + "/topics/orders/messages?tab=produce")
            page.screenshot(path=str(out / "console-produce.png"))
            page.goto(console.url + "/groups/billing")
            page.screenshot(path=str(out / "console-groups.png"))
            page.goto(console.url + "/groups?spark=1")  # the Spark sink markers shown, labelled
            page.screenshot(path=str(out / "console-groups-list.png"))
            page.goto(console.url + "/topics/orders")
            page.screenshot(path=str(out / "console-topic.png"), full_page=True)
            page.goto(console.url + "/")
            page.click("#brokers tbody a")
            page.screenshot(path=str(out / "console-broker.png"))
            written += ["console.png", "console-produce.png", "console-groups.png", "console-groups-list.png",
                        "console-topic.png", "console-broker.png"]
            if has_metrics:
                stop = threading.Event()
                worker = threading.Thread(target=traffic, args=(broker.bootstrap, stop), daemon=True)
                worker.start()
                page.goto(console.url + "/")
                page.wait_for_timeout(40000)  # twenty samples of the chart
                page.screenshot(path=str(out / "console-overview.png"))
                written.append("console-overview.png")
                stop.set()
                worker.join(30)
            browser.close()
    print("wrote " + ", ".join(str(out / name) for name in written))


if __name__ == "__main__":
    main()
