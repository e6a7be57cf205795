"""The `strom` tools against a real broker process, checked on what a user sees."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from strom.cli import main as cli_main


def strom(*args: str, stdin: str | None = None, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m strom.cli.main ...` the way a user runs `strom ...`."""
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def test_unreachable_broker_is_one_readable_line() -> None:
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    result = strom("topics", "--bootstrap-server", f"127.0.0.1:{port}", "--list", STROM_CONNECT_TIMEOUT="2")
    assert result.returncode == 1
    assert f"Could not reach a broker at 127.0.0.1:{port} within 2 s" in result.stderr
    assert "Traceback" not in result.stderr


def test_topics_create_list_describe_alter_delete(broker) -> None:
    b = broker.bootstrap
    created = ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-orders", "--partitions", "3",
                       "--replication-factor", "1", "--config", "retention.ms=3600000"))
    assert created.stdout.strip() == "Created topic cli-orders."

    again = strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-orders", "--partitions", "3")
    assert again.returncode == 1
    assert "Topic 'cli-orders' already exists." in again.stderr
    assert "Traceback" not in again.stderr
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-orders", "--if-not-exists"))

    assert "cli-orders" in ok(strom("topics", "--bootstrap-server", b, "--list")).stdout.splitlines()

    described = ok(strom("topics", "--bootstrap-server", b, "--describe", "--topic", "cli-orders")).stdout
    lines = described.splitlines()
    assert re.match(r"Topic: cli-orders\tTopicId: \S+\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ", lines[0])
    assert "retention.ms=3600000" in lines[0]
    for p in range(3):
        assert re.fullmatch(rf"\tTopic: cli-orders\tPartition: {p}\tLeader: \d+\tReplicas: \d+\tIsr: \d+", lines[1 + p])

    ok(strom("topics", "--bootstrap-server", b, "--alter", "--topic", "cli-orders", "--partitions", "4"))
    described = ok(strom("topics", "--bootstrap-server", b, "--describe", "--topic", "cli-orders")).stdout
    assert "PartitionCount: 4" in described

    ok(strom("topics", "--bootstrap-server", b, "--delete", "--topic", "cli-orders"))
    assert "cli-orders" not in ok(strom("topics", "--bootstrap-server", b, "--list")).stdout.splitlines()
    missing = strom("topics", "--bootstrap-server", b, "--describe", "--topic", "cli-orders")
    assert missing.returncode == 1 and "Topic 'cli-orders' does not exist." in missing.stderr


