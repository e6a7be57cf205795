"""`strom console-consumer`: print records of a topic (like kafka-console-consumer.sh).

Without --group the consumer assigns partitions itself, so it needs no group
coordinator and commits nothing; with --group it subscribes and commits like Kafka's.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer

from strom.cli.common import (
    BootstrapOption,
    cli_errors,
    client_config,
    describe_kafka_error,
    ensure_reachable,
    fail,
    parse_key_values,
    print_warning,
    topic_partitions,
)

_TIMESTAMP_NAMES = {1: "CreateTime", 2: "LogAppendTime"}


@dataclass
class MessageFormatter:
    """Kafka's DefaultMessageFormatter: optional columns joined by key.separator."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> MessageFormatter:
        """Read `--property print.key=true` style settings."""

        def flag(name: str, default: bool = False) -> bool:
            raw = props.get(name)
            return default if raw is None else raw.strip().lower() == "true"

        def text(name: str, default: str) -> bytes:
            raw = props.get(name, default)
            return raw.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r").encode()

        return cls(
            print_timestamp=flag("print.timestamp"),
            print_partition=flag("print.partition"),
            print_offset=flag("print.offset"),
            print_headers=flag("print.headers"),
            print_key=flag("print.key"),
            print_value=flag("print.value", True),
            key_separator=text("key.separator", "\t"),
            line_separator=text("line.separator", "\n"),
            headers_separator=text("headers.separator", ","),
            headers_key_separator=text("headers.key.separator", ":"),
            null_literal=text("null.literal", "null"),
        )

    def format(self, msg: Any) -> bytes:
        """One record as bytes, columns in Kafka's order: time, partition, offset, headers, key, value."""
        columns: list[bytes] = []
        if self.print_timestamp:
            kind, stamp = msg.timestamp()
            name = _TIMESTAMP_NAMES.get(kind)
            columns.append(f"{name}:{stamp}".encode() if name else b"NO_TIMESTAMP")
        if self.print_partition:
            columns.append(f"Partition:{msg.partition()}".encode())
        if self.print_offset:
            columns.append(f"Offset:{msg.offset()}".encode())
        if self.print_headers:
            headers = msg.headers() or []
            if headers:
                columns.append(
                    self.headers_separator.join(
                        k.encode()
                        + self.headers_key_separator
                        + (self.null_literal if v is None else bytes(v))
                        for k, v in headers
                    )
                )
            else:
                columns.append(b"NO_HEADERS")
        if self.print_key:
            key = msg.key()
            columns.append(self.null_literal if key is None else key)
        if self.print_value:
            value = msg.value()
            columns.append(self.null_literal if value is None else value)
        return self.key_separator.join(columns) + self.line_separator


def _start_offset(offset: str | None, from_beginning: bool) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if offset is None:
        return OFFSET_BEGINNING if from_beginning else OFFSET_END
    word = offset.strip().lower()
    if word == "earliest":
        return OFFSET_BEGINNING
    if word == "latest":
        return OFFSET_END
    try:
        value = int(word)
    except ValueError:
        fail(f"Invalid --offset '{offset}': use earliest, latest or a non-negative number.")
    if value < 0:
        fail(f"Invalid --offset '{offset}': use earliest, latest or a non-negative number.")
    return value


