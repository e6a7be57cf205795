"""``partition.metadata``: the topic id recorded inside each partition directory (Kafka's format).

A directory name says only ``<topic>-<partition>``; the topic id tells a log of the current
topic from one of an older topic of the same name (deleted and re-created while the broker was
down), and lets the metadata be rebuilt from the directories with the ids clients already know::

    version: 0
    topic_id: 7Ld0ifAHQbe3Hm4Nqh7n4w
"""

from __future__ import annotations

import base64
import logging
import os
import uuid

from strom.config import parse_properties
from strom.storage.checkpoints import write_atomically

log = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
# Strom's own addition (Kafka keeps configs only in the controller): the topic's config overrides,
# so that `strom storage recover-metadata` restores e.g. cleanup.policy=compact, not just the data.
TOPIC_CONFIGS_FILE = "topic.configs"


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return uuid.UUID(bytes=raw)  # ValueError unless exactly 16 bytes


def read_topic_id(partition_dir: str) -> uuid.UUID | None:
    """The recorded topic id; None when the file is missing or unreadable (then it says nothing)."""
    path = os.path.join(partition_dir, PARTITION_METADATA_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    try:
        fields = {}
        for line in raw.decode("ascii").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        version = int(fields["version"])
        if version != PARTITION_METADATA_VERSION:
            raise ValueError(f"unknown version {version}")
        return decode_topic_id(fields["topic_id"])
    except (KeyError, ValueError) as exc:  # includes UnicodeDecodeError and binascii.Error
        log.warning("ignoring unreadable %s (%s); it will be rewritten", path, exc)
        return None


def write_topic_id(partition_dir: str, topic_id: uuid.UUID) -> None:
    _write_atomically(os.path.join(partition_dir, PARTITION_METADATA_FILE),
                      f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {encode_topic_id(topic_id)}\n")


def _write_atomically(path: str, text: str) -> None:
    write_atomically(path, text.encode())


def ensure_topic_id(partition_dir: str, topic_id: uuid.UUID) -> None:
    """Record the topic id when a log is created or first attached; a recorded id is never overwritten."""
    recorded = read_topic_id(partition_dir)
    if recorded is None:
        write_topic_id(partition_dir, topic_id)
    elif recorded != topic_id:
        log.error("%s records topic id %s but the metadata says %s; leaving the file as it is",
                  partition_dir, recorded, topic_id)


def read_topic_configs(partition_dir: str) -> dict[str, str] | None:
    """The recorded topic config overrides; None when missing or unreadable."""
    path = os.path.join(partition_dir, TOPIC_CONFIGS_FILE)
    try:
        with open(path, "rb") as f:
            return parse_properties(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s (%s)", path, exc)
        return None


def ensure_topic_configs(partition_dir: str, configs: dict[str, str]) -> None:
    """Record the topic's config overrides when they differ from what the directory holds."""
    recorded = read_topic_configs(partition_dir)
    if recorded == configs or (recorded is None and not configs):
        return
    # Config keys and values are plain ASCII/UTF-8 without newlines (validated by the broker).
    lines = "".join(f"{k}={_escape(v)}\n" for k, v in sorted(configs.items()))
    _write_atomically(os.path.join(partition_dir, TOPIC_CONFIGS_FILE), lines)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")
