"""`strom producer-perf-test` and `strom consumer-perf-test` (like Kafka's perf tools).

Output lines keep Kafka's wording and columns so that numbers can be compared with a
Kafka broker run side by side, and parsed by the same scripts.
"""

from __future__ import annotations

import json
import random
import string
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

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
    print_warning,
    topic_partitions,
    write_out,
)

MB = 1024 * 1024
REPORT_INTERVAL_S = 5.0
# Above this many records latencies are sampled, as Kafka does, to bound memory.
MAX_LATENCY_SAMPLES = 500_000


@dataclass
class ProducerStats:
    """Latency and throughput bookkeeping, in windows and in total."""

    num_records: int
    start: float = field(default_factory=time.monotonic)
    count: int = 0
    bytes: int = 0
    total_latency: float = 0.0
    max_latency: float = 0.0
    window_start: float = field(default_factory=time.monotonic)
    window_count: int = 0
    window_bytes: int = 0
    window_total_latency: float = 0.0
    window_max_latency: float = 0.0
    samples: list[float] = field(default_factory=list)
    sample_every: int = 1

    def __post_init__(self) -> None:
        self.sample_every = max(1, self.num_records // MAX_LATENCY_SAMPLES)

    def record(self, latency_ms: float, size: int) -> None:
        """Account for one acknowledged record."""
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.count % self.sample_every == 0:
            self.samples.append(latency_ms)

    def maybe_report(self, now: float) -> None:
        """Print a progress line every REPORT_INTERVAL_S seconds."""
        elapsed = now - self.window_start
        if elapsed < REPORT_INTERVAL_S or self.window_count == 0:
            return
        write_out(
            f"{self.window_count} records sent, {self.window_count / elapsed:.1f} records/sec "
            f"({self.window_bytes / elapsed / MB:.2f} MB/sec), "
            f"{self.window_total_latency / self.window_count:.1f} ms avg latency, "
            f"{self.window_max_latency:.1f} ms max latency.\n"
        )
        sys.stdout.flush()
        self.window_start = now
        self.window_count = 0
        self.window_bytes = 0
        self.window_total_latency = 0.0
        self.window_max_latency = 0.0

    def summary(self, now: float) -> str:
        """Kafka's final line: totals plus latency percentiles."""
        elapsed = max(now - self.start, 1e-9)
        ordered = sorted(self.samples)

        def pct(p: float) -> int:
            if not ordered:
                return 0
            return int(ordered[min(int(p * len(ordered)), len(ordered) - 1)])

        avg = self.total_latency / self.count if self.count else 0.0
        return (
            f"{self.count} records sent, {self.count / elapsed:f} records/sec "
            f"({self.bytes / elapsed / MB:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{self.max_latency:.2f} ms max latency, {pct(0.5)} ms 50th, {pct(0.95)} ms 95th, "
            f"{pct(0.99)} ms 99th, {pct(0.999)} ms 99.9th.\n"
        )


def _payloads(record_size: int | None, payload_file: Path | None, delimiter: str) -> list[bytes]:
    """One random payload reused for every record (as Kafka does), or lines of a file."""
    if payload_file is not None:
        try:
            text = payload_file.read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"Could not read payload file '{payload_file}': {exc.strerror}.")
        delim = delimiter.replace("\\n", "\n").replace("\\t", "\t")
        payloads = [p.encode() for p in text.split(delim) if p]
        if not payloads:
            fail(f"Payload file '{payload_file}' holds no payloads.")
        return payloads
    if record_size is None:
        fail("Either --record-size or --payload-file must be given.")
    if record_size < 0:
        fail("--record-size must not be negative.")
    rng = random.Random()
    return [bytes(rng.choice(string.ascii_uppercase.encode()) for _ in range(record_size))]


def _extra_props(ctx: typer.Context) -> list[str]:
    """Words after `--producer-props a=1` that click left over: `b=2 c=3`."""
    extras: list[str] = []
    for word in ctx.args:
        if word.startswith("-") or "=" not in word:
            fail(f"Unexpected argument '{word}' (see `strom producer-perf-test --help`).")
        extras.append(word)
    return extras


