"""Every `strom` command's `--help`, as a user runs it: it must print, exit 0, and not cut text off."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

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


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "strom")
def test_help_prints_and_exits_0(path: tuple[str, ...]) -> None:
    # A pipe, as in `strom topics --help | less`: no terminal, so the default 80 columns apply.
    result = subprocess.run([sys.executable, "-m", "strom.cli.main", *path, "--help"],
                            capture_output=True, text=True, timeout=120, env=_environment())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.startswith("Usage: strom"), result.stdout
    assert "…" not in result.stdout  # an option name or text cut to fit the width


def test_command_list_shows_whole_descriptions() -> None:
    result = subprocess.run([sys.executable, "-m", "strom.cli.main", "--help"], capture_output=True, text=True,
                            timeout=60, env=_environment())
    assert result.returncode == 0, result.stderr
    # Each command's whole first docstring line, wrapped (at a hyphen or a space), never cut with "...".
    text = " ".join(result.stdout.split()).replace("- ", "-")
    assert "Inspect the ZooKeeper tree of a cluster (like zookeeper-shell.sh): ls, get, stat." in text
    assert "List, describe and reset consumer groups (like kafka-consumer-groups.sh)." in text
    assert "..." not in text.replace("[ARGS]...", "")


def _environment() -> dict[str, str]:
    """The test's environment at 80 columns, the width a pipe or a default terminal gets."""
    import os

    return {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}, "COLUMNS": "80"}
