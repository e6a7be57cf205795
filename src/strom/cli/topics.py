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
    CliError,
    CommandConfigOption,
    admin_client,
    cli_errors,
    client_security,
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
    under_replicated: Annotated[bool, typer.Option(
        "--under-replicated-partitions", help="With --describe: only partitions whose ISR is smaller than "
        "their replica list.")] = False,
    unavailable: Annotated[bool, typer.Option(
        "--unavailable-partitions", help="With --describe: only partitions without a live leader.")] = False,
    under_min_isr: Annotated[bool, typer.Option(
        "--under-min-isr-partitions", help="With --describe: only partitions whose ISR is smaller than "
        "min.insync.replicas (acks=all writes fail).")] = False,
    at_min_isr: Annotated[bool, typer.Option(
        "--at-min-isr-partitions", help="With --describe: only partitions whose ISR equals "
        "min.insync.replicas (one more loss stops acks=all writes).")] = False,
    with_overrides: Annotated[bool, typer.Option(
        "--topics-with-overrides", help="With --describe: only topics with config overrides, without "
        "their partitions.")] = False,
    command_config: CommandConfigOption = None,
) -> None:
    """Create, list, describe, alter or delete topics."""
    with cli_errors():
        actions = [create, list_, describe, alter, delete]
        if sum(actions) != 1:
            fail("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
        reports = {"--under-replicated-partitions": under_replicated, "--unavailable-partitions": unavailable,
                   "--under-min-isr-partitions": under_min_isr, "--at-min-isr-partitions": at_min_isr,
                   "--topics-with-overrides": with_overrides}
        chosen = [flag for flag, on in reports.items() if on]
        if len(chosen) > 1:
            fail(f"Only one of {', '.join(chosen)} can be given.")
        if chosen and not describe:
            fail(f"{chosen[0]} works with --describe only.")
        if (create or alter or delete) and not topic:
            fail("Missing required argument --topic.")
        admin = admin_client(bootstrap_server, command_config)
        if create:
            assert topic is not None
            _create(admin, topic, partitions, replication_factor, config or [], if_not_exists)
        elif list_:
            _list(admin, topic, exclude_internal)
        elif describe:
            _describe(admin, topic, exclude_internal, if_exists, bootstrap_server, client_security(command_config),
                      chosen[0] if chosen else None)
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


def _topic_id(topic_id: Any) -> str:
    """Kafka prints topic ids in URL-safe base64 without padding."""
    import base64

    raw = getattr(topic_id, "bytes", None)
    if raw is None:
        return str(topic_id).replace("+", "-").replace("/", "_").rstrip("=")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _node_id(node_id: int) -> str:
    return "none" if node_id < 0 else str(node_id)


_TOPIC, _DEFAULT_CONFIG = 2, 5  # DescribeConfigs resource type and config source
_UNKNOWN_TOPIC_OR_PARTITION = 3


def _min_isr(result: Any) -> int | None:
    """The effective min.insync.replicas of a DescribeConfigs topic result (override or default)."""
    for entry in result.configs:
        if entry.name == "min.insync.replicas" and entry.value is not None:
            return int(entry.value)
    return None


def _reported(report: str, p: Any, min_isr: int | None, live: set[int]) -> bool:
    """Whether a partition belongs in a kafka-topics.sh --describe report (e.g. --under-replicated-partitions).

    As kafka-topics.sh: a partition without a leader counts as under min ISR and unavailable, not as
    under-replicated; a leader on a broker missing from the metadata's broker list is unavailable.
    Unlike kafka-topics.sh, a partition without a leader is not also "at min ISR" because the ISR it
    last had (kept in ZooKeeper) is as long as min.insync.replicas: it takes no writes at all."""
    has_leader = p.leader_id >= 0
    isr, replicas = len(p.isr_nodes), len(p.replica_nodes)
    if report == "--under-replicated-partitions":
        return has_leader and isr < replicas
    if report == "--unavailable-partitions":
        return not has_leader or p.leader_id not in live
    if report == "--under-min-isr-partitions":
        return not has_leader or (min_isr is not None and isr < min_isr)
    if report == "--at-min-isr-partitions":
        return has_leader and min_isr is not None and isr == min_isr
    return True


def _describe(admin: Any, pattern: str | None, exclude_internal: bool, if_exists: bool, bootstrap: str,
              security: Any, report: str | None = None) -> None:
    """kafka-topics.sh --describe: partitions from a Metadata request, overrides from DescribeConfigs.

    With a report flag, only the partitions it selects are printed (no topic lines), or with
    --topics-with-overrides only the topic lines of topics that have overrides, as kafka-topics.sh.
    Both are sent by hand to the first broker that answers (bootstrap list first, then the brokers
    the metadata names): librdkafka sends DescribeTopics and DescribeConfigs to the controller only,
    and after a kill -9 of the controller that is a dead broker until its ZooKeeper session expires."""
    import asyncio

    from kafka.protocol.metadata import MetadataRequest

    from strom.cli.configs import _send_to_bootstrap, describe_configs

    names = _matching(admin, pattern, exclude_internal)
    if not names:
        if pattern is not None and not if_exists:
            fail(f"Topic '{pattern}' does not exist.")
        return
    brokers = [f"{b.host}:{b.port}" for b in admin.list_topics(timeout=10).brokers.values()]
    addresses = list(dict.fromkeys(a.strip() for a in [*bootstrap.split(","), *brokers] if a.strip()))
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    metadata = asyncio.run(_send_to_bootstrap(",".join(addresses), request, 12, security))
    described = {t.name: t for t in metadata.topics}
    live = {b.node_id for b in metadata.brokers}
    moving = _moves_under_way(metadata, names, security)
    configs_by_topic: dict[str, str] = {}
    min_isr_by_topic: dict[str, int | None] = {}
    try:
        results = describe_configs(addresses, [(_TOPIC, name) for name in names], security)
    except CliError:
        results = []  # no broker answered DescribeConfigs: the partitions are still worth showing
    for result in results:
        if result.error_code:
            continue
        min_isr_by_topic[result.resource_name] = _min_isr(result)
        overrides = [
            f"{entry.name}={'null' if entry.is_sensitive or entry.value is None else entry.value}"
            for entry in sorted(result.configs, key=lambda e: e.name)
            if entry.config_source != _DEFAULT_CONFIG
        ]
        configs_by_topic[result.resource_name] = ",".join(overrides)

    for name in names:
        topic = described.get(name)
        if topic is None or topic.error_code == _UNKNOWN_TOPIC_OR_PARTITION:
            if if_exists:
                continue
            fail(f"Topic '{name}' does not exist.")
        if topic.error_code and not topic.partitions:
            import kafka.errors as Errors

            fail(f"Topic '{name}': {Errors.for_code(topic.error_code).__name__}")
        parts = sorted(topic.partitions, key=lambda p: p.partition_index)
        rf = len(parts[0].replica_nodes) if parts else 0
        if report is None or (report == "--topics-with-overrides" and configs_by_topic.get(name)):
            write_out(
                f"Topic: {name}\tTopicId: {_topic_id(topic.topic_id)}\tPartitionCount: {len(parts)}\t"
                f"ReplicationFactor: {rf}\tConfigs: {configs_by_topic.get(name, '')}\n"
            )
        if report == "--topics-with-overrides":
            continue
        for p in parts:
            if report is not None and not _reported(report, p, min_isr_by_topic.get(name), live):
                continue
            replicas = ",".join(str(r) for r in p.replica_nodes)
            isr = ",".join(str(r) for r in p.isr_nodes)
            write_out(
                f"\tTopic: {name}\tPartition: {p.partition_index}\tLeader: {_node_id(p.leader_id)}\t"
                f"Replicas: {replicas}\tIsr: {isr}{_move_of(moving.get((name, p.partition_index)))}\n"
            )


def _moves_under_way(metadata: Any, names: list[str], security: Any) -> dict[tuple[str, int], Any]:
    """Partitions being reassigned, from ListPartitionReassignments to the controller (as kafka-topics.sh);
    nothing when the controller cannot say (it moved, or is an older broker)."""
    import asyncio

    from kafka.protocol.admin import ListPartitionReassignmentsRequest

    from strom.cli.configs import _send_to_bootstrap

    controller = next((b for b in metadata.brokers if b.node_id == metadata.controller_id), None)
    if controller is None:
        return {}
    request = ListPartitionReassignmentsRequest(timeout_ms=10_000, topics=None)
    try:
        answer = asyncio.run(_send_to_bootstrap(f"{controller.host}:{controller.port}", request, 0, security))
    except Exception:  # noqa: BLE001 - the moves are extra information: the description stands without them
        return {}
    if answer.error_code:
        return {}
    wanted = set(names)
    return {(t.name, p.partition_index): p for t in answer.topics if t.name in wanted for p in t.partitions}


def _move_of(move: Any) -> str:
    """kafka-topics.sh's suffix for a partition being reassigned."""
    if move is None:
        return ""
    return (f"\tAdding Replicas: {','.join(str(r) for r in move.adding_replicas)}"
            f"\tRemoving Replicas: {','.join(str(r) for r in move.removing_replicas)}")


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
