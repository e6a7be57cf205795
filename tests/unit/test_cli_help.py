"""Every `strom` command's `--help`, as a user runs it: it must print, exit 0, and not cut text off."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from strom.cli.main import app


def _command_paths(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The app's command tree as argument paths: (), ("topics",), ("cluster",), ("cluster", "up"), ..."""
    paths = [path]
    for name, sub in getattr(command, "commands", {}).items():
        paths += _command_paths(sub, (*path, name))
    return paths


COMMANDS = _command_paths(typer.main.get_command(app))


def test_every_command_is_enumerated() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert {"zookeeper-shell", "cluster up", "transactions abort", "demo", "consumer-groups"} <= names


def _help(*path: str) -> tuple[int, str]:
    """`strom <path> --help` at 80 columns (a pipe, as in `strom topics --help | less`, or a default terminal)."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": None})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "strom")
def test_help_prints_and_exits_0(path: tuple[str, ...]) -> None:
    code, out = _help(*path)
    assert code == 0, out
    assert out.startswith("Usage: strom"), out
    assert "…" not in out  # an option name or text cut to fit the width


def test_command_list_shows_whole_descriptions() -> None:
    code, out = _help()
    assert code == 0, out
    # Each command's whole first docstring line, wrapped (at a hyphen or a space), never cut with "...".
    text = " ".join(out.split()).replace("- ", "-")
    assert "Inspect the ZooKeeper tree of a cluster (like zookeeper-shell.sh): ls, get, stat." in text
    assert "List, describe and reset consumer groups (like kafka-consumer-groups.sh)." in text
    assert "..." not in text.replace("[ARGS]...", "")
