"""The console's web application: Starlette routes rendering Jinja2 pages and a few JSON endpoints.

Each request finds its browser session (cookie = random id), takes that session's Kafka
gateway (a SASL login) or the shared one, and runs the Kafka calls in a worker thread
with a deadline. Errors become a page (or JSON under /api/) with a readable message and a
4xx/5xx status; a traceback never reaches the browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from strom.console import inputs
from strom.console.errors import ConsoleError, bad_request
from strom.console.formatting import (
    DISPLAY_FORMATS,
    RenderedBytes,
    config_source_label,
    config_unit,
    format_timestamp,
    human_bytes,
    human_config_value,
)
from strom.console.kafka_client import (
    ACL_OPERATIONS,
    ACL_PATTERN_TYPES,
    ACL_PERMISSIONS,
    ACL_RESOURCE_TYPES,
    RESET_TARGETS,
    SCRAM_MECHANISMS,
    AclView,
    BrowseQuery,
    FeatureUnavailable,
    KafkaGateway,
)
from strom.console.metrics import ThroughputTracker
from strom.console.sessions import (
    COOKIE_NAME,
    SASL_MECHANISMS,
    SASL_PROTOCOLS,
    ConsoleSession,
    Credentials,
    SessionStore,
)

log = logging.getLogger("strom.console")
T = TypeVar("T")

_SECURITY_HEADERS = {
    # Scripts and styles only from our own /static: an injected <script> would not run even if escaping failed.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


@dataclass
class ConsoleSettings:
    """What `strom console` was started with."""

    client_config: dict[str, Any]  # librdkafka settings: bootstrap.servers plus --command-config
    metrics_url: str | None = None
    timeout: float = 10.0
    browse_timeout: float = 10.0
    workers: int = 8
    # Host header names accepted (None: any). A console on loopback refuses other names, so a web page
    # that re-points its own domain at 127.0.0.1 (DNS rebinding) cannot read or drive it.
    allowed_hosts: tuple[str, ...] | None = None

    @property
    def bootstrap(self) -> str:
        return str(self.client_config.get("bootstrap.servers", ""))

    @property
    def preconfigured_user(self) -> str | None:
        return self.client_config.get("sasl.username") or None


class Console:
    """Application state shared by the routes: sessions, gateways, the metrics tracker, the thread pool."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.sessions = SessionStore()
        self.gateway = self.new_gateway({})
        self.tracker = ThroughputTracker(settings.metrics_url)
        self.tracker_lock = asyncio.Lock()
        self.executor = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="console-kafka")

    def new_gateway(self, extra: dict[str, Any]) -> KafkaGateway:
        return KafkaGateway({**self.settings.client_config, **extra}, self.settings.timeout,
                            self.settings.browse_timeout)

    def gateway_for(self, session: ConsoleSession) -> KafkaGateway:
        return session.gateway if session.gateway is not None else self.gateway

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking Kafka work in the pool, with a deadline so a page never hangs."""
        loop = asyncio.get_running_loop()
        limit = self.settings.timeout * 3 + self.settings.browse_timeout + 5
        try:
            return await asyncio.wait_for(loop.run_in_executor(self.executor, functools.partial(fn, *args)), limit)
        except TimeoutError:
            raise ConsoleError(f"The broker did not answer within {limit:g} s.", 504) from None

    def close(self) -> None:
        self.sessions.close()
        self.gateway.close()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.PackageLoader("strom.console", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["bytes"] = human_bytes
    env.filters["ts"] = format_timestamp
    env.filters["urlpart"] = lambda value: quote(str(value), safe="")
    env.filters["number"] = lambda value: "–" if value is None else f"{value:,}"
    env.globals["human_config"] = human_config_value
    env.globals["config_unit"] = config_unit
    env.filters["source_label"] = config_source_label
    return Jinja2Templates(env=env)


TEMPLATES = _templates()


def console(request: Request) -> Console:
    return request.app.state.console


def session_of(request: Request) -> ConsoleSession:
    return request.state.session


def gateway(request: Request) -> KafkaGateway:
    return console(request).gateway_for(session_of(request))


def render(request: Request, template: str, context: dict[str, Any] | None = None, status: int = 200,
           error: str | None = None) -> Response:
    session = session_of(request)
    settings = console(request).settings
    base = {
        "csrf": session.csrf,
        "flashes": session.take_flashes(),
        "error": error,
        "bootstrap": settings.bootstrap,
        "user": session.credentials.username if session.credentials else settings.preconfigured_user,
        "logged_in": session.credentials is not None,
        "path": request.url.path,
    }
    return TEMPLATES.TemplateResponse(request, template, {**base, **(context or {})}, status_code=status)


async def checked_form(request: Request) -> FormData:
    """The POSTed form, after checking its CSRF token against the session's."""
    form = await request.form()
    token = form.get("csrf")
    if not session_of(request).csrf_ok(token if isinstance(token, str) else None):
        raise ConsoleError("This form has expired or came from another site; reload the page and try again.",
                           403, "Forbidden")
    return form


