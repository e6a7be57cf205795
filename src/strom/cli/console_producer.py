"""`strom console-producer`: send stdin lines as records (like kafka-console-producer.sh).

Line parsing follows Kafka's LineMessageReader: optional headers first (up to
`headers.delimiter`), then an optional key (up to `key.separator`), then the value.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
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
    print_error,
)

_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass
class LineFormat:
    """How one input line splits into headers, key and value (Kafka property names)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineFormat:
        """Read the reader's `--property` settings, unescaping \\t and \\n like Kafka."""

        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        def sep(name: str, default: str) -> bytes:
            return _unescape(props.get(name, default)).encode()

        marker = props.get("null.marker")
        fmt = cls(
            parse_key=flag("parse.key"),
            key_separator=sep("key.separator", "\t"),
            parse_headers=flag("parse.headers"),
            headers_delimiter=sep("headers.delimiter", "\t"),
            headers_separator=sep("headers.separator", ","),
            headers_key_separator=sep("headers.key.separator", ":"),
            null_marker=_unescape(marker).encode() if marker is not None else None,
            ignore_error=flag("ignore.error"),
        )
        for name, what in (
            (fmt.key_separator, "key.separator"),
            (fmt.headers_delimiter, "headers.delimiter"),
            (fmt.headers_separator, "headers.separator"),
            (fmt.headers_key_separator, "headers.key.separator"),
        ):
            if not name:
                fail(f"--property {what} must not be empty.")
        if fmt.parse_headers and fmt.headers_separator == fmt.headers_key_separator:
            fail("headers.separator and headers.key.separator must differ.")
        return fmt

    def parse(
        self, line: bytes, number: int
    ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """Split one line into (key, value, headers); raises ValueError on a malformed line."""
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"No headers delimiter found on line number {number}: '{_show(line)}'")
                head, tail = b"", rest
            rest = tail
            if head and head != self.null_marker:
                for item in head.split(self.headers_separator):
                    hkey, hsep, hvalue = item.partition(self.headers_key_separator)
                    if not hsep and not self.ignore_error:
                        raise ValueError(
                            f"No header key separator found in pair '{_show(item)}' on line number {number}"
                        )
                    if hkey == self.null_marker:
                        raise ValueError(f"Header keys cannot be the null marker, on line number {number}")
                    value = hvalue if hsep else None
                    if value is not None and value == self.null_marker:
                        value = None
                    headers.append((hkey.decode("utf-8", "replace"), value))
        key: bytes | None = None
        if self.parse_key:
            kpart, sep, vpart = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"No key separator found on line number {number}: '{_show(line)}'")
                kpart, vpart = b"", rest
            key = None if kpart == self.null_marker else kpart
            rest = vpart
        value: bytes | None = None if rest == self.null_marker else rest
        return key, value, headers


def _unescape(text: str) -> str:
    """Let users write `\\t` or `\\n` on the command line for separators."""
    return text.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


def _show(line: bytes) -> str:
    return line.decode("utf-8", "replace")


