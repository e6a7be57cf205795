"""`strom topics`: create, list, describe, alter and delete topics (like kafka-topics.sh).

Kafka's tool takes the action as a flag (`--create`, `--list`, ...) rather than as a
sub-command; Strom keeps that shape so that commands copied from Kafka docs work.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from strom.cli.common import (
    BootstrapOption,
    CommandConfigOption,
    admin_client,
    cli_errors,
    describe_kafka_error,
    fail,
    parse_key_values,
    write_out,
)

_REGEX_CHARS = set("*?+[](){}|^$\\")


def topics(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    create: Annotated[bool, typer.Option("--create", help="Create a new topic.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List all topics.")] = False,
    describe: Annotated[bool, typer.Option("--describe", help="Describe topics and partitions.")] = False,
    alter: Annotated[bool, typer.Option("--alter", help="Increase the partition count.")] = False,
    delete: Annotated[bool, typer.Option("--delete", help="Delete a topic.")] = False,
    topic: Annotated[
        str | None,
        typer.Option("--topic", help="Topic name (a regular expression for list/describe/delete)."),
    ] = None,
    partitions: Annotated[int | None, typer.Option("--partitions", help="Number of partitions.")] = None,
    replication_factor: Annotated[
        int | None, typer.Option("--replication-factor", help="Replicas per partition.")
    ] = None,
    config: Annotated[
        list[str] | None, typer.Option("--config", help="Topic config override key=value (repeatable).")
    ] = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="With --create: do nothing if the topic exists.")
    ] = False,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="With --alter/--describe/--delete: do nothing if missing.")
    ] = False,
    exclude_internal: Annotated[
        bool, typer.Option("--exclude-internal", help="Leave out internal topics such as __consumer_offsets.")
    ] = False,
    command_config: CommandConfigOption = None,
) -> None:
    """Create, list, describe, alter or delete topics."""
    with cli_errors():
        actions = [create, list_, describe, alter, delete]
        if sum(actions) != 1:
            fail("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
        if (create or alter or delete) and not topic:
            fail("Missing required argument --topic.")
        admin = admin_client(bootstrap_server, command_config)
        if create:
            assert topic is not None
            _create(admin, topic, partitions, replication_factor, config or [], if_not_exists)
        elif list_:
            _list(admin, topic, exclude_internal)
        elif describe:
            _describe(admin, topic, exclude_internal, if_exists)
        elif alter:
            assert topic is not None
            if config:
                fail("Topic configs cannot be changed with --alter; use `strom configs --alter`.")
            if partitions is None:
                fail("--alter needs --partitions N (the new, larger partition count).")
            _alter(admin, topic, partitions, if_exists)
        else:
            assert topic is not None
            _delete(admin, topic, if_exists)


def _all_topic_names(admin: Any, exclude_internal: bool) -> list[str]:
    names = sorted(admin.list_topics(timeout=10).topics)
    if exclude_internal:
        names = [n for n in names if not n.startswith("__")]
    return names


def _matching(admin: Any, pattern: str | None, exclude_internal: bool) -> list[str]:
    """Topic names equal to `pattern`, or matching it as a regular expression."""
    names = _all_topic_names(admin, exclude_internal)
    if pattern is None:
        return names
    if pattern in names:
        return [pattern]
    if not (_REGEX_CHARS & set(pattern)):
        return []
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        fail(f"Invalid topic pattern '{pattern}': {exc}.")
    return [n for n in names if regex.fullmatch(n)]


def _create(
    admin: Any,
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    config: list[str],
    if_not_exists: bool,
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    configs = parse_key_values(config, "--config")
    if partitions is not None and partitions < 1:
        fail("The number of partitions must be at least 1.")
    if replication_factor is not None and replication_factor < 1:
        fail("The replication factor must be at least 1.")
    if if_not_exists and topic in admin.list_topics(timeout=10).topics:
        return
    # -1 asks the broker for its defaults (num.partitions, default.replication.factor).
    new_topic = NewTopic(
        topic,
        num_partitions=partitions if partitions is not None else -1,
        replication_factor=replication_factor if replication_factor is not None else -1,
        config=configs,
    )
    future = admin.create_topics([new_topic], request_timeout=30)[topic]
    try:
        future.result()
    except KafkaException as exc:
        if if_not_exists and exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
            return
        fail(describe_kafka_error(exc, topic))
    write_out(f"Created topic {topic}.\n")


def _list(admin: Any, pattern: str | None, exclude_internal: bool) -> None:
    for name in _matching(admin, pattern, exclude_internal):
        write_out(name + "\n")


def _topic_id(uuid: Any) -> str:
    """Kafka prints topic ids in URL-safe base64; librdkafka's string uses '+' and '/'."""
    return str(uuid).replace("+", "-").replace("/", "_").rstrip("=")


def _node_id(node: Any) -> str:
    return "none" if node is None or node.id < 0 else str(node.id)


def _describe(admin: Any, pattern: str | None, exclude_internal: bool, if_exists: bool) -> None:
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import ConfigResource, ResourceType

    names = _matching(admin, pattern, exclude_internal)
    if not names:
        if pattern is not None and not if_exists:
            fail(f"Topic '{pattern}' does not exist.")
        return
    descriptions = admin.describe_topics(TopicCollection(names), request_timeout=30)
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    try:
        config_futures = admin.describe_configs(resources, request_timeout=30)
    except KafkaException:
        config_futures = {}
    configs_by_topic: dict[str, str] = {}
    for resource, future in config_futures.items():
        try:
            entries = future.result()
        except KafkaException:
            continue  # a broker without DescribeConfigs still gets a useful describe
        overrides = [
            f"{entry.name}={'null' if entry.is_sensitive or entry.value is None else entry.value}"
            for entry in sorted(entries.values(), key=lambda e: e.name)
            if not entry.is_default
        ]
        configs_by_topic[resource.name] = ",".join(overrides)

    for name in names:
        try:
            desc = descriptions[name].result()
        except KafkaException as exc:
            if if_exists and exc.args[0].name() in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC"):
                continue
            fail(describe_kafka_error(exc, name))
        parts = sorted(desc.partitions, key=lambda p: p.id)
        rf = len(parts[0].replicas) if parts else 0
        write_out(
            f"Topic: {name}\tTopicId: {_topic_id(desc.topic_id)}\tPartitionCount: {len(parts)}\t"
            f"ReplicationFactor: {rf}\tConfigs: {configs_by_topic.get(name, '')}\n"
        )
        for p in parts:
            replicas = ",".join(str(r.id) for r in p.replicas)
            isr = ",".join(str(r.id) for r in p.isr)
            write_out(
                f"\tTopic: {name}\tPartition: {p.id}\tLeader: {_node_id(p.leader)}\t"
                f"Replicas: {replicas}\tIsr: {isr}\n"
            )


def _alter(admin: Any, topic: str, partitions: int, if_exists: bool) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    if topic not in admin.list_topics(timeout=10).topics:
        if if_exists:
            return
        fail(f"Topic '{topic}' does not exist.")
    future = admin.create_partitions([NewPartitions(topic, partitions)], request_timeout=30)[topic]
    try:
        future.result()
    except KafkaException as exc:
        fail(describe_kafka_error(exc, topic))


def _delete(admin: Any, pattern: str, if_exists: bool) -> None:
    from confluent_kafka import KafkaException

    names = _matching(admin, pattern, exclude_internal=False)
    if not names:
        if if_exists:
            return
        fail(f"Topic '{pattern}' does not exist.")
    futures = admin.delete_topics(names, request_timeout=30)
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            fail(describe_kafka_error(exc, name))
