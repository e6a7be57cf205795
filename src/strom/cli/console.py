"""`strom console`: serve the web console (topics, messages, consumer groups, ACLs, users, throughput).

It speaks only the Kafka protocol (through confluent-kafka), so it works against any Kafka
broker, not only Strom. Starlette and uvicorn are imported only when the command runs.
"""

from __future__ import annotations

import socket
import sys
from typing import Annotated
from urllib.parse import urlparse

import typer

from strom.cli.common import BootstrapOption, CommandConfigOption, cli_errors, client_config, fail


def _check_port_free(host: str, port: int) -> None:
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        fail(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.")


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(host: str) -> tuple[str, ...] | None:
    """Host header names the console answers: loopback names on loopback, any on a wildcard address."""
    if host in ("0.0.0.0", "::", ""):
        return None
    return _LOOPBACK if host in _LOOPBACK else (host.lower(), *_LOOPBACK)


def console(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    port: Annotated[int, typer.Option("--port", help="HTTP port of the console.", min=1, max=65535)] = 8080,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default).")] = "127.0.0.1",
    metrics_url: Annotated[
        str | None,
        typer.Option("--metrics-url", help="The broker's Prometheus endpoint, e.g. http://127.0.0.1:9308/metrics, "
                                           "for the live throughput chart."),
    ] = None,
    command_config: CommandConfigOption = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the broker per request.",
                                           min=0.5)] = 10.0,
) -> None:
    """Web console over the Kafka protocol: brokers, topics, messages, consumer groups, ACLs, SCRAM users."""
    with cli_errors():
        config = client_config(bootstrap_server, command_config)
        if metrics_url:
            parsed = urlparse(metrics_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                fail(f"Invalid --metrics-url '{metrics_url}': expected http://host:port/metrics.")
        _check_port_free(host, port)
        import uvicorn

        from strom.console.app import ConsoleSettings, create_app

        app = create_app(ConsoleSettings(config, metrics_url or None, timeout, browse_timeout=timeout,
                                         allowed_hosts=allowed_hosts(host)))
        shown_host = f"[{host}]" if ":" in host else host
        typer.echo(f"Strom console on http://{shown_host}:{port}/ (brokers {config['bootstrap.servers']}); "
                   "Ctrl-C stops it")
        sys.stdout.flush()
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, server_header=False)
