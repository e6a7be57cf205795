"""One ``syncfs(2)`` per file system instead of an fsync per file at shutdown.

A clean shutdown must make every log durable before it writes the clean-shutdown marker. With
thousands of partitions that was tens of thousands of fsyncs (segment, two indexes, producer
snapshot and its directory per partition), each a journal commit. ``syncfs`` writes back every
dirty page and inode of the file system and commits the journal once: the same guarantee for
all files of the log dirs, directory entries included.

Only used where it reports errors: Linux 5.8 and later return a write-back error that happened
on the file system since the descriptor was opened (earlier kernels return 0 whatever
happened). The descriptors are opened when the logs are loaded, so a failed write-back at any
time while the broker ran fails the shutdown's sync and the marker is not written. Elsewhere
``FileSystemSync.open`` returns None and the caller fsyncs file by file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from collections.abc import Iterable

log = logging.getLogger(__name__)

_MIN_KERNEL = (5, 8)  # syncfs reports write-back errors from this version on


def _kernel_version() -> tuple[int, int]:
    parts = os.uname().release.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


def _load_syncfs() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux") or _kernel_version() < _MIN_KERNEL:
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _load_syncfs()


def syncfs(fd: int) -> None:
    """Write back and commit the file system holding ``fd``; raises OSError (e.g. EIO) on failure.

    The call releases the GIL (ctypes), so other threads run while the disk works."""
    if _syncfs is None:
        raise OSError(95, "syncfs is not available")  # EOPNOTSUPP
    if _syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class FileSystemSync:
    """Open descriptors on the distinct file systems of some directories, to ``syncfs`` each once."""

    def __init__(self, fds: dict[int, tuple[int, list[str]]]) -> None:
        self._fds = fds  # st_dev -> (descriptor, directories on it)

    @classmethod
    def open(cls, directories: Iterable[str]) -> FileSystemSync | None:
        """None where syncfs is unavailable or does not report errors (the caller fsyncs each file)."""
        if _syncfs is None:
            return None
        fds: dict[int, tuple[int, list[str]]] = {}
        try:
            for d in directories:
                dev = os.stat(d).st_dev
                if dev in fds:
                    fds[dev][1].append(d)
                else:
                    fds[dev] = (os.open(d, os.O_RDONLY | os.O_DIRECTORY), [d])
        except OSError as exc:
            log.info("not using syncfs for %s: %s", ", ".join(directories), exc)
            for fd, _ in fds.values():
                os.close(fd)
            return None
        return cls(fds)

    def sync(self) -> list[str]:
        """syncfs every file system; returns the directories whose file system failed (logged)."""
        failed: list[str] = []
        for fd, dirs in self._fds.values():
            try:
                syncfs(fd)
            except OSError as exc:
                log.error("could not sync the file system of %s: %s", ", ".join(dirs), exc)
                failed.extend(dirs)
        return failed

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd, _ in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
