"""The console's HTTP routes through Starlette's TestClient, against a real broker process."""

from __future__ import annotations

import html
import re
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from starlette.testclient import TestClient

from strom.console.app import ConsoleSettings, create_app
from strom.console.sessions import COOKIE_NAME
from tests.support.broker import free_port
from tests.support.console import first_message


@pytest.fixture(scope="module")
def client(broker) -> Iterator[TestClient]:
    app = create_app(ConsoleSettings({"bootstrap.servers": broker.bootstrap}, timeout=10, browse_timeout=10))
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def csrf(client: TestClient, page: str = "/topics") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(page).text)
    assert found, "no CSRF token on the page"
    return found.group(1)


def error_text(body: str) -> str:
    found = re.search(r'id="error">(.*?)</div>', body, re.S)
    return html.unescape(found.group(1)) if found else ""


def make_topic(admin: AdminClient, partitions: int = 1) -> str:
    name = f"console-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list | None]],
            partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in records:
        producer.produce(topic, value, key=key, headers=headers, partition=partition)
    assert producer.flush(15) == 0


def test_pages_load_with_security_headers(client: TestClient, broker) -> None:
    for path, text in [("/", "Brokers"), ("/topics", "Create a topic"), ("/groups", "Consumer groups"),
                       ("/login", "Log in"), ("/acls", "ACLs"), ("/users", "SCRAM users")]:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        assert text in response.text
        assert "Traceback" not in response.text
        assert "script-src 'self'" in response.headers["content-security-policy"]
    overview = client.get("/").text
    assert f"<td class=\"num\">{broker.port}</td>" in overview
    assert "Metrics not configured" in overview


def test_acl_and_user_pages_explain_a_broker_without_those_apis(client: TestClient) -> None:
    """This broker has no authorizer: ACLs are unavailable (API missing or SECURITY_DISABLED), said in a sentence."""
    body = client.get("/acls").text
    found = re.search(r'id="unavailable">(.*?)</div>', body, re.S)
    assert found, body
    message = html.unescape(found.group(1))
    assert ("does not support the DescribeAcls API" in message
            or "security is disabled on this broker (no authorizer is configured" in message)
    users = client.get("/users")
    assert users.status_code == 200
    unavailable = re.search(r'id="unavailable">(.*?)</div>', users.text, re.S)
    if unavailable:  # a broker without SCRAM support
        assert "DescribeUserScramCredentials" in html.unescape(unavailable.group(1))
    else:
        assert 'id="users"' in users.text


def test_session_cookie_is_random_and_http_only(client: TestClient) -> None:
    fresh = TestClient(client.app, raise_server_exceptions=False)
    response = fresh.get("/login")
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_create_topic_and_its_errors(client: TestClient, admin: AdminClient) -> None:
    name = f"created-{uuid.uuid4().hex[:8]}"
    token = csrf(client)
    response = client.post("/topics", data={"csrf": token, "name": name, "partitions": "3",
                                            "replication_factor": "1", "configs": "retention.ms=3600000"})
    assert response.status_code == 303 and response.headers["location"] == f"/topics/{name}"
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3
    page = client.get(f"/topics/{name}").text
    assert f"Created topic &#39;{name}&#39;." in page
    assert re.search(r'data-config="retention.ms".*?value="3600000"', page, re.S)

    again = client.post("/topics", data={"csrf": token, "name": name, "partitions": "1"})
    assert again.status_code == 409 and "already exists" in error_text(again.text)
    bad = client.post("/topics", data={"csrf": token, "name": "no spaces please", "partitions": "1"})
    assert bad.status_code == 400 and "Invalid topic name 'no spaces please'" in error_text(bad.text)
    assert 'value="no spaces please"' in bad.text  # the form keeps what was typed
    zero = client.post("/topics", data={"csrf": token, "name": "fine-name", "partitions": "0"})
    assert zero.status_code == 400 and "Partitions must be at least 1" in error_text(zero.text)
    forged = client.post("/topics", data={"csrf": "forged", "name": "forged-topic"})
    assert forged.status_code == 403 and "forged-topic" not in admin.list_topics(timeout=10).topics