def test_configs_alter_and_describe(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-configs", "--partitions", "1"))
    altered = ok(strom("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cli-configs",
                       "--alter", "--add-config", "retention.ms=7200000,cleanup.policy=[delete]"))
    assert "Completed updating config for topic cli-configs." in altered.stdout
    described = ok(strom("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name",
                         "cli-configs", "--describe")).stdout
    assert described.splitlines()[0] == "Dynamic configs for topic cli-configs are:"
    assert "  retention.ms=7200000 sensitive=false" in described

    ok(strom("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cli-configs",
             "--alter", "--delete-config", "retention.ms"))
    described = ok(strom("configs", "--bootstrap-server", b, "--topic", "cli-configs", "--describe")).stdout
    assert "retention.ms=" not in described
    everything = ok(strom("configs", "--bootstrap-server", b, "--topic", "cli-configs", "--describe", "--all")).stdout
    assert "All configs for topic cli-configs are:" in everything
    assert "  retention.ms=" in everything


LINES = "source:web,trace:42\tuser-1:clicked buy\n\tuser-2:viewed cart\nsource:app\tuser-1:logged out\n"


def test_console_round_trip_with_keys_and_headers(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-events", "--partitions", "1"))
    ok(strom("console-producer", "--bootstrap-server", b, "--topic", "cli-events",
             "--property", "parse.key=true", "--property", "key.separator=:",
             "--property", "parse.headers=true", "--request-required-acks", "all", stdin=LINES))

    result = ok(strom("console-consumer", "--bootstrap-server", b, "--topic", "cli-events", "--from-beginning",
                      "--max-messages", "3", "--timeout-ms", "20000",
                      "--property", "print.key=true", "--property", "print.headers=true",
                      "--property", "print.timestamp=true", "--property", "print.offset=true"))
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"CreateTime:\d{13}\tOffset:0\tsource:web,trace:42\tuser-1\tclicked buy", lines[0])
    assert re.fullmatch(r"CreateTime:\d{13}\tOffset:1\tNO_HEADERS\tuser-2\tviewed cart", lines[1])
    assert lines[2].endswith("\tOffset:2\tsource:app\tuser-1\tlogged out")
    assert "Processed a total of 3 messages" in result.stderr

    # A partition and offset of one's choosing, plain value output, exit on idle.
    tail = ok(strom("console-consumer", "--bootstrap-server", b, "--topic", "cli-events", "--partition", "0",
                    "--offset", "1", "--timeout-ms", "1500"))
    assert tail.stdout.splitlines() == ["viewed cart", "logged out"]
    assert "Processed a total of 2 messages" in tail.stderr

    offsets = ok(strom("get-offsets", "--bootstrap-server", b, "--topic", "cli-events")).stdout
    assert offsets.splitlines() == ["cli-events:0:3"]
    earliest = ok(strom("get-offsets", "--bootstrap-server", b, "--topic", "cli-events", "--time", "-2")).stdout
    assert earliest.splitlines() == ["cli-events:0:0"]


def test_malformed_input_line_is_reported(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-bad-lines", "--partitions", "1"))
    result = strom("console-producer", "--bootstrap-server", b, "--topic", "cli-bad-lines",
                   "--property", "parse.key=true", stdin="no separator here\n")
    assert result.returncode == 1
    assert "No key separator found on line number 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_get_offsets_over_partitions(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-offsets", "--partitions", "2"))
    ok(strom("console-producer", "--bootstrap-server", b, "--topic", "cli-offsets",
             "--property", "parse.key=true", "--property", "key.separator=:",
             stdin="".join(f"key-{i}:value-{i}\n" for i in range(20))))
    latest = ok(strom("get-offsets", "--bootstrap-server", b, "--topic", "cli-offsets")).stdout.splitlines()
    assert [line.rsplit(":", 1)[0] for line in latest] == ["cli-offsets:0", "cli-offsets:1"]
    assert sum(int(line.rsplit(":", 1)[1]) for line in latest) == 20
    only_one = ok(strom("get-offsets", "--bootstrap-server", b, "--topic", "cli-offsets", "--partitions", "1",
                        "--time", "earliest")).stdout
    assert only_one.splitlines() == ["cli-offsets:1:0"]


