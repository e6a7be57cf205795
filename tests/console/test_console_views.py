"""What the console's pages show, through Starlette's TestClient against a real broker process:
Spark sink marker groups, topic configs, the message browser's formats, broker pages, replica health."""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from strom.console.app import ConsoleSettings, create_app


@pytest.fixture(scope="module")
def client(broker) -> Iterator[TestClient]:
    app = create_app(ConsoleSettings({"bootstrap.servers": broker.bootstrap}, timeout=10, browse_timeout=10))
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def make_topic(admin: AdminClient, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    name = f"views-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result()
    return name


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode(), partition=0)
    assert producer.flush(15) == 0


def commit(bootstrap: str, group: str, topic: str, offset: int, metadata: str | None = None) -> None:
    """Commit one offset without joining the group (a protocol-less "simple" group, as the Spark sink's)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset, metadata or "")], asynchronous=False)
    finally:
        consumer.close()


def row(body: str, attribute: str, value: str) -> str:
    """The HTML of the table row with data-<attribute>="value" ('' when absent)."""
    found = re.search(rf'<tr[^>]*\bdata-{attribute}="{re.escape(html.escape(value))}"[^>]*>(.*?)</tr>', body, re.S)
    return found.group(1) if found else ""


def text(fragment: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment))).strip()


# -- consumer groups ---------------------------------------------------------------------------------

def test_spark_sink_marker_groups_are_hidden_and_labelled_without_lag(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin)
    produce(broker.bootstrap, topic, 10)
    marker = f"strom-spark-{topic}-{uuid.uuid4().hex}-0"
    # What the exactly-once sink commits: the batch id as the "offset", its marker as the metadata.
    commit(broker.bootstrap, marker, topic, 3,
           "strom-spark-sink " + json.dumps({"batch": 3, "partition": 0, "rows": 10}))
    consumer = f"views-consumer-{uuid.uuid4().hex[:6]}"
    commit(broker.bootstrap, consumer, topic, 4)

    page = client.get("/groups").text
    assert row(page, "group", consumer), page
    assert "6" in text(row(page, "group", consumer))  # an ordinary simple group keeps its lag
    assert not row(page, "group", marker)
    assert re.search(r"1 Spark sink marker group\(s\) hidden", text(page)), text(page)

    shown = client.get("/groups?spark=1").text
    marker_row = text(row(shown, "group", marker))
    assert "Spark sink marker" in marker_row and "batch 3" in marker_row
    assert not re.search(r"\b7\b", marker_row)  # 10 - 3: the lag it used to show
    assert marker_row.endswith("–")
    assert "hide Spark sink markers" in shown

    detail = client.get(f"/groups/{marker}").text
    assert "This group is not a consumer" in text(detail) and "last: batch 3" in text(detail)
    assert 'id="reset"' not in detail
    assert client.get(f"/api/group?id={marker}").json()["total_lag"] is None
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/topics").text).group(1)
    refused = client.post(f"/groups/{marker}/reset", data={"csrf": token, "target": "earliest"})
    assert refused.status_code == 409
    assert "skip or repeat batches" in html.unescape(refused.text)


# -- topic configs -----------------------------------------------------------------------------------

def test_topic_configs_show_overrides_in_human_units_with_their_source(client: TestClient, admin) -> None:
    topic = make_topic(admin, config={"retention.ms": str(7 * 86_400_000), "segment.bytes": str(1 << 30)})
    page = client.get(f"/topics/{topic}").text
    shown = re.findall(r'data-config="([^"]+)"', page)
    assert sorted(shown) == ["retention.ms", "segment.bytes"], shown
    assert "7 d" in text(row(page, "config", "retention.ms"))
    assert "1 GiB" in text(row(page, "config", "segment.bytes"))
    assert "dynamic topic config" in text(row(page, "config", "retention.ms"))
    assert re.search(r"2 override\(s\) of \d+ · show all", text(page)), text(page)

    everything = client.get(f"/topics/{topic}?configs=all").text
    shown_all = re.findall(r'data-config="([^"]+)"', everything)
    assert len(shown_all) > 10 and "flush.ms" in shown_all
    flush = text(row(everything, "config", "flush.ms"))
    assert "unlimited" in flush and "default" in flush, flush
    assert "overrides only" in text(everything)

    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    reset = client.post(f"/topics/{topic}/configs", data={"csrf": token, "key": "segment.bytes", "op": "delete",
                                                          "view": "all"})
    assert reset.status_code == 303 and reset.headers["location"].endswith("?configs=all#configs")
    after = client.get(f"/topics/{topic}").text
    assert re.findall(r'data-config="([^"]+)"', after) == ["retention.ms"]
