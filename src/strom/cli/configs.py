"""`strom configs`: describe and change topic/broker configs (like kafka-configs.sh).

Changes go through IncrementalAlterConfigs so that only the named keys change; the
legacy AlterConfigs request would reset every key that is not repeated. Broker configs
are per broker (``--entity-name <id>``) or the cluster default (``--entity-default``, the
broker resource named ""); librdkafka refuses that empty name, so the default's requests
are sent over Strom's own Kafka-protocol client to the first bootstrap broker.

Client quotas (`--entity-type users|clients`, or `--user`/`--client` and their `-defaults`, combined
for a (user, client-id) pair) go through DescribeClientQuotas and AlterClientQuotas, which librdkafka
does not offer, over the same client.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from strom.cli.common import (
    BootstrapOption,
    CommandConfigOption,
    admin_client,
    cli_errors,
    client_security,
    describe_kafka_error,
    fail,
    write_out,
)

_ENTITY_TYPES = {"topics": "topic", "brokers": "broker", "broker-loggers": "broker-logger", "users": "user"}


def configs(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    entity_type: Annotated[str | None, typer.Option("--entity-type", help="topics, brokers or users.")] = None,
    entity_name: Annotated[str | None, typer.Option("--entity-name", help="Topic name, broker id or user name.")
                           ] = None,
    entity_default: Annotated[
        bool, typer.Option("--entity-default", help="The cluster-wide broker default (brokers only).")
    ] = False,
    topic: Annotated[
        str | None, typer.Option("--topic", help="Shortcut for --entity-type topics --entity-name X.")
    ] = None,
    broker: Annotated[
        str | None, typer.Option("--broker", help="Shortcut for --entity-type brokers --entity-name X.")
    ] = None,
    describe: Annotated[bool, typer.Option("--describe", help="Show configs.")] = False,
    all_: Annotated[
        bool, typer.Option("--all", help="With --describe: include defaults and static configs.")
    ] = False,
    alter: Annotated[bool, typer.Option("--alter", help="Change configs.")] = False,
    add_config: Annotated[
        str | None,
        typer.Option("--add-config", help="k1=v1,k2=[v1,v2],k3=v3 to set (repeatable)."),
    ] = None,
    delete_config: Annotated[
        str | None, typer.Option("--delete-config", help="k1,k2 to remove (back to defaults).")
    ] = None,
    command_config: CommandConfigOption = None,
    user: Annotated[str | None, typer.Option("--user", help="A user principal's name (client quotas).")] = None,
    client: Annotated[str | None, typer.Option("--client", help="A client id (client quotas).")] = None,
    user_defaults: Annotated[bool, typer.Option("--user-defaults", help="The default user (quotas).")] = False,
    client_defaults: Annotated[bool, typer.Option("--client-defaults", help="The default client id (quotas).")] = False,
    zookeeper: Annotated[str | None, typer.Option(
        "--zookeeper", help="ZooKeeper host:port, optionally with a /chroot: write SCRAM users straight into it "
                            "(users only; to create the brokers' own user before they start).")] = None,
) -> None:
    """Describe or alter the configs of a topic, broker or user, or the quotas of users and client ids."""
    with cli_errors():
        if describe == alter:
            fail("Command must include exactly one action: --describe or --alter")
        if zookeeper is not None:
            from strom.cli.user_configs import alter_users_in_zookeeper, describe_users_in_zookeeper

            kind, name = _entity(entity_type, entity_name, entity_default, topic, broker)
            if kind != "users":
                fail("--zookeeper is only for --entity-type users (SCRAM credentials); use --bootstrap-server.")
            if describe:
                describe_users_in_zookeeper(zookeeper, name)
            else:
                alter_users_in_zookeeper(zookeeper, name, parse_add_config(add_config or ""),
                                         _split_names(delete_config))
            return
        if entity_type in _QUOTA_ENTITY_TYPES or user is not None or client is not None or user_defaults \
                or client_defaults:
            entity = _quota_entity(entity_type, entity_name, entity_default, user, client, user_defaults,
                                   client_defaults)
            security = client_security(command_config)
            # A user's configs are SCRAM credentials and quotas, as in Kafka: each key goes to its own API.
            scram_user = list(entity) == ["user"] and (entity["user"] is _ANY or isinstance(entity["user"], str))
            if describe:
                if scram_user:
                    from strom.cli.user_configs import describe_users

                    describe_users(admin_client(bootstrap_server, command_config),
                                   None if entity["user"] is _ANY else entity["user"])
                _describe_quotas(bootstrap_server, entity, security)
                return
            add, delete = parse_add_config(add_config or ""), _split_names(delete_config)
            scram_add = {k: v for k, v in add.items() if k in _SCRAM_KEYS}
            scram_delete = [k for k in delete if k in _SCRAM_KEYS]
            if (scram_add or scram_delete) and not scram_user:
                fail("SCRAM credentials belong to one user: use --entity-type users --entity-name NAME.")
            if scram_add or scram_delete:
                from strom.cli.user_configs import alter_users

                alter_users(admin_client(bootstrap_server, command_config),
                            None if entity["user"] is _ANY else entity["user"], scram_add, scram_delete)
            quota_add = {k: v for k, v in add.items() if k not in _SCRAM_KEYS}
            quota_delete = [k for k in delete if k not in _SCRAM_KEYS]
            if quota_add or quota_delete or not (scram_add or scram_delete):
                _alter_quotas(bootstrap_server, entity, quota_add, quota_delete, security)
            return
        kind, name = _entity(entity_type, entity_name, entity_default, topic, broker)
        if alter and not (add_config or delete_config):
            fail("--alter needs --add-config and/or --delete-config.")
        if name == "":
            _cluster_default(bootstrap_server, describe, parse_add_config(add_config or ""),
                             _split_names(delete_config), client_security(command_config))
            return
        admin = admin_client(bootstrap_server, command_config)
        if describe:
            _describe(admin, kind, name, all_, bootstrap_server, client_security(command_config))
        else:
            if name is None:
                fail("--alter needs --entity-name.")
            _alter(admin, kind, name, parse_add_config(add_config or ""), _split_names(delete_config),
                   bootstrap_server, client_security(command_config))


def _entity(
    entity_type: str | None,
    entity_name: str | None,
    entity_default: bool,
    topic: str | None,
    broker: str | None,
) -> tuple[str, str | None]:
    """Work out which resource the user means from Kafka's several ways of saying it."""
    if topic is not None:
        return "topics", topic
    if broker is not None:
        return "brokers", broker
    if entity_type is None:
        fail("Missing --entity-type (topics or brokers), or use --topic / --broker.")
    kind = entity_type if entity_type in _ENTITY_TYPES else entity_type + "s"
    if kind not in ("topics", "brokers", "users"):
        fail(f"Unsupported --entity-type '{entity_type}': use topics, brokers or users.")
    if entity_default:
        if kind != "brokers":
            fail("--entity-default is only for --entity-type brokers.")
        if entity_name is not None:
            fail("Use either --entity-name or --entity-default, not both.")
        return kind, ""
    return kind, entity_name


