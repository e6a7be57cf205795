"""`strom get-offsets`: print partition offsets for a time (like kafka-get-offsets.sh).

Uses the ListOffsets request through the admin client, so it works without a group.
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
    write_out,
)

_REGEX_CHARS = set("*?+[](){}|^$\\")


def parse_time(text: str) -> Any:
    """Map Kafka's --time values (-1 latest, -2 earliest, -3 max-timestamp, ms) to an OffsetSpec."""
    from confluent_kafka.admin import OffsetSpec

    word = text.strip().lower()
    if word in ("latest", "-1"):
        return OffsetSpec.latest()
    if word in ("earliest", "-2"):
        return OffsetSpec.earliest()
    if word in ("max-timestamp", "-3"):
        return OffsetSpec.max_timestamp()
    try:
        stamp = int(word)
    except ValueError:
        fail(
            f"Invalid --time '{text}': use earliest, latest, max-timestamp, -1, -2, -3 or a timestamp in ms."
        )
    if stamp < 0:
        fail(f"Invalid --time '{text}': negative values other than -1, -2 and -3 mean nothing.")
    return OffsetSpec.for_timestamp(stamp)


def parse_partitions(text: str | None) -> set[int] | None:
    """`0,1,5-7` → {0, 1, 5, 6, 7}; None means every partition."""
    if text is None or not text.strip():
        return None
    wanted: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = part.split("-", 1)
                wanted.update(range(int(low), int(high) + 1))
            else:
                wanted.add(int(part))
        except ValueError:
            fail(f"Invalid --partitions '{text}': expected a list like 0,1 or 0-3.")
    return wanted


def get_offsets(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    topic: Annotated[
        str | None, typer.Option("--topic", help="Topic name or regular expression (default: all topics).")
    ] = None,
    partitions: Annotated[
        str | None, typer.Option("--partitions", help="Comma-separated partition ids, e.g. 0,1 or 0-3.")
    ] = None,
    time_: Annotated[
        str,
        typer.Option("--time", help="earliest (-2), latest (-1), max-timestamp (-3) or a timestamp in ms."),
    ] = "latest",
    exclude_internal_topics: Annotated[
        bool, typer.Option("--exclude-internal-topics", help="Skip topics whose name starts with '__'.")
    ] = False,
    command_config: CommandConfigOption = None,
) -> None:
    """Print `topic:partition:offset` for each matching partition."""
    with cli_errors():
        spec = parse_time(time_)
        wanted = parse_partitions(partitions)
        admin = admin_client(bootstrap_server, command_config)
        _print_offsets(admin, topic, wanted, spec, exclude_internal_topics)


def _print_offsets(
    admin: Any, topic: str | None, wanted: set[int] | None, spec: Any, exclude_internal: bool
) -> None:
    from confluent_kafka import KafkaException, TopicPartition

    metadata = admin.list_topics(timeout=10)
    names = sorted(metadata.topics)
    if topic is not None:
        if topic in metadata.topics:
            names = [topic]
        elif _REGEX_CHARS & set(topic):
            try:
                regex = re.compile(topic)
            except re.error as exc:
                fail(f"Invalid topic pattern '{topic}': {exc}.")
            names = [n for n in names if regex.fullmatch(n)]
        else:
            fail(f"Topic '{topic}' does not exist.")
    if exclude_internal:
        names = [n for n in names if not n.startswith("__")]
    requests: dict[Any, Any] = {}
    for name in names:
        for pid in sorted(metadata.topics[name].partitions):
            if wanted is None or pid in wanted:
                requests[TopicPartition(name, pid)] = spec
    if not requests:
        if topic is not None and wanted is not None:
            fail(f"Topic '{topic}' has none of the partitions {','.join(map(str, sorted(wanted)))}.")
        return
    futures = admin.list_offsets(requests, request_timeout=30)
    rows: list[tuple[str, int, str]] = []
    for tp, future in futures.items():
        try:
            result = future.result()
        except KafkaException as exc:
            fail(describe_kafka_error(exc, tp.topic))
        # No record at or after the timestamp: Kafka prints an empty offset.
        offset = "" if result.offset is None or result.offset < 0 else str(result.offset)
        rows.append((tp.topic, tp.partition, offset))
    for name, pid, offset in sorted(rows):
        write_out(f"{name}:{pid}:{offset}\n")