def test_unknown_and_invalid_topics(client: TestClient) -> None:
    missing = client.get("/topics/does-not-exist")
    assert missing.status_code == 404 and "does not exist" in error_text(missing.text)
    invalid = client.get("/topics/bad%20name/messages")
    assert invalid.status_code == 400 and "Invalid topic name" in error_text(invalid.text)
    assert client.get("/no/such/page").status_code == 404


def test_message_browser_renders_json_text_html_and_binary(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin)
    produce(broker.bootstrap, topic, [
        (b"k1", b'{"order": 7, "items": ["a"]}', [("source", b"test")]),
        (None, b"<script>alert('x')</script>", None),
        (b"bin", bytes([0, 1, 2, 0xFF]), None),
        (b"tomb", None, None),
    ])
    body = client.get(f"/topics/{topic}/messages?partition=0&mode=offset&offset=0").text
    assert '"order": 7,\n  "items": [' in html.unescape(body)
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in body
    assert "<script>alert" not in body
    assert "00 01 02 ff" in body and 'data-kind="binary"' in body
    assert '<span class="null">null</span>' in body
    assert "source" in body and "4 message(s)" in body

    newest = client.get(f"/topics/{topic}/messages?limit=2").text
    assert re.findall(r'data-offset="(\d+)"', newest) == ["3", "2"]

    found = client.get(f"/topics/{topic}/messages?mode=offset&offset=0&search=ORDER").text
    assert re.findall(r'data-offset="(\d+)"', found) == ["0"]
    assert "matching “ORDER” among 4 read" in html.unescape(found)

    past = client.get(f"/topics/{topic}/messages?mode=offset&offset=99").text
    assert "Offset 99 is past the end of partition 0 (log end offset 4)" in past


def test_search_returns_the_newest_or_the_first_matches(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin)
    produce(broker.bootstrap, topic, [(None, (b"needle %d" if i in (1, 5, 8) else b"hay %d") % i, None)
                                      for i in range(10)])
    newest = client.get(f"/topics/{topic}/messages?search=needle&limit=2").text
    assert re.findall(r'data-offset="(\d+)"', newest) == ["8", "5"]
    assert "among 10 read" in newest
    first = client.get(f"/topics/{topic}/messages?mode=offset&offset=0&search=needle&limit=2").text
    assert re.findall(r'data-offset="(\d+)"', first) == ["1", "5"]
    bounded = client.get(f"/topics/{topic}/messages?search=needle&scan=3").text  # offsets 7, 8, 9 only
    assert re.findall(r'data-offset="(\d+)"', bounded) == ["8"]


