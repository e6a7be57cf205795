"""`strom zookeeper-shell`: look at the cluster's ZooKeeper tree (like kafka's zookeeper-shell.sh).

`strom zookeeper-shell 127.0.0.1:2181/kafka ls /brokers/ids` prints `[1, 2, 3]`, the way
zkCli does, so the commands an operator knows from Kafka work unchanged. Read-only on
purpose: writes belong to the controller, and a typo here must not damage a cluster.
Without a command, commands are read one per line from standard input.

Commands: `ls [-s] [-R] PATH`, `get [-s] PATH`, `stat PATH`.
"""

from __future__ import annotations

import shlex
import sys
import time
from typing import Annotated

import typer
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from strom.cli.common import cli_errors, fail, write_out

USAGE = "ls [-s] [-R] path | get [-s] path | stat path"


def format_stat(stat: ZnodeStat) -> str:
    """zkCli's stat block: zxids in hex, times like Java's Date.toString()."""

    def when(ms: int) -> str:
        return time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(ms / 1000))

    return "\n".join(
        [
            f"cZxid = 0x{stat.czxid:x}",
            f"ctime = {when(stat.ctime)}",
            f"mZxid = 0x{stat.mzxid:x}",
            f"mtime = {when(stat.mtime)}",
            f"pZxid = 0x{stat.pzxid:x}",
            f"cversion = {stat.cversion}",
            f"dataVersion = {stat.version}",
            f"aclVersion = {stat.aversion}",
            f"ephemeralOwner = 0x{stat.ephemeralOwner:x}",
            f"dataLength = {stat.dataLength}",
            f"numChildren = {stat.numChildren}",
        ]
    )


def _walk(zk: KazooClient, path: str) -> list[str]:
    """`path` and its descendants, depth first, parents first (zkCli's `ls -R`)."""
    out = [path]
    for child in sorted(zk.get_children(path)):
        out.extend(_walk(zk, f"{path.rstrip('/')}/{child}"))
    return out


def run_command(zk: KazooClient, words: list[str]) -> str:
    """Execute one shell command and return what zkCli would print."""
    if not words:
        return ""
    name, args = words[0], words[1:]
    flags = {a for a in args if a.startswith("-")}
    paths = [a for a in args if not a.startswith("-")]
    if len(paths) != 1:
        fail(f"usage: {USAGE}")
    path = paths[0]
    if not path.startswith("/"):
        fail(f"Path must start with / character: {path}")
    try:
        if name == "ls":
            unknown = flags - {"-s", "-R"}
            if unknown:
                fail(f"unknown option for ls: {' '.join(sorted(unknown))}")
            if "-R" in flags:
                return "\n".join(_walk(zk, path))
            children, stat = zk.get_children(path, include_data=True)
            text = "[" + ", ".join(sorted(children)) + "]"
            return text + ("\n" + format_stat(stat) if "-s" in flags else "")
        if name == "get":
            if flags - {"-s"}:
                fail(f"unknown option for get: {' '.join(sorted(flags - {'-s'}))}")
            data, stat = zk.get(path)
            text = data.decode("utf-8", "replace") if data else ""
            return text + ("\n" + format_stat(stat) if "-s" in flags else "")
        if name == "stat":
            stat = zk.exists(path)
            if stat is None:
                raise NoNodeError
            return format_stat(stat)
    except NoNodeError:
        fail(f"Node does not exist: {path}")
    fail(f"unknown command '{name}'; commands: {USAGE}")


def zookeeper_shell(
    server: Annotated[str, typer.Argument(help="ZooKeeper to connect to: host:port[,host:port...][/chroot].")],
    command: Annotated[
        list[str] | None,
        typer.Argument(help=f"One command ({USAGE}); without it, commands are read from stdin."),
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for a connection.")] = 10.0,
) -> None:
    """Inspect the ZooKeeper tree of a cluster (like zookeeper-shell.sh): ls, get, stat."""
    with cli_errors():
        zk = KazooClient(hosts=server, timeout=max(timeout, 2.0), read_only=True)
        try:
            zk.start(timeout=timeout)
        except KazooTimeoutError:
            zk.close()
            fail(f"Could not connect to ZooKeeper at {server} within {timeout:g} s.")
        try:
            if command:
                write_out(run_command(zk, list(command)) + "\n")
                return
            for line in sys.stdin:
                words = shlex.split(line)
                if words:
                    write_out(run_command(zk, words) + "\n")
        finally:
            zk.stop()
            zk.close()
