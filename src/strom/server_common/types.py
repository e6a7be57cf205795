"""Common types spoken by storage, the broker and the coordinators alike."""

from __future__ import annotations

# A partition named by topic and index, Kafka's TopicPartition.
TopicPartition = tuple[str, int]