def test_newest_across_partitions_is_ordered_by_time(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, ts in [(0, 1_000), (1, 2_000), (2, 3_000), (0, 4_000), (1, 5_000)]:
        producer.produce(topic, f"at {ts}".encode(), partition=partition, timestamp=1_700_000_000_000 + ts)
    assert producer.flush(15) == 0
    body = client.get(f"/topics/{topic}/messages?partition=all&limit=3").text
    rows = re.findall(r'data-offset="(\d+)" data-partition="(\d+)"', body)
    assert rows == [("1", "1"), ("1", "0"), ("0", "2")]  # 5000, 4000, 3000


def test_message_browser_by_timestamp(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, ts in enumerate([1_700_000_000_000, 1_700_000_100_000, 1_700_000_200_000]):
        producer.produce(topic, f"v{i}".encode(), timestamp=ts, partition=0)
    producer.flush(15)
    body = client.get(f"/topics/{topic}/messages?mode=timestamp&timestamp=1700000050000").text
    assert re.findall(r'data-offset="(\d+)"', body) == ["1", "2"]
    iso = client.get(f"/topics/{topic}/messages?mode=timestamp&timestamp=2023-11-14T22:16:40Z").text
    assert re.findall(r'data-offset="(\d+)"', iso) == ["2"]  # 1700000200000 ms


@pytest.mark.parametrize(("query", "status", "message"), [
    ("mode=offset&offset=abc", 400, "Offset must be a whole number, not 'abc'."),
    ("mode=offset&offset=-5", 400, "Offset must be at least 0"),
    ("mode=offset", 400, "Offset is required."),
    ("mode=timestamp&timestamp=soon", 400, "neither milliseconds since the epoch nor a date-time"),
    ("partition=7", 404, "has no partition 7"),
    ("partition=x", 400, "Partition must be a whole number"),
    ("limit=100000", 400, "Number of messages must be at most 500"),
    ("mode=sideways", 400, "Start must be one of newest, offset, timestamp"),
])
def test_message_browser_bad_input(client: TestClient, admin, query: str, status: int, message: str) -> None:
    topic = make_topic(admin)
    response = client.get(f"/topics/{topic}/messages?{query}")
    assert response.status_code == status
    assert message in error_text(response.text)
    assert 'id="browse"' in response.text  # the form stays, with the message above it


def test_produce_from_the_console_and_read_back(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin, partitions=2)
    token = csrf(client, f"/topics/{topic}/messages?tab=produce")
    response = client.post(f"/topics/{topic}/produce", data={
        "csrf": token, "partition": "1", "key": "user-1", "value": '{"hello": "world"}',
        "headers": '{"source": "console", "empty": null}'})
    assert response.status_code == 303, error_text(response.text)
    message = first_message(broker.bootstrap, topic, 1, "route-check")
    assert message is not None and message.error() is None
    assert (message.key(), message.value()) == (b"user-1", b'{"hello": "world"}')
    assert message.headers() == [("source", b"console"), ("empty", None)]

    bad_headers = client.post(f"/topics/{topic}/produce", data={"csrf": token, "value": "x", "headers": "{oops"})
    assert bad_headers.status_code == 400 and "Headers are not valid JSON" in error_text(bad_headers.text)
    bad_partition = client.post(f"/topics/{topic}/produce", data={"csrf": token, "value": "x", "partition": "9"})
    assert bad_partition.status_code == 400 and "has no partition 9" in error_text(bad_partition.text)
    unknown = client.post("/topics/never-created/produce", data={"csrf": token, "value": "x"})
    assert unknown.status_code == 404
    assert "never-created" not in admin.list_topics(timeout=10).topics  # not auto-created by the console


def test_edit_and_reset_topic_config(client: TestClient, admin) -> None:
    topic = make_topic(admin)
    token = csrf(client)
    resource = ConfigResource(ResourceType.TOPIC, topic)

    def retention() -> tuple[str, bool]:
        entry = admin.describe_configs([resource])[resource].result()["retention.ms"]
        return entry.value, entry.is_default

    done = client.post(f"/topics/{topic}/configs", data={"csrf": token, "key": "retention.ms", "value": "123456"})
    assert done.status_code == 303
    assert retention() == ("123456", False)
    page = client.get(f"/topics/{topic}").text
    row = re.search(r'data-config="retention.ms">(.*?)</tr>', page, re.S).group(1)
    assert 'value="123456"' in row and "dynamic topic config" in row and "Reset to default" in row
    bad = client.post(f"/topics/{topic}/configs", data={"csrf": token, "key": "retention.ms", "value": "soon"})
    assert bad.status_code == 400 and "Invalid config" in error_text(bad.text)
    reset = client.post(f"/topics/{topic}/configs", data={"csrf": token, "key": "retention.ms", "op": "delete"})
    assert reset.status_code == 303
    assert retention()[1] is True


def test_delete_topic_needs_its_name_typed(client: TestClient, admin) -> None:
    topic = make_topic(admin)
    token = csrf(client)
    refused = client.post(f"/topics/{topic}/delete", data={"csrf": token, "confirm": "something-else"})
    assert refused.status_code == 400 and "to confirm its deletion" in error_text(refused.text)
    assert topic in admin.list_topics(timeout=10).topics
    deleted = client.post(f"/topics/{topic}/delete", data={"csrf": token, "confirm": topic})
    assert deleted.status_code == 303 and deleted.headers["location"] == "/topics"
    deadline = time.monotonic() + 10
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in admin.list_topics(timeout=10).topics


def test_group_lag_and_reset_only_when_empty(client: TestClient, broker, admin) -> None:
    topic = make_topic(admin)
    produce(broker.bootstrap, topic, [(None, f"m{i}".encode(), None) for i in range(10)])
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 4 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen += 1
            if seen == 4:
                consumer.commit(message, asynchronous=False)
    assert seen == 4
    try:
        lag = client.get(f"/api/group?id={group}").json()
        assert lag["state"] == "Stable" and lag["members"] == 1
        assert lag["partitions"] == [{"topic": topic, "partition": 0, "committed": 4, "end_offset": 10, "lag": 6,
                                      "client_id": "rdkafka"}]
        assert lag["total_lag"] == 6
        token = csrf(client)
        refused = client.post(f"/groups/{group}/reset", data={"csrf": token, "target": "earliest"})
        assert refused.status_code == 409 and "state is Stable" in error_text(refused.text)
    finally:
        consumer.close()
    listed = client.get("/groups").text
    assert f'data-group="{group}"' in listed
    assert 'data-group="strom-console' not in listed  # browsing messages never creates a group
    page = client.get(f"/groups/{group}").text
    assert 'id="reset"' in page
    bad = client.post(f"/groups/{group}/reset", data={"csrf": token, "target": "offset", "offset": "abc"})
    assert bad.status_code == 400 and "Offset must be a whole number" in error_text(bad.text)
    done = client.post(f"/groups/{group}/reset", data={"csrf": token, "target": "offset", "offset": "8",
                                                       "topic": topic})
    assert done.status_code == 303, error_text(done.text)
    after = client.get(f"/api/group?id={group}").json()
    assert after["state"] == "Empty" and after["partitions"][0]["committed"] == 8 and after["total_lag"] == 2
    client.post(f"/groups/{group}/reset", data={"csrf": token, "target": "earliest"})
    assert client.get(f"/api/group?id={group}").json()["total_lag"] == 10
    assert client.get("/groups/no-such-group").status_code == 404


def test_login_failure_is_a_message_and_never_stores_the_password_in_the_cookie(client: TestClient) -> None:
    fresh = TestClient(client.app, raise_server_exceptions=False, follow_redirects=False)
    token = csrf(fresh, "/login")
    response = fresh.post("/login", data={"csrf": token, "username": "alice", "password": "pa55word",
                                          "mechanism": "SCRAM-SHA-256", "security_protocol": "SASL_PLAINTEXT"})
    assert response.status_code == 401
    assert error_text(response.text).startswith("Login failed")
    assert "pa55word" not in response.text
    assert all("pa55word" not in value for value in fresh.cookies.values())
    bad_mechanism = fresh.post("/login", data={"csrf": token, "username": "alice", "mechanism": "GSSAPI"})
    assert bad_mechanism.status_code == 400 and "Mechanism must be one of" in error_text(bad_mechanism.text)


def test_throughput_api_reports_unreachable_metrics(broker) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    app = create_app(ConsoleSettings({"bootstrap.servers": broker.bootstrap}, metrics_url=url))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        data = test_client.get("/api/throughput").json()
        assert data["configured"] is True and data["points"] == []
        assert data["error"].startswith(f"cannot read {url}")
        assert "Metrics not configured" not in test_client.get("/").text


def test_unreachable_broker_is_a_readable_error() -> None:
    app = create_app(ConsoleSettings({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, timeout=2))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        response = test_client.get("/topics")
        assert response.status_code in (502, 504)
        assert "Could not list topics" in error_text(response.text)
        assert "Traceback" not in response.text
        api = test_client.get("/api/group?id=x")
        assert api.status_code in (502, 504) and "error" in api.json()


def test_an_unexpected_failure_is_a_sentence_not_a_traceback(broker) -> None:
    app = create_app(ConsoleSettings({"bootstrap.servers": broker.bootstrap}))

    def broken() -> None:
        raise ZeroDivisionError("a bug in the console")

    app.state.console.gateway.topics = broken  # a fault inside the console, not the broker
    with TestClient(app, raise_server_exceptions=False) as test_client:
        page = test_client.get("/topics")
        assert page.status_code == 500
        assert error_text(page.text) == "Unexpected error (ZeroDivisionError); details are in the console's log."
        assert "Traceback" not in page.text and "a bug in the console" not in page.text
        assert test_client.get("/api/throughput").status_code == 200
