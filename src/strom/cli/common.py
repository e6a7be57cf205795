"""Helpers shared by every `strom` tool: connection options, client configs, errors.

The tools talk to the broker through confluent-kafka (librdkafka), the same client a
user would use, so that the CLI doubles as a compatibility check of the broker.

Errors, the same for every tool (and `strom server start`): one line `Error: <what went wrong>`
on stderr, data only on stdout, never a traceback for an expected failure. Exit status 0 =
done; 1 = the tool refused or failed (no broker answers, the topic or group does not exist,
the broker refused, a value or combination of options the tool itself checks); 2 = the command
line could not be parsed (unknown option, missing or mistyped argument: click's usage errors) or
a broker was given a setting it does not know or accept, so it did not start; 130 = Ctrl-C.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import typer.core
from rich.console import Console

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

# Help and usage errors are click's plain text (not typer's rich panels): rich panels cut long
# option names to fit 80 columns with "…" and read option help as markup (`[/chroot]` crashed),
# while click wraps to the terminal's width and prints usage errors as `Error: ...`, the same
# prefix as every other error of these tools.
class CommandList(typer.core.TyperGroup):
    """A command group whose `--help` lists each command's whole first docstring line, wrapped
    rather than cut off with "..." to fit the terminal."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


PLAIN_HELP: dict[str, Any] = {"rich_markup_mode": None, "context_settings": {"max_content_width": 120},
                              "cls": CommandList}

# Errors go to stderr through rich (colour on a terminal, plain text in pipes); data
# always goes to stdout as plain text so that it can be piped and parsed.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

BootstrapOption = Annotated[
    str,
    typer.Option(
        "--bootstrap-server",
        envvar="STROM_BOOTSTRAP_SERVER",
        help="host:port of a broker to connect to (comma-separated list allowed).",
        show_default=True,
    ),
]
CommandConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--command-config",
        help="Properties file with extra client settings (librdkafka/Kafka key names).",
        dir_okay=False,
    ),
]


class CliError(Exception):
    """An expected failure: reported as one readable line, never as a traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def fail(message: str, exit_code: int = 1) -> NoReturn:
    """Stop the command with a readable error message."""
    raise CliError(message, exit_code)


def print_error(message: str) -> None:
    """Print one error line to stderr (markup disabled so brackets survive)."""
    err_console.print(f"[bold red]Error:[/bold red] {escape(message)}")


def print_warning(message: str) -> None:
    """Print one warning line to stderr."""
    err_console.print(f"[yellow]WARNING:[/yellow] {escape(message)}")


def escape(text: str) -> str:
    """Escape rich markup in user-provided text."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def connect_timeout() -> float:
    """Seconds to wait for the first broker answer; STROM_CONNECT_TIMEOUT overrides 10 s."""
    raw = os.environ.get("STROM_CONNECT_TIMEOUT", "10")
    try:
        value = float(raw)
    except ValueError:
        return 10.0
    return value if value > 0 else 10.0


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn expected failures into one line on stderr plus a non-zero exit code."""
    from confluent_kafka import KafkaException

    try:
        yield
    except CliError as exc:
        print_error(exc.message)
        raise typer.Exit(exc.exit_code) from None
    except KafkaException as exc:
        print_error(describe_kafka_error(exc))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:
        # `strom ... | head` closes stdout early; that is not an error for the user.
        _silence_stdout()
        raise typer.Exit(0) from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def describe_kafka_error(exc: BaseException, topic: str | None = None) -> str:
    """Render a KafkaException/KafkaError the way a person would explain it."""
    err = exc.args[0] if exc.args else exc
    name = err.name() if hasattr(err, "name") else ""
    text = err.str() if hasattr(err, "str") else str(err)
    # kafka-python style exception text ("[Error 37] InvalidPartitionsError: ...") adds nothing.
    text = re.sub(r"^\[Error -?\d+\] \w+: ", "", text)
    subject = f"Topic '{topic}'" if topic else "The topic"
    if name == "TOPIC_ALREADY_EXISTS":
        return f"{subject} already exists."
    if name in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_ID"):
        return f"{subject} does not exist."
    if name == "_UNKNOWN_PARTITION":
        return f"{subject} has no such partition."
    if name in ("_TRANSPORT", "_ALL_BROKERS_DOWN"):
        return "Lost the connection to the broker (is it still running?)."
    if name == "_TIMED_OUT" and "controller" in text:
        # librdkafka sends this request to the controller only; after a broker died (kill -9) the
        # metadata names it until its ZooKeeper session expires and another broker is elected.
        return ("No controller answered in time: if a broker just died, the cluster elects another "
                "controller once its ZooKeeper session expires (zookeeper.session.timeout.ms); try again then.")
    if name == "_TIMED_OUT":
        return "The broker did not answer in time."
    if name == "INVALID_REPLICATION_FACTOR":
        return f"Invalid replication factor: {text}"
    if name == "INVALID_PARTITIONS":
        return f"Invalid partition count: {text}"
    if name == "INVALID_CONFIG":
        return f"Invalid config: {text}"
    if name == "POLICY_VIOLATION":
        return f"Rejected by the broker's policy: {text}"
    if name == "INVALID_TOPIC_EXCEPTION":
        return f"Invalid topic name: {text}"
    if name == "UNSUPPORTED_VERSION":
        return f"The broker does not support this request: {text}"
    if name == "_INVALID_ARG":
        return f"Invalid argument: {text}"
    return f"{text} ({name})" if name and name not in text else text


def parse_key_values(items: Iterable[str], what: str) -> dict[str, str]:
    """Parse repeated `key=value` arguments, refusing entries without '='."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            fail(f"Invalid {what} '{item}': expected key=value.")
        result[key] = value
    return result


