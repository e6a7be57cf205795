"""The JSON files of kafka-reassign-partitions.sh, read and written as Kafka's tool does.

* topics to move (`--topics-to-move-json-file`): `{"version": 1, "topics": [{"topic": "foo"}]}`
* a reassignment (`--reassignment-json-file`, and what `--generate`/`--execute` print):
  `{"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2],
  "log_dirs": ["any", "any"]}]}`; `log_dirs` is optional, "any" leaves the directory to the broker.

Plans made for Kafka's tool work unchanged, and what this tool prints can be fed back to it
(the rollback plan printed by `--execute`). Every problem in a file is one readable sentence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.cli.common import fail

ANY_LOG_DIR = "any"


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """One entry of a reassignment: the replicas a partition should end with (preferred leader first)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def explicit_log_dirs(self) -> dict[int, str]:
        """Broker -> absolute log dir, for replicas whose directory is not left to the broker."""
        return {b: d for b, d in zip(self.replicas, self.log_dirs, strict=False) if d != ANY_LOG_DIR}


def _load(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{what} '{path}' does not exist.")
    except OSError as exc:
        fail(f"Could not read {what} '{path}': {exc.strerror}.")
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(f"{what} '{path}' is not valid JSON: {exc}.")


def _check_version(doc: dict[str, Any], path: Path) -> None:
    version = doc.get("version", 1)
    if version != 1:
        fail(f"'{path}': unsupported \"version\" {version!r} (only 1 is known).")


def read_topics_to_move(path: Path) -> list[str]:
    """Topic names of a topics-to-move file, in file order, without repeats."""
    doc = _load(path, "Topics-to-move file")
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), list):
        fail(f"'{path}' must be an object with a \"topics\" list, like "
             '{"version": 1, "topics": [{"topic": "foo"}]}.')
    _check_version(doc, path)
    topics: list[str] = []
    for i, entry in enumerate(doc["topics"]):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            fail(f"'{path}': entry {i} of \"topics\" needs a \"topic\" name, like {{\"topic\": \"foo\"}}.")
        if topic not in topics:
            topics.append(topic)
    if not topics:
        fail(f"'{path}' names no topics.")
    return topics


def read_reassignment(path: Path) -> list[PartitionMove]:
    """The entries of a reassignment file, checked for shape, duplicates and matching log dirs."""
    doc = _load(path, "Reassignment file")
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        fail(f"'{path}' must be an object with a \"partitions\" list, like "
             '{"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2]}]}.')
    _check_version(doc, path)
    moves: list[PartitionMove] = []
    seen: set[tuple[str, int]] = set()
    for i, entry in enumerate(doc["partitions"]):
        where = f"'{path}': entry {i} of \"partitions\""
        if not isinstance(entry, dict):
            fail(f"{where} is not an object.")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            fail(f"{where} needs a \"topic\" name.")
        if not _is_int(partition) or partition < 0:
            fail(f"{where} ({topic}) needs a \"partition\" number >= 0.")
        name = f"{topic}-{partition}"
        if not isinstance(replicas, list) or not replicas or not all(_is_int(r) and r >= 0 for r in replicas):
            fail(f"{where} ({name}) needs a non-empty \"replicas\" list of broker ids.")
        duplicates = sorted({r for r in replicas if replicas.count(r) > 1})
        if duplicates:
            fail(f"The replica list of {name} names broker(s) {_ids(duplicates)} more than once.")
        if (topic, partition) in seen:
            fail(f"Partition {name} appears more than once in '{path}'.")
        seen.add((topic, partition))
        log_dirs = entry.get("log_dirs")
        if log_dirs is None:
            log_dirs = [ANY_LOG_DIR] * len(replicas)
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) and d for d in log_dirs):
            fail(f"{where} ({name}): \"log_dirs\" must be a list of directory names or \"any\".")
        if len(log_dirs) != len(replicas):
            fail(f"{name} has {len(replicas)} replicas but {len(log_dirs)} \"log_dirs\" entries; give one per "
                 "replica (\"any\" lets the broker choose).")
        if any(d != ANY_LOG_DIR and not d.startswith("/") for d in log_dirs):
            fail(f"{name}: a log dir must be an absolute path or \"any\" (got {log_dirs}).")
        moves.append(PartitionMove(topic, partition, tuple(replicas), tuple(log_dirs)))
    if not moves:
        fail(f"'{path}' lists no partitions to reassign.")
    return moves


def format_assignment(assignment: dict[tuple[str, int], list[int]],
                      log_dirs: dict[tuple[str, int], list[str]] | None = None) -> str:
    """A reassignment document on one line, sorted by topic and partition (Kafka prints it so)."""
    partitions = []
    for (topic, partition), replicas in sorted(assignment.items()):
        dirs = (log_dirs or {}).get((topic, partition)) or [ANY_LOG_DIR] * len(replicas)
        partitions.append({"topic": topic, "partition": partition, "replicas": list(replicas),
                           "log_dirs": list(dirs)})
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def parse_broker_list(text: str) -> list[int]:
    """`--broker-list 1,2,3`: distinct non-negative ids."""
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            fail(f"Invalid --broker-list '{text}': expected broker ids like 1,2,3.")
        ids.append(int(part))
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        fail(f"--broker-list names broker(s) {_ids(duplicates)} more than once.")
    return ids


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))