def producer_perf_test(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", help="Topic to produce to.")],
    num_records: Annotated[int, typer.Option("--num-records", help="Number of records to send.")],
    throughput: Annotated[
        float, typer.Option("--throughput", help="Maximum records/sec; -1 means no limit.")
    ],
    record_size: Annotated[int | None, typer.Option("--record-size", help="Bytes per record.")] = None,
    producer_props: Annotated[
        list[str] | None,
        typer.Option(
            "--producer-props",
            help="Producer settings: --producer-props bootstrap.servers=host:port acks=1 linger.ms=5 ...",
        ),
    ] = None,
    producer_config: Annotated[
        Path | None, typer.Option("--producer.config", "--producer-config", help="Producer properties file.")
    ] = None,
    bootstrap_server: Annotated[
        str | None, typer.Option("--bootstrap-server", help="Broker host:port (else from --producer-props).")
    ] = None,
    payload_file: Annotated[
        Path | None,
        typer.Option("--payload-file", help="Read payloads from this file instead of random bytes."),
    ] = None,
    payload_delimiter: Annotated[
        str, typer.Option("--payload-delimiter", help="Separator between payloads in --payload-file.")
    ] = "\\n",
    print_metrics: Annotated[
        bool, typer.Option("--print-metrics", help="Print the client's metrics at the end.")
    ] = False,
) -> None:
    """Measure produce throughput and latency."""
    with cli_errors():
        if num_records < 0:
            fail("--num-records must not be negative.")
        if throughput == 0:
            fail("--throughput must be positive, or -1 for no limit.")
        props = parse_key_values([*(producer_props or []), *_extra_props(ctx)], "--producer-props")
        if producer_config is None and not props and bootstrap_server is None:
            fail("Either --producer-props or --producer.config must be given.")
        payloads = _payloads(record_size, payload_file, payload_delimiter)
        config = client_config(bootstrap_server, producer_config, props)
        _run_producer(config, topic, num_records, throughput, payloads, print_metrics)