def form_value(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def topic_url(name: str, suffix: str = "") -> str:
    return f"/topics/{quote(name, safe='')}{suffix}"


def group_url(group_id: str) -> str:
    return f"/groups/{quote(group_id, safe='')}"


# -- overview ------------------------------------------------------------------------------------

async def overview(request: Request) -> Response:
    app = console(request)
    cluster = await app.call(gateway(request).cluster)
    topics = await app.call(gateway(request).topics)
    partitions = [p for t in topics for p in t.partitions]
    leaders = {b.id: sum(1 for p in partitions if p.leader == b.id) for b in cluster.brokers}
    replicas = {b.id: sum(1 for p in partitions if b.id in p.replicas) for b in cluster.brokers}
    unhealthy = [t for t in topics if t.under_replicated or t.offline]
    return render(request, "overview.html", {
        "cluster": cluster, "topic_count": len([t for t in topics if not t.internal]),
        "partition_count": len(partitions), "leaders": leaders, "replicas": replicas, "unhealthy": unhealthy,
        "under_replicated": sum(t.under_replicated for t in topics),
        "offline": sum(t.offline for t in topics),
        "total_size": sum(t.size or 0 for t in topics),
        "metrics_url": app.settings.metrics_url,
    })


async def throughput_api(request: Request) -> Response:
    app = console(request)
    tracker = app.tracker
    if tracker.configured:
        async with app.tracker_lock:
            if tracker.due():
                await asyncio.get_running_loop().run_in_executor(app.executor, tracker.sample)
    return JSONResponse(tracker.as_json())


# -- brokers -------------------------------------------------------------------------------------

async def broker_page(request: Request) -> Response:
    """One broker: rack, leader and replica counts, log directories and sizes, its configs (overrides unless
    ?configs=all) and the replicas it holds."""
    broker_id = inputs.integer(request.path_params["broker_id"], "Broker id", minimum=0)
    detail = await console(request).call(gateway(request).broker, broker_id)
    all_configs = request.query_params.get("configs") == "all"
    configs = [c for c in detail.configs if all_configs or not c.is_default]
    return render(request, "broker.html", {"detail": detail, "b": detail.broker, "configs": configs,
                                           "all_configs": all_configs, "config_count": len(detail.configs),
                                           "replica_limit": 1000})


# -- topics --------------------------------------------------------------------------------------

async def topics_page(request: Request, status: int = 200, error: str | None = None,
                      form: dict[str, str] | None = None) -> Response:
    show_internal = request.query_params.get("internal") == "1"
    search = (request.query_params.get("q") or "").strip()
    topics = await console(request).call(gateway(request).topics)
    listed = [t for t in topics if show_internal or not t.internal]
    shown = [t for t in listed if search.lower() in t.name.lower()]
    return render(request, "topics.html", {"topics": shown, "show_internal": show_internal, "search": search,
                                           "hidden": len(topics) - len(listed), "form": form or {}},
                  status=status, error=error)


async def create_topic(request: Request) -> Response:
    form = await checked_form(request)
    values = {k: form_value(form, k) for k in ("name", "partitions", "replication_factor", "configs")}
    try:
        name = inputs.topic_name(values["name"])
        partitions = inputs.integer(values["partitions"], "Partitions", minimum=1, maximum=100000, default=-1)
        replication = inputs.integer(values["replication_factor"], "Replication factor", minimum=1,
                                     maximum=32767, default=-1)
        configs = inputs.config_lines(values["configs"])
        await console(request).call(gateway(request).create_topic, name, partitions, replication, configs)
    except ConsoleError as exc:
        return await topics_page(request, exc.status, exc.message, values)
    session_of(request).flash(f"Created topic '{name}'.")
    return redirect(topic_url(name))


async def topic_page(request: Request, status: int = 200, error: str | None = None) -> Response:
    """A topic's partitions and configs; configs show only what differs from the defaults unless ?configs=all."""
    name = inputs.topic_name(request.path_params["name"])
    gw = gateway(request)
    topic = await console(request).call(gw.topic, name)
    configs = await console(request).call(gw.topic_configs, name)
    all_configs = request.query_params.get("configs") == "all"
    shown = [c for c in configs if all_configs or not c.is_default]
    return render(request, "topic.html", {"topic": topic, "configs": shown, "all_configs": all_configs,
                                          "config_count": len(configs), "topic_url": topic_url(name)},
                  status=status, error=error)


async def delete_topic(request: Request) -> Response:
    name = inputs.topic_name(request.path_params["name"])
    form = await checked_form(request)
    if form_value(form, "confirm").strip() != name:
        return await topic_page(request, 400, f"Type the topic name '{name}' to confirm its deletion.")
    await console(request).call(gateway(request).delete_topic, name)
    session_of(request).flash(f"Deleted topic '{name}'.")
    return redirect("/topics")


async def alter_topic_config(request: Request) -> Response:
    name = inputs.topic_name(request.path_params["name"])
    form = await checked_form(request)
    try:
        key = inputs.config_key(form_value(form, "key"))
        op = inputs.choice(form_value(form, "op"), "Operation", ("set", "delete"), "set")
        value = form_value(form, "value").strip() if op == "set" else None
        await console(request).call(gateway(request).alter_topic_config, name, key, value)
    except ConsoleError as exc:
        return await topic_page(request, exc.status, exc.message)
    session_of(request).flash(f"Config '{key}' of '{name}' set to '{value}'." if value is not None
                              else f"Config '{key}' of '{name}' reset to its default.")
    view = "?configs=all" if form_value(form, "view") == "all" else ""
    return redirect(topic_url(name) + view + "#configs")


# -- messages ------------------------------------------------------------------------------------

def browse_query(params: Any) -> BrowseQuery:
    """The message browser's query string, validated."""
    raw_partition = (params.get("partition") or "").strip()
    partition = None if raw_partition in ("", "all") else inputs.integer(raw_partition, "Partition", minimum=0)
    mode = inputs.choice(params.get("mode"), "Start", ("newest", "offset", "timestamp"), "newest")
    query = BrowseQuery(partition=partition, mode=mode,
                        limit=inputs.integer(params.get("limit"), "Number of messages", minimum=1, maximum=500,
                                             default=50),
                        search=(params.get("search") or "").strip(),
                        scan=inputs.integer(params.get("scan"), "Records to scan", minimum=1, maximum=100000,
                                            default=5000))
    for attribute, name, label in (("key_format", "kf", "Key format"), ("value_format", "vf", "Value format"),
                                   ("header_format", "hf", "Header format")):
        setattr(query, attribute, inputs.choice(params.get(name), label, DISPLAY_FORMATS, "auto"))
    if mode == "offset":
        query.offset = inputs.integer(params.get("offset"), "Offset", minimum=0)
    elif mode == "timestamp":
        query.timestamp = inputs.timestamp_ms(params.get("timestamp"))
    return query


async def messages_page(request: Request, status: int = 200, error: str | None = None,
                        produce_form: dict[str, str] | None = None) -> Response:
    name = inputs.topic_name(request.path_params["name"])
    app = console(request)
    params = request.query_params
    tab = "produce" if produce_form is not None or params.get("tab") == "produce" else "browse"
    partitions = await app.call(gateway(request).partition_ids, name)
    result = None
    if error is None and tab == "browse":
        try:
            query = browse_query(params)
            result = await app.call(gateway(request).browse, name, query)
        except ConsoleError as exc:
            status, error = exc.status, exc.message
    query_string = {k: v for k, v in params.items() if k not in ("expand", "tab")}
    context = {"topic": name, "partitions": partitions, "result": result, "params": dict(params),
               "topic_url": topic_url(name), "produce": produce_form or {}, "tab": tab,
               "formats": DISPLAY_FORMATS, "expand": params.get("expand") == "1",
               "expand_url": topic_url(name, "/messages?" + urlencode({**query_string, "expand": "1"})),
               "tail_url": "/api/tail?" + urlencode({**query_string, "topic": name})}
    return render(request, "messages.html", context, status=status, error=error)


def _rendered_json(shown: RenderedBytes) -> dict[str, Any]:
    return {"kind": shown.kind, "text": shown.text, "preview": shown.preview, "size": shown.size,
            "truncated": shown.truncated, "note": shown.note}


async def tail_api(request: Request) -> Response:
    """New records since the positions the page last saw (?from=partition:offset,...), for the live tail."""
    params = request.query_params
    name = inputs.topic_name(params.get("topic"))
    query = browse_query(params)
    query.limit = min(query.limit, 100)
    positions: dict[int, int] = {}
    for item in (params.get("from") or "").split(","):
        if item.strip():
            partition, _, offset = item.partition(":")
            positions[inputs.integer(partition, "Partition", minimum=0)] = inputs.integer(offset, "Offset",
                                                                                           minimum=0)
    records, following = await console(request).call(gateway(request).tail, name, positions, query)
    return JSONResponse({
        "from": ",".join(f"{p}:{o}" for p, o in sorted(following.items())),
        "records": [{"partition": r.partition, "offset": r.offset, "timestamp": format_timestamp(r.timestamp),
                     "timestamp_type": r.timestamp_type, "key": _rendered_json(r.key),
                     "value": _rendered_json(r.value),
                     "headers": [[header, _rendered_json(v)] for header, v in r.headers]} for r in records],
    })


async def produce_message(request: Request) -> Response:
    name = inputs.topic_name(request.path_params["name"])
    form = await checked_form(request)
    values = {k: form_value(form, k) for k in ("partition", "key", "value", "headers", "null_value")}
    try:
        raw_partition = values["partition"].strip()
        partition = None if raw_partition in ("", "any") else inputs.integer(raw_partition, "Partition", minimum=0)
        headers = inputs.headers(values["headers"])
        key = values["key"].encode("utf-8") if values["key"] else None
        value = None if values["null_value"] else values["value"].encode("utf-8")
        where = await console(request).call(gateway(request).produce, name, partition, key, value, headers)
    except ConsoleError as exc:
        return await messages_page(request, exc.status, exc.message, values)
    session_of(request).flash(f"Produced a message to partition {where[0]} at offset {where[1]}.")
    return redirect(topic_url(name, "/messages?" + urlencode({"partition": where[0], "mode": "offset",
                                                              "offset": where[1], "limit": "1", "expand": "1"})))


# -- consumer groups -----------------------------------------------------------------------------

async def groups_page(request: Request) -> Response:
    """Consumer groups; the Spark sink's marker groups are hidden unless asked for (?spark=1), as internal
    topics are: they are bookkeeping, always Empty, and their "lag" would mean nothing."""
    show_markers = request.query_params.get("spark") == "1"
    groups = await console(request).call(gateway(request).groups)
    shown = [g for g in groups if show_markers or not g.spark_marker]
    return render(request, "groups.html", {"groups": shown, "show_markers": show_markers,
                                           "hidden": len(groups) - len(shown)})


async def group_page(request: Request, status: int = 200, error: str | None = None) -> Response:
    group_id = request.path_params["group_id"]
    group = await console(request).call(gateway(request).group, group_id)
    return render(request, "group.html", {"group": group, "targets": RESET_TARGETS,
                                          "api_url": "/api/group?" + urlencode({"id": group_id})},
                  status=status, error=error)


async def group_api(request: Request) -> Response:
    group_id = request.query_params.get("id") or ""
    if not group_id:
        raise bad_request("Name a group with ?id=")
    group = await console(request).call(gateway(request).group, group_id)
    return JSONResponse({
        "group": group.group_id, "state": group.state, "protocol": group.protocol, "members": len(group.members),
        "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
        "member_epochs": {m.member_id: m.epoch for m in group.members if m.epoch is not None},
        "total_lag": group.total_lag,
        "spark_marker_batch": group.spark_marker_batch,
        "partitions": [{"topic": r.topic, "partition": r.partition, "committed": r.committed,
                        "end_offset": r.end_offset, "lag": r.lag, "client_id": r.client_id} for r in group.lag],
    })


async def reset_offsets(request: Request) -> Response:
    group_id = request.path_params["group_id"]
    form = await checked_form(request)
    try:
        target = inputs.choice(form_value(form, "target"), "Reset to", RESET_TARGETS)
        topic = inputs.topic_name(form_value(form, "topic")) if form_value(form, "topic").strip() else None
        value = None
        if target == "offset":
            value = inputs.integer(form_value(form, "offset"), "Offset", minimum=0)
        elif target == "timestamp":
            value = inputs.timestamp_ms(form_value(form, "timestamp"))
        plan = await console(request).call(gateway(request).reset_group_offsets, group_id, topic, target, value)
    except ConsoleError as exc:
        return await group_page(request, exc.status, exc.message)
    moved = ", ".join(f"{t}-{p} → {o}" for (t, p), o in sorted(plan.items()))
    session_of(request).flash(f"Reset the offsets of group '{group_id}': {moved}.")
    return redirect(group_url(group_id))


# -- security ------------------------------------------------------------------------------------

def _acl_from(form: FormData) -> AclView:
    principal = form_value(form, "principal").strip()
    if ":" not in principal or not principal.split(":", 1)[1]:
        raise bad_request("The principal must look like User:alice.")
    resource_type = inputs.choice(form_value(form, "resource_type"), "Resource type", ACL_RESOURCE_TYPES)
    resource_name = form_value(form, "resource_name").strip() or ("kafka-cluster" if resource_type == "BROKER" else "")
    if not resource_name:
        raise bad_request("A resource name is required (use * for every resource of that type).")
    return AclView(principal, form_value(form, "host").strip() or "*",
                   inputs.choice(form_value(form, "operation"), "Operation", ACL_OPERATIONS),
                   inputs.choice(form_value(form, "permission"), "Permission", ACL_PERMISSIONS, "ALLOW"),
                   resource_type, resource_name,
                   inputs.choice(form_value(form, "pattern_type"), "Pattern type", ACL_PATTERN_TYPES, "LITERAL"))


async def acls_page(request: Request, status: int = 200, error: str | None = None) -> Response:
    unavailable, acls = None, []
    try:
        acls = await console(request).call(gateway(request).acls)
    except FeatureUnavailable as exc:
        unavailable = exc.message
    return render(request, "acls.html", {
        "acls": acls, "unavailable": unavailable, "operations": ACL_OPERATIONS, "permissions": ACL_PERMISSIONS,
        "resource_types": ACL_RESOURCE_TYPES, "pattern_types": ACL_PATTERN_TYPES}, status=status, error=error)


async def change_acl(request: Request) -> Response:
    form = await checked_form(request)
    try:
        acl = _acl_from(form)
        if request.url.path.endswith("/delete"):
            count = await console(request).call(gateway(request).delete_acl, acl)
            session_of(request).flash(f"Deleted {count} ACL(s).")
        else:
            await console(request).call(gateway(request).create_acl, acl)
            session_of(request).flash(f"Added ACL: {acl.permission} {acl.principal} {acl.operation} on "
                                      f"{acl.resource_type} {acl.resource_name}.")
    except ConsoleError as exc:
        return await acls_page(request, exc.status, exc.message)
    return redirect("/acls")


async def users_page(request: Request, status: int = 200, error: str | None = None) -> Response:
    unavailable, users = None, []
    try:
        users = await console(request).call(gateway(request).scram_users)
    except FeatureUnavailable as exc:
        unavailable = exc.message
    return render(request, "users.html", {"users": users, "unavailable": unavailable,
                                          "mechanisms": SCRAM_MECHANISMS}, status=status, error=error)


async def change_user(request: Request) -> Response:
    form = await checked_form(request)
    try:
        user = form_value(form, "user").strip()
        if not user:
            raise bad_request("A user name is required.")
        mechanism = inputs.choice(form_value(form, "mechanism"), "Mechanism", SCRAM_MECHANISMS)
        gw = gateway(request)
        if request.url.path.endswith("/delete"):
            await console(request).call(gw.delete_scram_user, user, mechanism)
            session_of(request).flash(f"Deleted the {mechanism} credential of '{user}'.")
        else:
            password = form_value(form, "password")
            if not password:
                raise bad_request("A password is required.")
            iterations = inputs.integer(form_value(form, "iterations"), "Iterations", minimum=4096, maximum=16384,
                                        default=8192)
            await console(request).call(gw.upsert_scram_user, user, mechanism, password, iterations)
            session_of(request).flash(f"Saved the {mechanism} credential of '{user}'.")
    except ConsoleError as exc:
        return await users_page(request, exc.status, exc.message)
    return redirect("/users")


# -- login ---------------------------------------------------------------------------------------

def _default_protocol(settings: ConsoleSettings) -> str:
    protocol = str(settings.client_config.get("security.protocol", "")).upper()
    return protocol if protocol in SASL_PROTOCOLS else "SASL_PLAINTEXT"


async def login_page(request: Request, status: int = 200, error: str | None = None,
                     form: dict[str, str] | None = None) -> Response:
    settings = console(request).settings
    values = {"username": "", "mechanism": str(settings.client_config.get("sasl.mechanism", "SCRAM-SHA-256")),
              "security_protocol": _default_protocol(settings), **(form or {})}
    return render(request, "login.html", {"form": values, "mechanisms": SASL_MECHANISMS,
                                          "protocols": SASL_PROTOCOLS}, status=status, error=error)


async def login(request: Request) -> Response:
    form = await checked_form(request)
    values = {k: form_value(form, k) for k in ("username", "mechanism", "security_protocol")}
    app = console(request)
    try:
        username = values["username"].strip()
        if not username:
            raise bad_request("A user name is required.")
        credentials = Credentials(username, form_value(form, "password"),
                                  inputs.choice(values["mechanism"], "Mechanism", SASL_MECHANISMS),
                                  inputs.choice(values["security_protocol"], "Security protocol", SASL_PROTOCOLS))
    except ConsoleError as exc:
        return await login_page(request, exc.status, exc.message, values)
    candidate = app.new_gateway(credentials.client_settings())
    try:
        await app.call(candidate.check_login)
    except ConsoleError as exc:
        await asyncio.get_running_loop().run_in_executor(app.executor, candidate.close)
        return await login_page(request, 401, exc.message, values)
    session = app.sessions.replace(session_of(request), credentials, candidate)
    request.state.session = session
    session.flash(f"Logged in as {username}.")
    return redirect("/")


async def logout(request: Request) -> Response:
    await checked_form(request)
    session = console(request).sessions.replace(session_of(request), None)
    request.state.session = session
    session.flash("Logged out.")
    return redirect("/")


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n")


# -- plumbing ------------------------------------------------------------------------------------

def host_name(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8080" -> "::1")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class SessionMiddleware(BaseHTTPMiddleware):
    """Finds or starts the browser's server-side session and sets the security headers."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        allowed = request.app.state.console.settings.allowed_hosts
        if allowed is not None and host_name(request.headers.get("host", "")) not in allowed:
            return PlainTextResponse("Unknown host name: open the console at the address it printed.\n",
                                     status_code=400)
        if request.url.path.startswith("/static/"):
            return await call_next(request)
        store = request.app.state.console.sessions
        cookie = request.cookies.get(COOKIE_NAME)
        session = store.get(cookie)
        if session is None:
            session = store.create()
        request.state.session = session
        response = await call_next(request)
        current: ConsoleSession = request.state.session
        if current.id != cookie:
            response.set_cookie(COOKIE_NAME, current.id, httponly=True, samesite="strict", path="/")
        for name, value in _SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        response.headers.setdefault("Cache-Control", "no-store")
        return response


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


async def console_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleError)
    if _wants_json(request):
        return JSONResponse({"error": exc.message}, status_code=exc.status)
    if not hasattr(request.state, "session"):
        return PlainTextResponse(exc.message, status_code=exc.status)
    return render(request, "error.html", {"title": exc.title, "message": exc.message}, status=exc.status)


async def not_found_error(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    message = "No such page." if status == 404 else str(getattr(exc, "detail", "Request refused."))
    return await console_error(request, ConsoleError(message, status, "Not found" if status == 404 else "Error"))


async def unexpected_error(request: Request, exc: Exception) -> Response:
    """Anything unforeseen: logged with its traceback on the server, one sentence in the browser."""
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    message = f"Unexpected error ({type(exc).__name__}); details are in the console's log."
    if _wants_json(request):
        return JSONResponse({"error": message}, status_code=500)
    body = TEMPLATES.get_template("bare_error.html").render(message=message)
    return Response(body, status_code=500, media_type="text/html", headers=_SECURITY_HEADERS)


def create_app(settings: ConsoleSettings) -> Starlette:
    """The ASGI app; `uvicorn` serves it in `strom console`, Starlette's TestClient in tests."""
    from importlib.resources import files

    state = Console(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        state.close()

    routes = [
        Route("/", overview),
        Route("/brokers/{broker_id}", broker_page),
        Route("/topics", topics_page, methods=["GET"]),
        Route("/topics", create_topic, methods=["POST"]),
        Route("/topics/{name}", topic_page, methods=["GET"]),
        Route("/topics/{name}/delete", delete_topic, methods=["POST"]),
        Route("/topics/{name}/configs", alter_topic_config, methods=["POST"]),
        Route("/topics/{name}/messages", messages_page, methods=["GET"]),
        Route("/topics/{name}/produce", produce_message, methods=["POST"]),
        Route("/groups", groups_page),
        Route("/groups/{group_id:path}/reset", reset_offsets, methods=["POST"]),
        Route("/groups/{group_id:path}", group_page, methods=["GET"]),
        Route("/acls", acls_page, methods=["GET"]),
        Route("/acls", change_acl, methods=["POST"]),
        Route("/acls/delete", change_acl, methods=["POST"]),
        Route("/users", users_page, methods=["GET"]),
        Route("/users", change_user, methods=["POST"]),
        Route("/users/delete", change_user, methods=["POST"]),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/api/throughput", throughput_api),
        Route("/api/group", group_api),
        Route("/api/tail", tail_api),
        Route("/healthz", healthz),
        Mount("/static", app=StaticFiles(directory=str(files("strom.console") / "static")), name="static"),
    ]
    from starlette.exceptions import HTTPException

    app = Starlette(
        routes=routes,
        middleware=[Middleware(SessionMiddleware)],
        exception_handlers={ConsoleError: console_error, HTTPException: not_found_error,
                            Exception: unexpected_error},
        lifespan=lifespan,
    )
    app.state.console = state
    return app
