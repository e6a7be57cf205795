"""Ownership and identity of log directories: the ``.lock`` file and ``meta.properties``.

Two brokers writing one directory corrupt it silently, so every broker takes an exclusive
``flock`` on ``<dir>/.lock`` before it reads or writes anything there, and holds it until the
process exits. ``meta.properties`` (Kafka's format) records which cluster and broker a
directory belongs to, so a directory moved between brokers or clusters is refused instead of
being served, or worse, cleaned up as "unknown".
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from dataclasses import dataclass

from strom.config import parse_properties
from strom.storage.checkpoints import write_atomically

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
META_PROPERTIES_VERSION = 1


class LogDirError(Exception):
    """A log directory cannot be used safely; the broker refuses to start (exit status 2)."""


# -- locking --------------------------------------------------------------------------------------


class LogDirLock:
    """An exclusive, non-blocking ``flock`` on ``<dir>/.lock``, released when the process exits."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.path = os.path.join(log_dir, LOCK_FILE)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogDirError(f"cannot open the lock file {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f"process {holder}" if holder else "another process"
                raise LogDirError(
                    f"log dir {log_dir} is in use: {who} (probably another broker) holds the lock {self.path}. "
                    "Two brokers must never share a log dir; stop the other one or give this one its own "
                    "log.dirs"
                ) from exc
            raise LogDirError(f"cannot lock {self.path}: {exc.strerror}") from exc
        self._fd: int | None = fd
        # The holder's pid helps whoever is refused; it is informative only (the flock is the lock).
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def lock_log_dirs(log_dirs: list[str]) -> list[LogDirLock]:
    """Lock every directory or none: on failure the locks already taken are released."""
    locks: list[LogDirLock] = []
    try:
        for d in log_dirs:
            locks.append(LogDirLock(d))
    except LogDirError:
        for lk in locks:
            lk.release()
        raise
    return locks


# -- meta.properties --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetaProperties:
    """Identity of a log dir: the cluster and the broker (node) it belongs to."""

    cluster_id: str
    node_id: int


def read_meta_properties(log_dir: str) -> MetaProperties | None:
    """The directory's identity, None if it has none yet. Raises LogDirError if the file is unreadable."""
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LogDirError(f"cannot read {path}: {exc.strerror}") from exc
    hint = "fix it, or delete it to have it rewritten from the cluster metadata at the next start"
    try:
        props = parse_properties(raw.decode("utf-8"))
        version = int(props.get("version", "0"))
        node = props.get("node.id") if version >= 1 else props.get("broker.id", props.get("node.id"))
        cluster_id = props.get("cluster.id", "").strip()
        if node is None or not cluster_id:
            raise ValueError("node.id (or broker.id) and cluster.id are required")
        return MetaProperties(cluster_id, int(node))
    except ValueError as exc:  # includes UnicodeDecodeError
        raise LogDirError(f"{path} is not a valid meta.properties file ({exc}); {hint}") from exc


def write_meta_properties(log_dir: str, meta: MetaProperties) -> None:
    """Write Kafka's v1 meta.properties atomically (temp file, fsync, rename, fsync dir)."""
    path = os.path.join(log_dir, META_PROPERTIES)
    text = (
        "#\n"
        f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
        f"node.id={meta.node_id}\n"
        f"version={META_PROPERTIES_VERSION}\n"
        f"cluster.id={meta.cluster_id}\n"
    )
    write_atomically(path, text.encode())


def check_identities(
    log_dirs: list[str], broker_id: int, cluster_id: str | None
) -> tuple[dict[str, MetaProperties | None], str | None]:
    """Read every meta.properties and check they agree with each other and the config.

    Returns each dir's identity (None = new dir) and the cluster id they record (None if no dir
    has one yet). As Kafka (InconsistentBrokerIdException, InconsistentClusterIdException), a
    mismatch refuses the start, naming the directory.
    """
    metas = {d: read_meta_properties(d) for d in log_dirs}
    for d, meta in metas.items():
        if meta is not None and meta.node_id != broker_id:
            raise LogDirError(
                f"log dir {d} belongs to broker {meta.node_id} (see {os.path.join(d, META_PROPERTIES)}) "
                f"but this broker is broker.id={broker_id}; fix broker.id or log.dirs"
            )
    recorded = {d: m.cluster_id for d, m in metas.items() if m is not None}
    ids = set(recorded.values())
    if len(ids) > 1:
        listing = ", ".join(f"{d} has {cid}" for d, cid in recorded.items())
        raise LogDirError(f"log dirs belong to different clusters ({listing}); every log dir of a broker must "
                          "come from the same cluster")
    found = ids.pop() if ids else None
    if cluster_id and found and cluster_id != found:
        d = next(iter(recorded))
        raise LogDirError(f"log dir {d} belongs to cluster {found} but cluster.id is {cluster_id}; "
                          "fix cluster.id or log.dirs")
    return metas, found