def test_dump_log_reads_the_brokers_segment(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-dump", "--partitions", "1"))
    ok(strom("console-producer", "--bootstrap-server", b, "--topic", "cli-dump", "--compression-codec", "gzip",
             "--property", "parse.key=true", "--property", "key.separator=:", "--sync",
             stdin=f"alpha:first record {'x' * 200}\nbeta:second record {'y' * 200}\n"))
    segment = Path(broker.data_dir) / "cli-dump-0" / "00000000000000000000.log"
    assert segment.exists(), sorted(p.name for p in Path(broker.data_dir).iterdir())
    result = ok(strom("dump-log", "--files", str(segment), "--print-data-log"))
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dumping {segment}"
    assert lines[1] == "Log starting offset: 0"
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 2  # --sync sends each line as its own batch
    # librdkafka only keeps compression when it makes the batch smaller, hence long values.
    assert all("compresscodec: gzip" in line and line.endswith("isvalid: true") for line in batches)
    assert any(" key: alpha payload: first record" in line for line in lines)
    assert any(line.startswith("| offset: 1 ") and "payload: second record" in line for line in lines)

    index = segment.with_suffix(".index")
    if index.exists():
        check = ok(strom("dump-log", "--files", str(index), "--index-sanity-check"))
        assert "passed sanity check" in check.stdout


def test_perf_tools_finish_with_a_summary(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-perf", "--partitions", "2"))
    produced = ok(strom("producer-perf-test", "--topic", "cli-perf", "--num-records", "2000", "--record-size", "100",
                        "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "acks=1", "linger.ms=5",
                        "batch.size=1048576"))
    summary = produced.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"2000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
        r"\d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.",
        summary,
    )
    consumed = ok(strom("consumer-perf-test", "--bootstrap-server", b, "--topic", "cli-perf", "--messages", "2000",
                        "--timeout", "20000"))
    header, row = consumed.stdout.strip().splitlines()[-2:]
    assert header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec")
    columns = row.split(", ")
    assert len(columns) == 10 and columns[4] == "2000"
    assert float(columns[2]) == pytest.approx(2000 * 100 / 1024 / 1024, rel=1e-3)


def test_missing_optional_tool_is_explained() -> None:
    app = typer.Typer()

    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def tool(ctx: typer.Context) -> None:
        cli_main._delegate(ctx, "strom.cli._no_such_tool", "run", "no-such-tool")

    result = CliRunner().invoke(app, ["--anything"])
    assert result.exit_code == 1
    assert "`strom no-such-tool` is not available" in result.output


# Parsing and formatting rules, checked without a broker. -------------------------------


class _FakeMessage:
    """Just enough of confluent_kafka.Message for the formatter."""

    def __init__(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None):
        self._key, self._value, self._headers = key, value, headers

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_700_000_000_000

    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 41


def test_line_reader_follows_kafka_rules() -> None:
    from strom.cli.console_producer import LineFormat

    fmt = LineFormat.from_properties({"parse.key": "true", "key.separator": ":", "parse.headers": "true",
                                      "null.marker": "NULL"})
    assert fmt.parse(b"a:1,b:NULL\tk:v:w", 1) == (b"k", b"v:w", [("a", b"1"), ("b", None)])
    assert fmt.parse(b"\tNULL:value", 2) == (None, b"value", [])
    with pytest.raises(ValueError, match="No headers delimiter found on line number 3"):
        fmt.parse(b"k:v", 3)
    with pytest.raises(ValueError, match="No header key separator found in pair 'oops' on line number 4"):
        fmt.parse(b"oops\tk:v", 4)
    plain = LineFormat.from_properties({})
    assert plain.parse(b"just a value\twith a tab", 1) == (None, b"just a value\twith a tab", [])


def test_message_formatter_columns_in_kafka_order() -> None:
    from strom.cli.console_consumer import MessageFormatter

    every = MessageFormatter.from_properties({f"print.{k}": "true" for k in
                                              ("timestamp", "partition", "offset", "headers", "key")})
    msg = _FakeMessage(b"k", b"v", [("h1", b"x"), ("h2", None)])
    assert every.format(msg) == b"CreateTime:1700000000000\tPartition:2\tOffset:41\th1:x,h2:null\tk\tv\n"
    custom = MessageFormatter.from_properties({"print.key": "true", "key.separator": " => ",
                                               "print.headers": "true"})
    assert custom.format(_FakeMessage(None, b"v", None)) == b"NO_HEADERS => null => v\n"
    assert MessageFormatter.from_properties({}).format(_FakeMessage(b"k", None, None)) == b"null\n"


def test_option_value_parsers() -> None:
    from strom.cli.configs import parse_add_config
    from strom.cli.get_offsets import parse_partitions

    assert parse_add_config("retention.ms=1000,cleanup.policy=[compact,delete],x=") == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete", "x": ""}
    assert parse_partitions("0,2,5-7") == {0, 2, 5, 6, 7}
    assert parse_partitions(None) is None