def console_producer(
    topic: Annotated[str, typer.Option("--topic", help="Topic to write to.")],
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    property_: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            help="Line reader setting key=value: parse.key, key.separator, parse.headers, "
            "headers.delimiter, headers.separator, headers.key.separator, null.marker, ignore.error.",
        ),
    ] = None,
    producer_property: Annotated[
        list[str] | None, typer.Option("--producer-property", help="Producer setting key=value (repeatable).")
    ] = None,
    producer_config: Annotated[
        Path | None, typer.Option("--producer.config", "--producer-config", help="Producer properties file.")
    ] = None,
    compression_codec: Annotated[
        str | None, typer.Option("--compression-codec", help="none, gzip, snappy, lz4 or zstd.")
    ] = None,
    request_required_acks: Annotated[
        str | None, typer.Option("--request-required-acks", help="acks: 0, 1, -1 or all (default -1).")
    ] = None,
    sync: Annotated[bool, typer.Option("--sync", help="Wait for each record to be acknowledged.")] = False,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Messages per batch.")] = None,
    timeout: Annotated[
        int | None, typer.Option("--timeout", help="linger.ms: how long to wait to fill a batch.")
    ] = None,
    message_send_max_retries: Annotated[
        int | None, typer.Option("--message-send-max-retries", help="Retries before giving up on a record.")
    ] = None,
) -> None:
    """Read lines from stdin and send each as a record."""
    with cli_errors():
        fmt = LineFormat.from_properties(parse_key_values(property_ or [], "--property"))
        overrides: dict[str, str] = {}
        if compression_codec is not None:
            codec = compression_codec.lower()
            if codec not in _CODECS:
                fail(f"Unknown compression codec '{compression_codec}': use one of {', '.join(_CODECS)}.")
            overrides["compression.type"] = codec
        acks = request_required_acks if request_required_acks is not None else "-1"
        if acks not in ("0", "1", "-1", "all"):
            fail(f"Invalid --request-required-acks '{acks}': use 0, 1, -1 or all.")
        overrides["acks"] = acks
        overrides["linger.ms"] = str(timeout if timeout is not None else 5)
        if batch_size is not None:
            overrides["batch.num.messages"] = str(batch_size)
        if message_send_max_retries is not None:
            overrides["retries"] = str(message_send_max_retries)
        overrides.update(parse_key_values(producer_property or [], "--producer-property"))
        config = client_config(bootstrap_server, producer_config, overrides)
        sent = _run(config, topic, fmt, sys.stdin.buffer, sync)
        if sent.failed:
            fail(f"{sent.failed} of {sent.total} records could not be delivered.")


@dataclass
class _Outcome:
    total: int = 0
    failed: int = 0
    reported: int = 0


def _run(config: dict[str, Any], topic: str, fmt: LineFormat, stream: BinaryIO, sync: bool) -> _Outcome:
    from confluent_kafka import KafkaException, Producer

    outcome = _Outcome()

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            return
        outcome.failed += 1
        # One line per failure is useful; thousands of identical lines are not.
        if outcome.reported < 5:
            print_error(
                f"Could not deliver a record to '{topic}': {describe_kafka_error(KafkaException(err), topic)}"
            )
            outcome.reported += 1

    try:
        producer = Producer(config)
    except KafkaException as exc:
        fail(f"Invalid producer configuration: {exc.args[0].str()}")
    ensure_reachable(producer, config["bootstrap.servers"])
    _check_topic(producer, topic)
    number = 0
    try:
        for raw in stream:
            number += 1
            line = raw.rstrip(b"\n")
            if line.endswith(b"\r"):
                line = line[:-1]
            try:
                key, value, headers = fmt.parse(line, number)
            except ValueError as exc:
                fail(str(exc))
            _produce(producer, topic, key, value, headers, on_delivery)
            outcome.total += 1
            if sync:
                producer.flush()
            else:
                producer.poll(0)
    finally:
        remaining = producer.flush(30)
        if remaining:
            outcome.failed += remaining
            print_error(f"{remaining} records were still unsent after waiting 30 s.")
    return outcome


def _check_topic(producer: Any, topic: str) -> None:
    """Fail fast on a missing topic instead of retrying until message.timeout.ms.

    The metadata request may itself create the topic when the broker has
    auto.create.topics.enable, exactly as it would for Kafka's console producer.
    """
    metadata = producer.list_topics(topic, timeout=10)
    info = metadata.topics.get(topic)
    if info is None or (
        info.error is not None and info.error.name() in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC")
    ):
        fail(f"Topic '{topic}' does not exist (and the broker did not create it).")


def _produce(
    producer: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    on_delivery: Any,
) -> None:
    """produce(), waiting for room when librdkafka's local queue is full."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers or None, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.1)
