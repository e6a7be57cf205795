"""Kafka-format offset checkpoint files kept at the root of each log directory.

Format (text, as Kafka's OffsetCheckpointFile)::

    0                       version
    2                       number of entries
    my-topic 0 1234         topic partition offset
    my-topic 1 99

Written atomically (temp file, fsync, rename, fsync directory) so a crash leaves
either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from strom.server_common.types import TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CHECKPOINT_VERSION = 0


class CorruptCheckpointError(ValueError):
    """A checkpoint file could not be parsed; callers fall back to full recovery."""


class OffsetCheckpointFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines.extend(
            f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())
        )
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())

    def read(self) -> dict[TopicPartition, int]:
        """Entries of the file; {} if it does not exist. Raises CorruptCheckpointError if malformed."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        try:
            # Binary garbage (a torn write, a stray editor) is corruption like any other: decode inside the try.
            lines = raw.decode("ascii").splitlines()
            version = int(lines[0])
            if version != CHECKPOINT_VERSION:
                raise CorruptCheckpointError(f"unrecognized version {version} in {self.path}")
            count = int(lines[1])
            out: dict[TopicPartition, int] = {}
            for line in lines[2 : 2 + count]:
                topic, partition, offset = line.split(" ")
                out[(topic, int(partition))] = int(offset)
        except (IndexError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            if isinstance(exc, CorruptCheckpointError):
                raise
            raise CorruptCheckpointError(f"malformed checkpoint file {self.path}: {exc}") from exc
        if len(out) != count or any(line.strip() for line in lines[2 + count :]):
            raise CorruptCheckpointError(f"checkpoint file {self.path} expected {count} entries")
        return out


def write_atomically(path: str, data: bytes, fsync: bool = True) -> None:
    """Temp file, (fsync), rename, (fsync dir): a crash leaves the old file or the new one.

    On failure the temp file is removed, so a full disk does not keep a partial copy's blocks.
    """
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    """Make a rename or new file in `path` durable (directory entries need their own fsync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
