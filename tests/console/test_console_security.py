"""The console against a broker that requires SASL and has an authorizer: login, per-session identity,
ACL and SCRAM user pages. Runs where the broker has SASL/SCRAM and ACL support (strom.security)."""

from __future__ import annotations

import importlib.util
import re
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from playwright.sync_api import expect
from starlette.testclient import TestClient

from strom.console.app import ConsoleSettings, create_app
from tests.support.broker import BrokerProcess
from tests.support.console import ConsoleProcess
from tests.support.security import start_acl_sasl_broker

if importlib.util.find_spec("strom.security.authorizer") is None or importlib.util.find_spec(
        "strom.security.scram") is None:
    pytest.skip("this build of the broker has no SASL/SCRAM or ACL support", allow_module_level=True)

pytestmark = pytest.mark.slow

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def sasl(user: str, password: str, mechanism: str = "PLAIN") -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Only a SASL listener; admin is a super user, everyone else needs ACLs."""
    b = start_acl_sasl_broker(tmp_path_factory.mktemp("console-sasl"), JAAS, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **sasl("admin", "admin-secret")})


@pytest.fixture(scope="module")
def console_process(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    process = ConsoleProcess(broker.bootstrap, tmp_path_factory.mktemp("console"), "--timeout", "3")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def log_in(page, console: ConsoleProcess, user: str, password: str, mechanism: str = "PLAIN") -> None:
    page.goto(console.url + "/login")
    page.fill("#login input[name=username]", user)
    page.fill("#login input[name=password]", password)
    page.select_option("#login select[name=mechanism]", mechanism)
    page.select_option("#login select[name=security_protocol]", "SASL_PLAINTEXT")
    page.click("#login button[type=submit]")


def test_without_login_the_page_says_to_log_in(page, console_process) -> None:
    response = page.goto(console_process.url + "/topics")
    assert response is not None and response.status in (401, 502, 504)
    expect(page.locator("#error")).to_contain_text("If the broker requires SASL, log in")


def test_login_as_admin_manages_acls(page, console_process, admin) -> None:
    log_in(page, console_process, "admin", "admin-secret")
    expect(page.locator(".flash.ok")).to_have_text("Logged in as admin.")
    expect(page.locator("header .user")).to_have_text("admin")
    expect(page.locator("#brokers tbody tr")).to_have_count(1)
    cookie = next(c for c in page.context.cookies() if c["name"] == "strom_console")
    assert "admin-secret" not in cookie["value"] and cookie["httpOnly"]

    topic = f"acl-{uuid.uuid4().hex[:6]}"
    page.goto(console_process.url + "/acls")
    page.fill("#add-acl input[name=principal]", "User:alice")
    page.select_option("#add-acl select[name=operation]", "READ")
    page.select_option("#add-acl select[name=resource_type]", "TOPIC")
    page.fill("#add-acl input[name=resource_name]", topic)
    page.click("#add-acl button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text("Added ACL: ALLOW User:alice READ on TOPIC")
    row = page.locator("#acls tbody tr", has_text=topic)
    expect(row).to_contain_text("User:alice")
    query = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    bindings = admin.describe_acls(query, request_timeout=10).result()
    assert [(b.principal, b.operation, b.permission_type) for b in bindings] == [
        ("User:alice", AclOperation.READ, AclPermissionType.ALLOW)]
    row.locator("button").click()
    expect(page.locator(".flash.ok")).to_have_text("Deleted 1 ACL(s).")
    expect(page.locator("#acls tbody tr", has_text=topic)).to_have_count(0)
    assert admin.describe_acls(query, request_timeout=10).result() == []

    page.fill("#add-acl input[name=principal]", "alice")
    page.click("#add-acl button[type=submit]")
    expect(page.locator("#error")).to_have_text("The principal must look like User:alice.")


def test_scram_user_created_in_the_ui_can_log_in(page, chromium, console_process, admin) -> None:
    user = f"carol{uuid.uuid4().hex[:4]}"
    log_in(page, console_process, "admin", "admin-secret")
    page.goto(console_process.url + "/users")
    page.fill("#add-user input[name=user]", user)
    page.fill("#add-user input[name=password]", "carol-secret")
    page.select_option("#add-user select[name=mechanism]", "SCRAM-SHA-256")
    page.click("#add-user button[type=submit]")
    expect(page.locator(".flash.ok")).to_have_text(f"Saved the SCRAM-SHA-256 credential of '{user}'.")
    expect(page.locator("#users tbody tr", has_text=user)).to_contain_text("SCRAM-SHA-256")
    described = admin.describe_user_scram_credentials([user], request_timeout=10)[user].result()
    assert [(i.mechanism.name, i.iterations) for i in described.scram_credential_infos] == [("SCRAM_SHA_256", 8192)]

    other = chromium.new_context()
    try:
        tab = other.new_page()
        tab.set_default_timeout(20000)
        log_in(tab, console_process, user, "wrong-password", "SCRAM-SHA-256")
        expect(tab.locator("#error")).to_contain_text("Login failed")
        log_in(tab, console_process, user, "carol-secret", "SCRAM-SHA-256")
        expect(tab.locator(".flash.ok")).to_have_text(f"Logged in as {user}.")
        # carol has no ACLs: creating a topic is refused with a readable message, not a traceback
        tab.goto(console_process.url + "/topics")
        tab.fill("#create-topic input[name=name]", f"carol-{uuid.uuid4().hex[:4]}")
        tab.click("#create-topic button[type=submit]")
        expect(tab.locator("#error")).to_contain_text("not allowed for this user")
        tab.click("header .who button")  # log out
        expect(tab.locator(".flash.ok")).to_have_text("Logged out.")
        expect(tab.locator("header .who")).to_contain_text("Log in")
    finally:
        other.close()

    page.locator("#users tbody tr", has_text=user).locator("button").click()
    expect(page.locator(".flash.ok")).to_have_text(f"Deleted the SCRAM-SHA-256 credential of '{user}'.")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and admin.describe_user_scram_credentials(request_timeout=10).result().get(user):
        time.sleep(0.2)
    assert user not in admin.describe_user_scram_credentials(request_timeout=10).result()


def test_preconfigured_credentials_from_command_config(broker) -> None:
    config = {"bootstrap.servers": broker.bootstrap, **sasl("admin", "admin-secret")}
    with TestClient(create_app(ConsoleSettings(config, timeout=5)), raise_server_exceptions=False) as client:
        page = client.get("/")
        assert page.status_code == 200 and re.search(r'<span class="user">admin</span>', page.text)
        assert client.get("/acls").status_code == 200 and 'id="acls"' in client.get("/acls").text
