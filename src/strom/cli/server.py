"""`strom server start`: run a broker in the foreground (like kafka-server-start.sh)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Annotated

import typer

from strom.cli.common import PLAIN_HELP, cli_errors, fail

server_app = typer.Typer(help="Run a Strom broker.", no_args_is_help=True, **PLAIN_HELP)


@server_app.command("start")
def start(
    properties: Annotated[
        Path | None,
        typer.Argument(help="server.properties file (Kafka key names); defaults apply without it."),
    ] = None,
    override: Annotated[
        list[str] | None,
        typer.Option("--override", help="Override one property, key=value (repeatable)."),
    ] = None,
) -> None:
    """Start a broker in the foreground; stop it with Ctrl-C or SIGTERM."""
    with cli_errors():
        overrides = list(override or [])
        for item in overrides:
            if "=" not in item or item.startswith("="):
                fail(f"Invalid --override '{item}': expected key=value.")
        if properties is not None and not properties.is_file():
            fail(f"Properties file '{properties}' does not exist.")
        # Imported here so that client tools start fast and work without broker code.
        try:
            from strom.broker.main import run
        except ImportError as exc:
            if exc.name and (exc.name == "strom.broker.main" or "strom.broker.main".startswith(exc.name)):
                fail("The broker is not available in this installation (strom.broker.main is missing).")
            raise
        try:
            run(str(properties) if properties is not None else None, overrides)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                fail(f"The broker could not open its listener: {exc.strerror}.")
            raise