def console_consumer(
    topic: Annotated[str, typer.Option("--topic", help="Topic to read.")],
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the earliest offset instead of the end.")
    ] = False,
    partition: Annotated[int | None, typer.Option("--partition", help="Read only this partition.")] = None,
    offset: Annotated[
        str | None, typer.Option("--offset", help="earliest, latest or an offset (needs --partition).")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", help="Exit after this many records.")
    ] = None,
    timeout_ms: Annotated[
        int | None, typer.Option("--timeout-ms", help="Exit when no record arrives for this long.")
    ] = None,
    group: Annotated[
        str | None, typer.Option("--group", help="Consumer group id: subscribe and commit offsets.")
    ] = None,
    property_: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            help="Formatter setting key=value: print.key, print.timestamp, print.headers, print.partition, "
            "print.offset, print.value, key.separator, line.separator, headers.separator, "
            "headers.key.separator, null.literal.",
        ),
    ] = None,
    consumer_property: Annotated[
        list[str] | None, typer.Option("--consumer-property", help="Consumer setting key=value (repeatable).")
    ] = None,
    consumer_config: Annotated[
        Path | None, typer.Option("--consumer.config", "--consumer-config", help="Consumer properties file.")
    ] = None,
    isolation_level: Annotated[
        str, typer.Option("--isolation-level", help="read_uncommitted (default) or read_committed.")
    ] = "read_uncommitted",
) -> None:
    """Print records from a topic to stdout."""
    with cli_errors():
        if offset is not None and partition is None:
            fail("--offset needs --partition (or use --from-beginning).")
        if group is not None and partition is not None:
            fail("--group cannot be combined with --partition; the group decides the assignment.")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            fail(f"Invalid --isolation-level '{isolation_level}'.")
        if max_messages is not None and max_messages < 0:
            fail("--max-messages must not be negative.")
        formatter = MessageFormatter.from_properties(parse_key_values(property_ or [], "--property"))
        overrides = {"isolation.level": isolation_level, "enable.partition.eof": "false"}
        if group is not None:
            overrides.update(
                {
                    "group.id": group,
                    "auto.offset.reset": "earliest" if from_beginning else "latest",
                    "enable.auto.commit": "true",
                }
            )
        else:
            # librdkafka insists on a group.id even for assign(); it is never used
            # because nothing is committed and every start offset is explicit.
            overrides.update({"group.id": "strom-console-consumer", "enable.auto.commit": "false"})
        overrides.update(parse_key_values(consumer_property or [], "--consumer-property"))
        config = client_config(bootstrap_server, consumer_config, overrides)
        start = _start_offset(offset, from_beginning)
        _consume(config, topic, group, partition, start, max_messages, timeout_ms, formatter)


def _consume(
    config: dict[str, Any],
    topic: str,
    group: str | None,
    partition: int | None,
    start: int,
    max_messages: int | None,
    timeout_ms: int | None,
    formatter: MessageFormatter,
) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    try:
        consumer = Consumer(config)
    except KafkaException as exc:
        fail(f"Invalid consumer configuration: {exc.args[0].str()}")
    # SIGTERM (kill, container stop) ends the tool like Ctrl-C: summary printed, consumer closed.
    signal.signal(signal.SIGTERM, _interrupt)
    out: BinaryIO = sys.stdout.buffer
    count = 0
    joined: list[bool] = []
    warned = False
    try:
        ensure_reachable(consumer, config["bootstrap.servers"])
        partitions = topic_partitions(consumer, topic, config["bootstrap.servers"])
        if group is None:
            if partition is not None:
                if partition not in partitions:
                    fail(f"Topic '{topic}' has no partition {partition} (it has {len(partitions)}).")
                partitions = [partition]
            consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        else:
            consumer.subscribe([topic], on_assign=lambda _c, _parts: joined.append(True))
        idle_limit = timeout_ms / 1000.0 if timeout_ms is not None else None
        last_seen = started = time.monotonic()
        try:
            while max_messages is None or count < max_messages:
                wait = 0.5
                if idle_limit is not None:
                    left = idle_limit - (time.monotonic() - last_seen)
                    if left <= 0:
                        break
                    wait = min(wait, left)
                want = 500 if max_messages is None else min(500, max_messages - count)
                for msg in consumer.consume(num_messages=want, timeout=wait):
                    err = msg.error()
                    if err is not None:
                        _handle_error(err, topic)
                        continue
                    out.write(formatter.format(msg))
                    count += 1
                    last_seen = time.monotonic()
                out.flush()
                if group is not None and not joined and not warned and time.monotonic() - started > 15:
                    print_warning(f"Still waiting to join consumer group '{group}' after 15 s.")
                    warned = True
        finally:
            # Reported on every exit, Ctrl-C included, like Kafka's tool.
            sys.stderr.write(f"Processed a total of {count} messages\n")
            sys.stderr.flush()
    finally:
        try:
            consumer.close()
        except (KafkaException, RuntimeError):
            pass
    return count


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _handle_error(err: Any, topic: str) -> None:
    """Fatal errors stop the consumer; transient ones are reported and retried."""
    from confluent_kafka import KafkaException

    if err.name() == "_PARTITION_EOF":
        return
    if err.fatal() or err.name() in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "TOPIC_AUTHORIZATION_FAILED"):
        fail(describe_kafka_error(KafkaException(err), topic))
    print_warning(describe_kafka_error(KafkaException(err), topic))
