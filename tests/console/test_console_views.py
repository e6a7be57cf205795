"""What the console's pages show, through Starlette's TestClient against a real broker process:
Spark sink marker groups, topic configs, the message browser's formats, broker pages, replica health."""

from __future__ import annotations

import html
import json
import re
import time
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


# -- message browser ---------------------------------------------------------------------------------

def test_messages_are_compact_rows_with_chosen_formats(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin)
    value = json.dumps({"order": 42, "note": "x" * 400}).encode()
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value, key=b"k-1", headers=[("trace", b"\x00\x01ab")], partition=0)
    assert producer.flush(15) == 0
    base = f"/topics/{topic}/messages?partition=0&mode=offset&offset=0"

    body = client.get(base).text
    summary = re.search(r'<tr data-offset="0" data-partition="0" class="record"[^>]*>(.*?)</tr>', body, re.S)
    assert summary, body
    line = text(summary.group(1))
    assert '{"order": 42, "note": "xxx' in line and line.count("x") < 170  # one line, cut with an ellipsis
    assert "…" in line and "k-1" in line
    detail = re.search(r'<tr class="detail" hidden>(.*?)</tr>', body, re.S).group(1)
    assert '"order": 42,\n  "note": "' + "x" * 400 in html.unescape(detail)  # the whole record, pretty
    assert "00000000  00 01 61 62" in html.unescape(detail)  # the binary header as a hex dump
    assert "expand all" in text(body)

    hexed = client.get(base + "&kf=hex&vf=base64&hf=text&expand=1").text
    detail = html.unescape(re.search(r'<tr class="detail" >(.*?)</tr>', hexed, re.S).group(1))
    assert "00000000  6b 2d 31" in detail  # "k-1"
    assert __import__("base64").b64encode(value).decode() in detail
    assert re.search(r"trace\s*:\s*\\x00\\x01ab", text(detail))
    as_json = client.get(base + "&kf=json").text
    assert "not JSON, shown as text" in text(as_json)
    bad = client.get(base + "&vf=yaml")
    assert bad.status_code == 400 and "Value format must be one of auto, text, json, hex, base64" in bad.text


def test_produce_has_its_own_tab(client: TestClient, admin) -> None:
    topic = make_topic(admin)
    browse = client.get(f"/topics/{topic}/messages").text
    assert 'id="browse"' in browse and 'id="produce"' not in browse
    assert f'href="/topics/{topic}/messages?tab=produce"' in browse
    tab = client.get(f"/topics/{topic}/messages?tab=produce").text
    assert 'id="produce"' in tab and 'id="browse"' not in tab
    token = re.search(r'name="csrf" value="([^"]+)"', tab).group(1)
    done = client.post(f"/topics/{topic}/produce", data={"csrf": token, "key": "a", "value": "hello tab"})
    assert done.status_code == 303
    shown = client.get(done.headers["location"]).text
    assert re.findall(r'data-offset="(\d+)"', shown) == ["0"]
    assert '<tr class="detail" >' in shown and "hello tab" in shown  # the produced record, opened
    refused = client.post(f"/topics/{topic}/produce", data={"csrf": token, "value": "x", "headers": "{"})
    assert refused.status_code == 400 and 'id="produce"' in refused.text and 'id="browse"' not in refused.text


def test_tail_api_returns_what_arrived_since_the_last_position(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin, partitions=2)
    produce(broker.bootstrap, topic, 3)
    page = client.get(f"/topics/{topic}/messages").text
    start = re.search(r'data-from="([^"]*)"', page).group(1)
    assert start == "0:3,1:0"
    quiet = client.get("/api/tail", params={"topic": topic, "from": start}).json()
    assert quiet == {"from": "0:3,1:0", "records": []}
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b'{"live": true}', key=b"<k>", partition=1)
    assert producer.flush(15) == 0
    answer = client.get("/api/tail", params={"topic": topic, "from": start, "vf": "auto"}).json()
    assert answer["from"] == "0:3,1:1"
    [record] = answer["records"]
    assert (record["partition"], record["offset"]) == (1, 0)
    assert record["key"]["text"] == "<k>" and record["value"]["kind"] == "json"
    assert record["value"]["preview"] == '{"live": true}'
    assert client.get("/api/tail", params={"topic": topic, "from": "x:1"}).status_code == 400
    assert client.get("/api/tail", params={"topic": "no-such-topic-here"}).status_code == 404