def parse_add_config(text: str) -> dict[str, str]:
    """Parse Kafka's `k1=v1,k2=[a,b],k3=v3` syntax (brackets protect commas in lists)."""
    result: dict[str, str] = {}
    items: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    for item in items:
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"Invalid entry '{item}' in --add-config: expected key=value.")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        result[key.strip()] = value
    return result


def _split_names(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _resource_type(kind: str) -> Any:
    from confluent_kafka.admin import ResourceType

    return ResourceType.TOPIC if kind == "topics" else ResourceType.BROKER


def _describe(admin: Any, kind: str, name: str | None, all_: bool, given: str, security: Any = None) -> None:
    """kafka-configs.sh --describe. The request is sent by hand, not through confluent-kafka, whose
    ConfigEntry keeps synonyms in a dict keyed by name: a topic override and the default it replaces
    share the name (min.insync.replicas) and only one of them would survive."""
    from strom.config import ConfigSource

    metadata = admin.list_topics(timeout=10)
    if name is not None:
        names = [name]
    elif kind == "topics":
        names = sorted(metadata.topics)
    else:
        names = [str(b) for b in sorted(metadata.brokers)]
    dynamic_source = ConfigSource.DYNAMIC_TOPIC_CONFIG if kind == "topics" else ConfigSource.DYNAMIC_BROKER_CONFIG
    singular = _ENTITY_TYPES[kind]
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    for entity in names:
        targets = [*given.split(","), *bootstrap.split(",")]  # the user's list first, then the metadata's
        if kind != "topics":  # a broker's own configs come from that broker
            broker = metadata.brokers.get(int(entity)) if entity.isdigit() else None
            if broker is None:
                fail(f"Broker {entity} is not in the cluster.")
            targets = [f"{broker.host}:{broker.port}"]
        result = describe_configs(targets, [(_TOPIC if kind == "topics" else _BROKER, entity)], security)[0]
        if result.error_code == _UNKNOWN_TOPIC_OR_PARTITION:
            fail(f"Topic '{entity}' does not exist.")
        _raise_for(result.error_code, result.error_message)
        write_out(f"{'All' if all_ else 'Dynamic'} configs for {singular} {entity} are:\n")
        for entry in sorted(result.configs, key=lambda e: e.name):
            if not all_ and entry.config_source != int(dynamic_source):
                continue
            synonyms = [(_source(syn.source).name, syn.name, None if entry.is_sensitive else syn.value)
                        for syn in entry.synonyms]
            _write_entry(entry.name, None if entry.is_sensitive else entry.value, entry.is_sensitive, synonyms)


def _write_entry(name: str, value: str | None, sensitive: bool, synonyms: list[tuple[str, str, str | None]]) -> None:
    """One line as kafka-configs.sh prints it."""
    shown = ", ".join(f"{source}:{syn}={'null' if v is None else v}" for source, syn, v in synonyms)
    write_out(f"  {name}={'null' if value is None else value} sensitive={'true' if sensitive else 'false'} "
              f"synonyms={{{shown}}}\n")


def _source(value: Any) -> Any:
    """confluent-kafka reports a config's source as an int or as a ConfigSource."""
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(value)
    except ValueError:
        return ConfigSource.UNKNOWN_CONFIG


def _alter(admin: Any, kind: str, name: str, add: dict[str, str], delete: list[str], given: str,
           security: Any = None) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    both = set(add) & set(delete)
    if both:
        fail(f"A config cannot be both added and deleted: {', '.join(sorted(both))}.")
    if kind == "topics" and name not in admin.list_topics(timeout=10).topics:
        fail(f"Topic '{name}' does not exist.")
    if kind == "topics":
        # Any broker applies a topic's configs (it writes them to ZooKeeper); librdkafka would wait for
        # the controller, which after a kill -9 is a dead broker until its session expires.
        import asyncio

        from kafka.protocol.admin import IncrementalAlterConfigsRequest

        brokers = [f"{b.host}:{b.port}" for b in admin.list_topics(timeout=10).brokers.values()]
        ops = [(k, _SET, v) for k, v in add.items()] + [(k, _DELETE, None) for k in delete]
        request = IncrementalAlterConfigsRequest(resources=[(_TOPIC, name, ops)], validate_only=False)
        addresses = ",".join(dict.fromkeys(a.strip() for a in [*given.split(","), *brokers] if a.strip()))
        result = asyncio.run(_send_to_bootstrap(addresses, request, 1, security)).responses[0]
        if result.error_code == _UNKNOWN_TOPIC_OR_PARTITION:
            fail(f"Topic '{name}' does not exist.")
        _raise_for(result.error_code, result.error_message)
        write_out(f"Completed updating config for topic {name}.\n")
        return
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in add.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
    resource = ConfigResource(_resource_type(kind), name, incremental_configs=entries)
    future = admin.incremental_alter_configs([resource], request_timeout=30)[resource]
    try:
        future.result()
    except KafkaException as exc:
        fail(describe_kafka_error(exc, name if kind == "topics" else None))
    write_out(f"Completed updating config for {_ENTITY_TYPES[kind]} {name}.\n")


def _cluster_default(bootstrap: str, describe: bool, add: dict[str, str], delete: list[str],
                     security: Any = None) -> None:
    """Describe or alter the cluster-wide broker default (resource ""), as kafka-configs.sh --entity-default."""
    import asyncio

    from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

    from strom.config import ConfigSource

    if describe:
        request: Any = DescribeConfigsRequest(resources=[(_BROKER, "", None)], include_synonyms=True,
                                              include_documentation=False)
        result = asyncio.run(_send_to_bootstrap(bootstrap, request, 4, security)).results[0]
        _raise_for(result.error_code, result.error_message)
        write_out("Default configs for brokers in the cluster are:\n")
        for entry in sorted(result.configs, key=lambda e: e.name):
            synonyms = [(ConfigSource(syn.source).name, syn.name, syn.value) for syn in entry.synonyms]
            _write_entry(entry.name, entry.value, entry.is_sensitive, synonyms)
        return
    both = set(add) & set(delete)
    if both:
        fail(f"A config cannot be both added and deleted: {', '.join(sorted(both))}.")
    ops = [(k, _SET, v) for k, v in add.items()] + [(k, _DELETE, None) for k in delete]
    request = IncrementalAlterConfigsRequest(resources=[(_BROKER, "", ops)], validate_only=False)
    result = asyncio.run(_send_to_bootstrap(bootstrap, request, 1, security)).responses[0]
    _raise_for(result.error_code, result.error_message)
    write_out("Completed updating default config for brokers in the cluster.\n")


_TOPIC, _BROKER, _SET, _DELETE = 2, 4, 0, 1
_UNKNOWN_TOPIC_OR_PARTITION = 3


def describe_configs(addresses: list[str], resources: list[tuple[int, str]], security: Any = None) -> list[Any]:
    """DescribeConfigs results, in the order of `resources`, from the first of `addresses` that answers.

    Any broker can describe topic configs; librdkafka sends the request to the controller only, which
    after a kill -9 is a dead broker until its ZooKeeper session expires, so the tools send it here."""
    import asyncio

    from kafka.protocol.admin import DescribeConfigsRequest

    request = DescribeConfigsRequest(resources=[(kind, name, None) for kind, name in resources],
                                     include_synonyms=True, include_documentation=False)
    return list(asyncio.run(_send_to_bootstrap(",".join(dict.fromkeys(addresses)), request, 4, security)).results)


async def _send_to_bootstrap(bootstrap: str, request: Any, version: int, security: Any = None) -> Any:
    """Send one request to the first bootstrap broker that answers (each gets the connect timeout to answer)."""
    from strom.cli.common import connect_timeout
    from strom.client.broker_client import BrokerClient

    problems = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        client = BrokerClient(host.strip("[]") or "127.0.0.1", int(port), client_id="strom-configs",
                              connect_timeout_s=connect_timeout(), security=security,
                              request_timeout_ms=int(connect_timeout() * 1000))
        try:
            return await client.send(request, version)
        except (ConnectionError, OSError, TimeoutError) as exc:
            problems.append(f"{address}: {exc}")
        finally:
            await client.close()
    fail(f"Could not reach a broker at {bootstrap}: {'; '.join(problems)}")


def _raise_for(error_code: int, message: str | None) -> None:
    if error_code:
        import kafka.errors as Errors

        error = Errors.for_code(error_code)
        name = getattr(error, "message", error.__name__)
        text = message or name
        fail(f"Invalid config: {text}" if name == "INVALID_CONFIG" else f"{text} ({name})")


# -- client quotas ----------------------------------------------------------------------------------------
_QUOTA_ENTITY_TYPES = {"users": "user", "user": "user", "clients": "client-id", "client": "client-id"}
_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
_SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_ANY = object()  # --describe without a name: every entity of the type
QuotaEntitySpec = dict[str, Any]  # wire entity type -> name, None (the default) or _ANY


def _quota_entity(entity_type: str | None, entity_name: str | None, entity_default: bool, user: str | None,
                  client: str | None, user_defaults: bool, client_defaults: bool) -> QuotaEntitySpec:
    """The (user, client-id) entity the options name; a type given without a name means all of them."""
    spec: QuotaEntitySpec = {}
    if entity_type is not None:
        kind = _QUOTA_ENTITY_TYPES.get(entity_type)
        if kind is None:
            fail(f"Unsupported --entity-type '{entity_type}' with --user/--client: use users or clients.")
        if entity_name is not None and entity_default:
            fail("Use either --entity-name or --entity-default, not both.")
        spec[kind] = None if entity_default else (_ANY if entity_name is None else entity_name)
    for kind, name, default in (("user", user, user_defaults), ("client-id", client, client_defaults)):
        if name is None and not default:
            continue
        if name is not None and default:
            fail(f"Use either --{kind.split('-')[0]} or --{kind.split('-')[0]}-defaults, not both.")
        if kind in spec:
            fail(f"The {kind} is named twice.")
        spec[kind] = name
    for kind, name in spec.items():
        if name == "":
            fail(f"An empty {kind} name is not allowed; use --entity-default for the default.")
    return spec


def _quota_entity_text(entity: list[tuple[str, str | None]]) -> str:
    """As kafka-configs.sh names an entity: user-principal 'alice', client-id 'app', the default client-id."""
    words = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(f"the default {words[t]}" if n is None else f"{words[t]} '{n}'" for t, n in entity)


def _describe_quotas(bootstrap: str, spec: QuotaEntitySpec, security: Any = None) -> None:
    import asyncio

    from kafka.protocol.admin import DescribeClientQuotasRequest

    component = DescribeClientQuotasRequest.ComponentData
    components = [component(entity_type=kind, match_type=2 if name is _ANY else 1 if name is None else 0,
                            match=name if isinstance(name, str) else None)
                  for kind, name in spec.items()]
    request = DescribeClientQuotasRequest(components=components, strict=True)
    result = asyncio.run(_send_to_bootstrap(bootstrap, request, 1, security))
    _raise_for(result.error_code, result.error_message)
    for entry in result.entries or []:
        entity = [(e.entity_type, e.entity_name) for e in entry.entity]
        values = ", ".join(f"{v.key}={v.value}" for v in entry.values)
        write_out(f"Quota configs for {_quota_entity_text(entity)} are {values}\n")


def _alter_quotas(bootstrap: str, spec: QuotaEntitySpec, add: dict[str, str], delete: list[str],
                  security: Any = None) -> None:
    import asyncio

    from kafka.protocol.admin import AlterClientQuotasRequest

    if any(name is _ANY for name in spec.values()):
        fail("--alter needs --entity-name or --entity-default (or --user/--client names or defaults).")
    if not add and not delete:
        fail("--alter needs --add-config and/or --delete-config.")
    both = set(add) & set(delete)
    if both:
        fail(f"A config cannot be both added and deleted: {', '.join(sorted(both))}.")
    entry = AlterClientQuotasRequest.EntryData
    ops = []
    for key, text in add.items():
        if key not in _QUOTA_KEYS:
            fail(f"Invalid quota config '{key}': use {', '.join(_QUOTA_KEYS)}.")
        try:
            value = float(text)
        except ValueError:
            fail(f"Invalid value '{text}' for {key}: expected a number.")
        ops.append(entry.OpData(key=key, value=value, remove=False))
    ops += [entry.OpData(key=key, value=0.0, remove=True) for key in delete]
    entity = [(kind, name) for kind, name in spec.items()]
    request = AlterClientQuotasRequest(validate_only=False, entries=[entry(
        entity=[entry.EntityData(entity_type=kind, entity_name=name) for kind, name in entity], ops=ops)])
    result = asyncio.run(_send_to_bootstrap(bootstrap, request, 1, security)).entries[0]
    _raise_for(result.error_code, result.error_message)
    write_out(f"Completed updating config for {_quota_entity_text(entity)}.\n")
