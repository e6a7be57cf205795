"""Embedded metadata store: the topic-id index Fetch v13+ uses on every request stays right."""

from __future__ import annotations

from pathlib import Path

from strom.cluster.embedded import EmbeddedMetadataStore


def test_topic_by_id_follows_create_delete_and_recreate(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path, 0)
    first = store.create_topic("clicks", {0: [0]}, {})
    other = store.create_topic("views", {0: [0], 1: [0]}, {})
    assert store.topic_by_id(first.topic_id) is first
    assert store.topic_by_id(other.topic_id) is other
    store.delete_topic("clicks")
    assert store.topic_by_id(first.topic_id) is None
    again = store.create_topic("clicks", {0: [0]}, {})
    assert again.topic_id != first.topic_id
    assert store.topic_by_id(again.topic_id) is again
    assert store.topic_by_id(first.topic_id) is None
    reopened = EmbeddedMetadataStore(tmp_path, 0)
    assert reopened.topic_by_id(again.topic_id).name == "clicks"
