"""The web console in a real headless Chromium, against a real broker and a real `strom console` process."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import expect

from tests.support.console import first_message

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def new_topic(admin: AdminClient, partitions: int = 1) -> str:
    name = f"ui-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def test_pages_load_and_navigate(page, console_process, broker) -> None:
    response = page.goto(console_process.url + "/")
    assert response is not None and response.status == 200
    expect(page.locator("#brokers tbody tr")).to_have_count(1)
    expect(page.locator("#brokers")).to_contain_text(str(broker.port))
    expect(page.locator("#brokers")).to_contain_text("controller")
    expect(page.locator("#metrics-off")).to_contain_text("Metrics not configured")
    for link, heading in [("Topics", "Topics"), ("Consumer groups", "Consumer groups"), ("ACLs", "ACLs"),
                          ("Users", "SCRAM users"), ("Overview", "Cluster")]:
        page.click(f"header nav >> text={link}")
        expect(page.locator("h1")).to_have_text(heading)
    page.goto(console_process.url + "/acls")
    # A broker without ACL support, or one without an authorizer (SECURITY_DISABLED): a sentence either way.
    expect(page.locator("#unavailable")).to_contain_text(
        re.compile("does not support the DescribeAcls API|security is disabled on this broker"))


def test_create_topic_in_the_ui(page, console_process, admin) -> None:
    name = f"ui-created-{uuid.uuid4().hex[:6]}"
    page.goto(console_process.url + "/topics")
    page.fill("#create-topic input[name=name]", name)
    page.fill("#create-topic input[name=partitions]", "4")
    page.fill("#create-topic textarea[name=configs]", "cleanup.policy=compact")
    page.click("#create-topic button[type=submit]")
    expect(page).to_have_url(re.compile(f"/topics/{name}$"))
    expect(page.locator(".flash.ok")).to_have_text(f"Created topic '{name}'.")
    expect(page.locator("#partitions tbody tr")).to_have_count(4)
    metadata = admin.list_topics(name, timeout=10).topics[name]
    assert len(metadata.partitions) == 4
    row = page.locator('tr[data-config="cleanup.policy"]')
    expect(row.locator("input[name=value]")).to_have_value("compact")
    expect(row).to_contain_text("dynamic topic config")
    row.locator("text=Reset to default").click()
    expect(page.locator(".flash.ok")).to_have_text(f"Config 'cleanup.policy' of '{name}' reset to its default.")
    expect(row).to_have_count(0)  # overrides only, by default
    page.click("#config-view >> text=show all")
    expect(row.locator("input[name=value]")).to_have_value("delete")
    expect(row.locator("text=Reset to default")).to_have_count(0)
    row.locator("input[name=value]").fill("compact,delete")
    row.locator("text=Save").click()
    expect(row.locator("input[name=value]")).to_have_value("compact,delete")


def test_message_from_a_client_shows_in_the_browser(page, console_process, broker, admin) -> None:
    topic = new_topic(admin, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, json.dumps({"order": 42, "items": ["tea"]}).encode(), key=b"customer-9",
                     headers=[("source", b"pytest")], partition=1)
    producer.produce(topic, bytes([0, 159, 255, 10]), key=b"raw", partition=1)
    assert producer.flush(15) == 0
    page.goto(f"{console_process.url}/topics/{topic}/messages")
    offset_field = page.locator("label[data-for-mode=offset]")
    expect(offset_field).to_be_hidden()
    page.select_option("#browse select[name=partition]", "1")
    page.select_option("#browse select[name=mode]", "offset")
    expect(offset_field).to_be_visible()
    page.fill("#browse input[name=offset]", "0")
    page.click("#browse button[type=submit]")
    rows = page.locator("#messages tbody tr.record")
    expect(rows).to_have_count(2)
    first = rows.nth(0)
    expect(first.locator("td.key")).to_have_text("customer-9")
    expect(first.locator("td.value")).to_have_text('{"order": 42, "items": ["tea"]}')  # one line
    detail = page.locator("#messages tr.detail").nth(0)
    expect(detail).to_be_hidden()
    first.click()  # expands in place
    expect(detail).to_be_visible()
    expect(first).to_have_attribute("aria-expanded", "true")
    expect(detail.locator("dd.value pre")).to_have_text('{\n  "order": 42,\n  "items": [\n    "tea"\n  ]\n}')
    expect(detail.locator("dd.headers")).to_contain_text("source: pytest")
    first.click()
    expect(detail).to_be_hidden()
    expect(rows.nth(1).locator("td.value")).to_contain_text("00 9f ff 0a")
    page.select_option("#browse select[name=vf]", "base64")
    page.click("#browse button[type=submit]")
    page.locator("#messages tr.record").nth(1).click()
    expect(page.locator("#messages tr.detail").nth(1).locator("dd.value pre")).to_have_text("AJ//Cg==")


def test_live_tail_adds_new_messages_on_top(page, console_process, broker, admin) -> None:
    topic = new_topic(admin)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"before", partition=0)
    assert producer.flush(15) == 0
    page.goto(f"{console_process.url}/topics/{topic}/messages")
    expect(page.locator("#messages tr.record")).to_have_count(1)
    page.click("#live-toggle")
    expect(page.locator("#live-toggle")).to_have_text("Stop live tail")
    expect(page.locator("#live-status")).to_contain_text("0 new")
    producer.produce(topic, b'{"after": "<b>bold</b>"}', key=b"late", headers=[("h", b"1")], partition=0)
    assert producer.flush(15) == 0
    newest = page.locator("#messages tr.record").first
    expect(newest).to_have_attribute("data-offset", "1", timeout=30000)
    expect(newest.locator("td.value")).to_have_text('{"after": "<b>bold</b>"}')
    expect(page.locator("#messages b")).to_have_count(0)  # shown as text, never as markup
    newest.click()
    expect(page.locator("#messages tr.detail").first.locator("dd.headers")).to_contain_text("h: 1")
    page.click("#live-toggle")
    expect(page.locator("#live-status")).to_have_text("stopped")


def test_produce_in_the_browser_and_read_back(page, console_process, broker, admin) -> None:
    topic = new_topic(admin)
    page.goto(f"{console_process.url}/topics/{topic}/messages")
    page.click("#tab-produce")
    page.fill("#produce input[name=key]", "from-ui")
    page.fill("#produce textarea[name=value]", "hello from the browser")
    page.fill("#produce input[name=headers]", '{"via": "console"}')
    page.click("#produce button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text("Produced a message to partition 0 at offset 0.")
    expect(page.locator("#messages tr.record td.value")).to_have_text("hello from the browser")
    expect(page.locator("#messages tr.detail dd.value pre")).to_have_text("hello from the browser")
    message = first_message(broker.bootstrap, topic, 0, "ui-readback")
    assert message is not None and message.error() is None
    assert (message.key(), message.value(), message.headers()) == (
        b"from-ui", b"hello from the browser", [("via", b"console")])


def test_group_lag_shows_and_updates_as_the_group_consumes(page, console_process, broker, admin) -> None:
    topic = new_topic(admin)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, f"m{i}".encode(), partition=0)
    assert producer.flush(15) == 0
    group = f"ui-group-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        consumed = []
        deadline = time.monotonic() + 30
        while len(consumed) < 10 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                consumed.append(message)
        assert len(consumed) == 10
        consumer.commit(consumed[3], asynchronous=False)  # committed offset 4: lag 6
        page.goto(f"{console_process.url}/groups/{group}")
        expect(page.locator("#total-lag")).to_have_text("6")
        expect(page.locator(f'tr[data-tp="{topic}:0"] [data-col=lag]')).to_have_text("6")
        expect(page.locator("#reset-disabled")).to_contain_text("It is Stable now")
        consumer.commit(consumed[8], asynchronous=False)  # offset 9: the page's polling shows lag 1
        expect(page.locator("#total-lag")).to_have_text("1")
        expect(page.locator(f'tr[data-tp="{topic}:0"] [data-col=committed]')).to_have_text("9")
    finally:
        consumer.close()
    page.goto(f"{console_process.url}/groups")
    expect(page.locator(f'tr[data-group="{group}"] td.lag')).to_have_text("1")


def test_bad_input_shows_a_message_not_a_traceback(page, console_process, admin) -> None:
    topic = new_topic(admin)
    page.goto(f"{console_process.url}/topics/{topic}/messages")
    page.select_option("#browse select[name=mode]", "offset")
    page.fill("#browse input[name=offset]", "abc")
    with page.expect_response(lambda r: "/messages?" in r.url) as answer:
        page.click("#browse button[type=submit]")
    assert answer.value.status == 400
    expect(page.locator("#error")).to_have_text("Offset must be a whole number, not 'abc'.")

    response = page.goto(f"{console_process.url}/topics/no-such-topic-here")
    assert response is not None and response.status == 404
    expect(page.locator("#error")).to_contain_text("does not exist")

    page.goto(console_process.url + "/topics")
    page.fill("#create-topic input[name=name]", "bad/name")
    page.click("#create-topic button[type=submit]")
    expect(page.locator("#error")).to_contain_text("Invalid topic name 'bad/name'")
    for text in ("Traceback", "File \""):
        assert text not in page.content()


def test_html_in_a_value_is_shown_as_text(page, console_process, broker, admin) -> None:
    topic = new_topic(admin)
    payload = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, payload.encode(), key=b"<b>key</b>", headers=[("<i>h</i>", b"<u>v</u>")])
    assert producer.flush(15) == 0
    page.goto(f"{console_process.url}/topics/{topic}/messages")
    expect(page.locator("#messages td.value")).to_have_text(payload)
    page.locator("#messages tr.record").click()
    expect(page.locator("#messages dd.value pre")).to_have_text(payload)
    expect(page.locator("#messages dd.key pre")).to_have_text("<b>key</b>")
    expect(page.locator("#messages dd.headers")).to_contain_text("<i>h</i>: <u>v</u>")
    assert page.evaluate("window.__xss") is None
    assert page.locator("#messages img, #messages b, #messages i, #messages u").count() == 0


def test_delete_topic_after_typing_its_name(page, console_process, admin) -> None:
    topic = new_topic(admin)
    page.goto(f"{console_process.url}/topics/{topic}")
    button = page.locator("#delete-topic button")
    expect(button).to_be_disabled()
    page.fill("#delete-topic input[name=confirm]", topic[:-1])
    expect(button).to_be_disabled()
    page.fill("#delete-topic input[name=confirm]", topic)
    expect(button).to_be_enabled()
    button.click()
    expect(page).to_have_url(re.compile("/topics$"))
    expect(page.locator(".flash.ok")).to_have_text(f"Deleted topic '{topic}'.")
    deadline = time.monotonic() + 10
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in admin.list_topics(timeout=10).topics


def test_topic_filter_box_hides_other_topics_as_you_type(page, console_process, admin) -> None:
    wanted, other = new_topic(admin), new_topic(admin)
    page.goto(console_process.url + "/topics")
    expect(page.locator(f'#topics tr[data-name="{other}"]')).to_be_visible()
    page.fill("#topic-filter input[name=q]", wanted[-6:])
    expect(page.locator(f'#topics tr[data-name="{other}"]')).to_be_hidden()
    expect(page.locator(f'#topics tr[data-name="{wanted}"]')).to_be_visible()
    expect(page.locator("#topics-count")).to_have_text("1 match")
    page.press("#topic-filter input[name=q]", "Enter")  # the same filter, answered by the server
    expect(page).to_have_url(re.compile(r"/topics\?q="))
    expect(page.locator("#topics tbody tr[data-name]")).to_have_count(1)


def test_broker_page_from_the_overview(page, console_process, broker) -> None:
    page.goto(console_process.url + "/")
    page.click("#brokers tbody a")
    expect(page.locator("h1")).to_contain_text("Brokers /")
    expect(page.locator("#log-dirs")).to_contain_text("online")
    expect(page.locator("#config-view")).to_contain_text("show all")
    page.click("#config-view >> text=show all")
    expect(page.locator('#config-table tr[data-config="log.segment.bytes"]')).to_contain_text("GiB")