def _run_producer(
    config: dict[str, Any],
    topic: str,
    num_records: int,
    throughput: float,
    payloads: list[bytes],
    print_metrics: bool,
) -> None:
    from confluent_kafka import KafkaException, Producer

    stats = ProducerStats(num_records)
    failures = [0]
    last_metrics: list[dict[str, Any]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures[0] += 1
            if failures[0] <= 5:
                print_error(f"Record not delivered: {describe_kafka_error(KafkaException(err), topic)}")
            return
        latency = msg.latency()
        stats.record((latency or 0.0) * 1000.0, len(msg.value() or b""))

    def on_stats(text: str) -> None:
        last_metrics[:] = [json.loads(text)]

    config = dict(config)
    config["on_delivery"] = on_delivery
    if print_metrics:
        config.setdefault("statistics.interval.ms", "1000")
        config["stats_cb"] = on_stats
    try:
        producer = Producer(config)
    except KafkaException as exc:
        fail(f"Invalid producer configuration: {exc.args[0].str()}")
    ensure_reachable(producer, config["bootstrap.servers"])
    topic_partitions(producer, topic, config["bootstrap.servers"])

    rng = random.Random()
    start = time.monotonic()
    stats.start = stats.window_start = start
    single = payloads[0] if len(payloads) == 1 else None
    for sent in range(num_records):
        if throughput > 0:
            # Throttle like Kafka's ThroughputThrottler, serving callbacks while waiting.
            # Sleeping below ~2 ms is not precise, so small deficits accumulate first.
            due = start + sent / throughput
            while (ahead := due - time.monotonic()) >= 0.002:
                producer.poll(min(ahead, 0.05))
        value = single if single is not None else rng.choice(payloads)
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        stats.maybe_report(time.monotonic())
    while producer.flush(0.5) > 0:
        stats.maybe_report(time.monotonic())
    write_out(stats.summary(time.monotonic()))
    if print_metrics:
        producer.poll(1.1)
        _print_metrics(last_metrics[0] if last_metrics else {})
    if failures[0]:
        fail(f"{failures[0]} of {num_records} records could not be delivered.")


def _print_metrics(stats: dict[str, Any]) -> None:
    """Flatten librdkafka's statistics JSON into Kafka-style `name : value` lines."""
    rows: list[tuple[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}:{key}" if prefix else str(key), inner)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            rows.append((prefix, value))

    for key in ("msg_cnt", "msg_size", "tx", "tx_bytes", "rx", "rx_bytes", "txmsgs", "txmsg_bytes", "rxmsgs"):
        if key in stats:
            rows.append((f"client:{key}", stats[key]))
    for name, broker in (stats.get("brokers") or {}).items():
        for key in ("rtt", "int_latency", "outbuf_latency", "throttle"):
            walk(f"broker[{name}]:{key}", broker.get(key, {}))
    if not rows:
        write_out("No metrics were reported by the client.\n")
        return
    width = max(len(name) for name, _ in rows)
    write_out(f"\n{'Metric Name':<{width}}  Value\n")
    for name, value in rows:
        write_out(f"{name:<{width}} : {value}\n")


# consumer-perf-test -------------------------------------------------------------------

HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
DETAILED_HEADER = (
    "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def _format_ms(epoch_ms: float) -> str:
    """Kafka's default date format, yyyy-MM-dd HH:mm:ss:SSS."""
    moment = datetime.fromtimestamp(epoch_ms / 1000.0)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{int(epoch_ms) % 1000:03d}"


def consumer_perf_test(
    topic: Annotated[str, typer.Option("--topic", help="Topic to consume.")],
    messages: Annotated[int, typer.Option("--messages", help="Number of records to consume.")],
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    timeout: Annotated[
        int, typer.Option("--timeout", help="Give up after this many ms without a record.")
    ] = 10_000,
    fetch_size: Annotated[
        int, typer.Option("--fetch-size", help="Bytes to fetch per partition per request.")
    ] = 1_048_576,
    group: Annotated[
        str | None, typer.Option("--group", help="Consumer group (subscribe); default: assign, no group.")
    ] = None,
    from_latest: Annotated[
        bool, typer.Option("--from-latest", help="Start at the end instead of the beginning.")
    ] = False,
    consumer_config: Annotated[
        Path | None, typer.Option("--consumer.config", "--consumer-config", help="Consumer properties file.")
    ] = None,
    hide_header: Annotated[
        bool, typer.Option("--hide-header", help="Do not print the column names.")
    ] = False,
    show_detailed_stats: Annotated[
        bool, typer.Option("--show-detailed-stats", help="Print a row every --reporting-interval.")
    ] = False,
    reporting_interval: Annotated[
        int, typer.Option("--reporting-interval", help="ms between detailed rows.")
    ] = 5000,
    print_metrics: Annotated[
        bool, typer.Option("--print-metrics", help="Print client metrics at the end.")
    ] = False,
) -> None:
    """Measure consume throughput."""
    with cli_errors():
        if messages < 0:
            fail("--messages must not be negative.")
        overrides = {
            "max.partition.fetch.bytes": str(fetch_size),
            "enable.partition.eof": "false",
            "auto.offset.reset": "latest" if from_latest else "earliest",
        }
        if group is None:
            overrides.update({"group.id": "strom-consumer-perf-test", "enable.auto.commit": "false"})
        else:
            overrides["group.id"] = group
        config = client_config(bootstrap_server, consumer_config, overrides)
        run = _ConsumerRun(config, topic, messages, timeout, group, from_latest, print_metrics)
        run.execute(show_detailed_stats, reporting_interval / 1000.0, hide_header)


@dataclass
class _ConsumerRun:
    config: dict[str, Any]
    topic: str
    messages: int
    timeout_ms: int
    group: str | None
    from_latest: bool
    print_metrics: bool
    count: int = 0
    bytes: int = 0
    rebalance_ms: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)

    def execute(self, detailed: bool, interval_s: float, hide_header: bool) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

        config = dict(self.config)
        if self.print_metrics:
            config.setdefault("statistics.interval.ms", "1000")
            config["stats_cb"] = lambda text: self.metrics.update(json.loads(text))
        try:
            consumer = Consumer(config)
        except KafkaException as exc:
            fail(f"Invalid consumer configuration: {exc.args[0].str()}")
        try:
            ensure_reachable(consumer, config["bootstrap.servers"])
            partitions = topic_partitions(consumer, self.topic, config["bootstrap.servers"])
            if not hide_header:
                write_out((DETAILED_HEADER if detailed else HEADER) + "\n")
            start_wall = time.time() * 1000.0
            start = time.monotonic()
            assigned = [self.group is None]
            if self.group is None:
                where = OFFSET_END if self.from_latest else OFFSET_BEGINNING
                consumer.assign([TopicPartition(self.topic, p, where) for p in partitions])
            else:

                def on_assign(_consumer: Any, _parts: Any) -> None:
                    if not assigned[0]:
                        self.rebalance_ms = (time.monotonic() - start) * 1000.0
                        assigned[0] = True

                consumer.subscribe([self.topic], on_assign=on_assign)
            last_record = time.monotonic()
            last_report = start
            report_count, report_bytes = 0, 0
            while self.count < self.messages and (time.monotonic() - last_record) * 1000.0 <= self.timeout_ms:
                batch = consumer.consume(num_messages=min(1000, self.messages - self.count), timeout=0.2)
                for msg in batch:
                    if msg.error() is not None:
                        if msg.error().fatal():
                            fail(describe_kafka_error(KafkaException(msg.error()), self.topic))
                        continue
                    self.count += 1
                    self.bytes += len(msg.value() or b"") + len(msg.key() or b"")
                if batch:
                    last_record = time.monotonic()
                now = time.monotonic()
                if detailed and now - last_report >= interval_s:
                    self._detailed_row(now, last_report, report_count, report_bytes)
                    last_report, report_count, report_bytes = now, self.count, self.bytes
            end = time.monotonic()
            if self.count < self.messages:
                print_warning(
                    "Exiting before consuming the expected number of messages: timeout "
                    f"({self.timeout_ms} ms) exceeded. You can use the --timeout option to increase the timeout."
                )
            if not detailed:
                self._summary(start_wall, start, end)
            if self.print_metrics:
                consumer.poll(1.1)
                _print_metrics(self.metrics)
        finally:
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                pass

    def _summary(self, start_wall: float, start: float, end: float) -> None:
        elapsed_s = max(end - start, 1e-9)
        mb = self.bytes / MB
        fetch_ms = max(elapsed_s * 1000.0 - self.rebalance_ms, 0.0)
        fetch_s = fetch_ms / 1000.0
        write_out(
            f"{_format_ms(start_wall)}, {_format_ms(start_wall + elapsed_s * 1000.0)}, {mb:.4f}, "
            f"{mb / elapsed_s:.4f}, {self.count}, {self.count / elapsed_s:.4f}, {int(self.rebalance_ms)}, "
            f"{int(fetch_ms)}, {mb / fetch_s if fetch_s else 0.0:.4f}, "
            f"{self.count / fetch_s if fetch_s else 0.0:.4f}\n"
        )

    def _detailed_row(self, now: float, since: float, count_before: int, bytes_before: int) -> None:
        window_s = max(now - since, 1e-9)
        mb = (self.bytes - bytes_before) / MB
        count = self.count - count_before
        write_out(
            f"{_format_ms(time.time() * 1000.0)}, 0, {self.bytes / MB:.4f}, {mb / window_s:.4f}, "
            f"{self.count}, {count / window_s:.4f}, {int(self.rebalance_ms)}, {int(window_s * 1000)}, "
            f"{mb / window_s:.4f}, {count / window_s:.4f}\n"
        )
        sys.stdout.flush()