# -- brokers and topics ------------------------------------------------------------------------------

def test_broker_page_shows_rack_counts_log_dirs_and_configs(broker_factory) -> None:
    racked = broker_factory({"broker.rack": "rack-a", "log.retention.hours": "48"})
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    topic = make_topic(admin, partitions=3)
    produce(racked.bootstrap, topic, 20)
    app = create_app(ConsoleSettings({"bootstrap.servers": racked.bootstrap}, timeout=10))
    with TestClient(app, raise_server_exceptions=False) as client:
        overview = client.get("/").text
        broker_id = int(re.search(r'href="/brokers/(\d+)"', overview).group(1))
        page = client.get(f"/brokers/{broker_id}").text
        cards = text(re.search(r'id="broker-cards">(.*?)\n</div>', page, re.S).group(1))
        assert "Rack rack-a" in cards and f"127.0.0.1:{racked.port}" in cards
        leaders = int(re.search(r'id="leader-count">([\d,]+)<', page).group(1).replace(",", ""))
        assert leaders >= 3 and leaders == int(re.search(r'id="replica-count">([\d,]+)<', page).group(1))
        dirs = text(re.search(r'id="log-dirs">(.*?)</table>', page, re.S).group(1))
        assert str(racked.data_dir) in dirs or "data" in dirs, dirs
        assert "online" in dirs and re.search(r"\d+(\.\d)? (B|KiB)", dirs)
        rack = text(row(page, "config", "broker.rack"))
        assert "rack-a" in rack and "static broker config" in rack
        assert "48 2 d" in text(row(page, "config", "log.retention.hours"))
        assert not row(page, "config", "background.threads")  # a default: only in the full view
        assert row(client.get(f"/brokers/{broker_id}?configs=all").text, "config", "background.threads")
        replicas = text(re.search(r'id="replicas">(.*?)</table>', page, re.S).group(1))
        assert f"{topic} 0 leader in sync" in replicas
        missing = client.get("/brokers/99")
        assert missing.status_code == 404 and "Broker 99 is not in the cluster" in missing.text
        assert client.get("/brokers/x").status_code == 400


def test_topics_list_filters_by_name(client: TestClient, admin) -> None:
    wanted = make_topic(admin)
    other = make_topic(admin)
    listing = client.get("/topics").text
    assert 'data-filter="topics"' in listing and row(listing, "name", wanted) and row(listing, "name", other)
    filtered = client.get("/topics", params={"q": wanted[-8:].upper()}).text
    assert row(filtered, "name", wanted) and not row(filtered, "name", other)
    assert "No topic name contains “zz-none”" in html.unescape(client.get("/topics?q=zz-none").text)


def test_consumer_protocol_groups_are_shown_with_their_protocol(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin, partitions=2)
    group = f"kip848-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "log_level": 0})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        assert 'data-protocol="consumer"' in row(client.get("/groups").text, "group", group)
        detail = client.get(f"/api/group?id={group}").json()
        assert (detail["protocol"], detail["members"]) == ("consumer", 1)
        # One member joined one group: group, target assignment and member epochs are all 1.
        assert (detail["group_epoch"], detail["assignment_epoch"]) == (1, 1)
        assert detail["member_epochs"] == {consumer.memberid(): 1}
        page = client.get(f"/groups/{group}").text
        assert 'id="protocol">consumer<' in page and 'id="epochs">1 / 1<' in page
        assert re.search(r'data-col="epoch">1\b', page), page
    finally:
        consumer.close()
