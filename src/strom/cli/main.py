"""The `strom` command: one sub-command per Kafka tool (kafka-topics → `strom topics`, ...)."""

from __future__ import annotations

import importlib

import typer

from strom.cli import (
    acls,
    configs,
    console,
    console_consumer,
    console_producer,
    dump_log,
    get_offsets,
    leader_election,
    log_dirs,
    perf_test,
    reassign_partitions,
    rebalance,
    topics,
    zookeeper_shell,
)
from strom.cli.cluster import cluster_app
from strom.cli.common import PLAIN_HELP, print_error
from strom.cli.server import server_app
from strom.cli.storage import storage_app
from strom.cli.transactions import transactions_app

app = typer.Typer(
    name="strom",
    help="Strom: a Kafka-compatible event streaming platform. Tools mirror Kafka's bin/*.sh scripts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    **PLAIN_HELP,
)

app.add_typer(server_app, name="server")
app.add_typer(storage_app, name="storage")
app.add_typer(cluster_app, name="cluster")
app.add_typer(transactions_app, name="transactions")
app.command("topics", no_args_is_help=True)(topics.topics)
app.command("configs", no_args_is_help=True)(configs.configs)
app.command("acls", no_args_is_help=True)(acls.acls)
app.command("console")(console.console)
app.command("console-producer", no_args_is_help=True)(console_producer.console_producer)
app.command("console-consumer", no_args_is_help=True)(console_consumer.console_consumer)
app.command("get-offsets", no_args_is_help=True)(get_offsets.get_offsets)
app.command("dump-log", no_args_is_help=True)(dump_log.dump_log)
app.command("leader-election", no_args_is_help=True)(leader_election.leader_election)
app.command("reassign-partitions", no_args_is_help=True)(reassign_partitions.reassign_partitions)
app.command("log-dirs", no_args_is_help=True)(log_dirs.log_dirs)
app.command("rebalance")(rebalance.rebalance)
app.command(
    "producer-perf-test",
    no_args_is_help=True,
    # Kafka's --producer-props takes several key=value words after one flag.
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)(perf_test.producer_perf_test)
app.command("consumer-perf-test", no_args_is_help=True)(perf_test.consumer_perf_test)
app.command(
    "zookeeper-shell",
    no_args_is_help=True,
    # zkCli's flags (`ls -R /path`) come after the command word and belong to it.
    context_settings={"ignore_unknown_options": True},
)(zookeeper_shell.zookeeper_shell)

_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _delegate(ctx: typer.Context, module: str, attribute: str, name: str) -> None:
    """Run a tool that lives in another module, importing it only when asked for.

    Those tools (demo, consumer-groups) are written separately and may pull in heavy
    dependencies; a missing module is reported instead of breaking every other tool.
    """
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        if exc.name and module.startswith(exc.name):
            print_error(f"`strom {name}` is not available in this installation ({module} is missing).")
            raise typer.Exit(1) from None
        raise
    target = getattr(mod, attribute, None)
    if target is None:
        print_error(f"`strom {name}` is not available: {module} has no '{attribute}'.")
        raise typer.Exit(1)
    if isinstance(target, typer.Typer):
        sub = target
    else:
        sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False, **PLAIN_HELP)
        sub.command(name)(target)
    command = typer.main.get_command(sub)
    command.main(args=list(ctx.args), prog_name=f"strom {name}", standalone_mode=True)


@app.command("demo", context_settings=_PASSTHROUGH, add_help_option=False)
def demo(ctx: typer.Context) -> None:
    """End-to-end demo: broker, producers, Spark pipelines (see `strom demo --help`)."""
    _delegate(ctx, "strom.cli.demo", "demo", "demo")


@app.command("consumer-groups", context_settings=_PASSTHROUGH, add_help_option=False)
def consumer_groups(ctx: typer.Context) -> None:
    """List, describe and reset consumer groups (like kafka-consumer-groups.sh)."""
    _delegate(ctx, "strom.cli.consumer_groups", "consumer_groups", "consumer-groups")


if __name__ == "__main__":
    app(prog_name="strom")