_PROPERTY_LINE = re.compile(r"^\s*([^=:\s]+)\s*(?:[=:]\s*|\s+)?(.*?)\s*$")


def load_properties(path: Path | str) -> dict[str, str]:
    """Read a Java-style .properties file (`k=v`, `k: v`, `#`/`!` comments)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"Config file '{file}' does not exist.")
    except OSError as exc:
        fail(f"Could not read config file '{file}': {exc.strerror}.")
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = _PROPERTY_LINE.match(line)
        if match:
            props[match.group(1)] = match.group(2)
    return props


def client_config(
    bootstrap: str | None,
    config_file: Path | str | None = None,
    overrides: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Build a librdkafka config: quiet logging, then the file, then explicit settings."""
    # librdkafka logs every refused connection to stderr; the tools report such
    # problems themselves in one sentence, so its own logging is off by default.
    config: dict[str, Any] = {"log_level": 0}
    if bootstrap:
        config["bootstrap.servers"] = bootstrap
    if config_file:
        config.update(librdkafka_security(load_properties(config_file)))
    if overrides:
        config.update(overrides)
    if not config.get("bootstrap.servers"):
        fail("No broker given: use --bootstrap-server host:port.")
    return config


def librdkafka_security(props: dict[str, str]) -> dict[str, str]:
    """Kafka's Java client security keys in librdkafka's words (see strom.security.client_properties)."""
    from strom.security.client_properties import java_to_librdkafka

    try:
        return java_to_librdkafka(props)
    except ValueError as exc:
        fail(f"Invalid client configuration: {exc}")


def client_security(config_file: Path | str | None) -> Any:
    """The --command-config settings for tools that speak the Kafka protocol themselves (BrokerClient)."""
    from strom.security.client_security import ClientSecurity

    if not config_file:
        return ClientSecurity()
    props = librdkafka_security(load_properties(config_file))
    try:
        return ClientSecurity.from_client_properties(props)
    except (ValueError, OSError) as exc:
        fail(f"Invalid client configuration in {config_file}: {exc}")


REQUEST_TIMEOUT_MS_DEFAULT = 30000


def request_timeout_ms(config_file: Path | str | None) -> int:
    """`request.timeout.ms` from --command-config (Kafka's admin client setting, 30 s by default): how long
    a tool that speaks the protocol itself waits for one broker's answer before calling it unreachable."""
    if not config_file:
        return REQUEST_TIMEOUT_MS_DEFAULT
    value = load_properties(config_file).get("request.timeout.ms")
    if value is None:
        return REQUEST_TIMEOUT_MS_DEFAULT
    if not value.strip().isdigit() or int(value) <= 0:
        fail(f"Invalid client configuration in {config_file}: request.timeout.ms={value} is not a positive "
             "number of milliseconds")
    return int(value)


def _is_unreachable(exc: BaseException) -> bool:
    err = exc.args[0] if exc.args else None
    name = err.name() if hasattr(err, "name") else ""
    return name in ("_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE")


def ensure_reachable(client: Any, bootstrap: str, timeout: float | None = None) -> Any:
    """Fetch cluster metadata once, turning 'nobody answers' into a clear message."""
    from confluent_kafka import KafkaException

    wait = connect_timeout() if timeout is None else timeout
    try:
        return client.list_topics(timeout=wait)
    except KafkaException as exc:
        if _is_unreachable(exc):
            fail(f"Could not reach a broker at {bootstrap} within {wait:g} s")
        raise


def admin_client(bootstrap: str, config_file: Path | str | None = None) -> Any:
    """An AdminClient that has already proven the broker answers."""
    from confluent_kafka.admin import AdminClient

    config = client_config(bootstrap, config_file)
    try:
        admin = AdminClient(config)
    except Exception as exc:  # librdkafka rejects unknown or malformed settings here
        fail(f"Invalid client configuration: {exc}")
    ensure_reachable(admin, config["bootstrap.servers"])
    return admin


def topic_partitions(client: Any, topic: str, bootstrap: str) -> list[int]:
    """Partition ids of a topic, or a clear error if it does not exist."""
    from confluent_kafka import KafkaException

    try:
        metadata = client.list_topics(topic, timeout=connect_timeout())
    except KafkaException as exc:
        if _is_unreachable(exc):
            fail(f"Could not reach a broker at {bootstrap} within {connect_timeout():g} s")
        raise
    info = metadata.topics.get(topic)
    if info is None or (info.error is not None and not info.partitions):
        fail(f"Topic '{topic}' does not exist.")
    if info.error is not None and info.error.name() != "NO_ERROR" and not info.partitions:
        fail(f"Topic '{topic}': {info.error.str()}")
    return sorted(info.partitions)


def write_out(text: str) -> None:
    """Write data to stdout (plain, no rich formatting)."""
    sys.stdout.write(text)
