"""Embedded metadata store: the topic-id index Fetch v13+ uses stays right; the file keeps its layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strom.metadata.embedded import METADATA_FILE, EmbeddedMetadataStore


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


def _document(store: EmbeddedMetadataStore) -> dict:
    """The file's document as the store's state says it should be (the layout users have on disk)."""
    return {
        "version": 1, "cluster_id": store.cluster_id, "next_producer_id": store._next_producer_id,
        "broker_configs": {}, "entity_configs": {}, "acls": [],
        "topics": [{"name": t.name, "topic_id": str(t.topic_id), "configs": t.configs,
                    "partitions": [{"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                                    "replicas": p.replicas, "isr": p.isr}
                                   for p in sorted(t.partitions.values(), key=lambda p: p.partition)]}
                   for t in store.topics().values()],
    }


def test_metadata_file_keeps_its_layout_and_every_change(tmp_path: Path) -> None:
    """Each change rewrites the file whole; the text is what json.dumps(indent=1) of the document gives."""
    path = tmp_path / METADATA_FILE
    store = EmbeddedMetadataStore(tmp_path, 0)
    assert path.read_text() == json.dumps(_document(store), indent=1)
    store.create_topic("clicks", {0: [0], 1: [0]}, {"cleanup.policy": "compact"})
    store.create_topic('odd "name"\n', {0: [0]}, {"k": "line1\nline2"})  # escapes must not be re-indented
    store.create_topic("views", {0: [0]}, {})
    store.add_partitions("clicks", {2: [0]})
    store.set_topic_configs("views", {"retention.ms": "1000"})
    store.delete_topic('odd "name"\n')
    store.allocate_producer_id_block(1000)
    assert path.read_text() == json.dumps(_document(store), indent=1)
    reopened = EmbeddedMetadataStore(tmp_path, 0)
    assert list(reopened.topics()) == ["clicks", "views"]
    assert sorted(reopened.topic("clicks").partitions) == [0, 1, 2]
    assert reopened.topic("clicks").configs == {"cleanup.policy": "compact"}
    assert reopened.topic("views").configs == {"retention.ms": "1000"}
    assert reopened.topic("views").topic_id == store.topic("views").topic_id
    reopened.create_topic("later", {0: [0]}, {})
    assert path.read_text() == json.dumps(_document(reopened), indent=1)


def test_failed_writes_leave_nothing_of_the_change_for_the_next_write(tmp_path: Path) -> None:
    """A change whose write failed is rolled back; the next successful write must not carry it."""
    store = EmbeddedMetadataStore(tmp_path, 0)
    store.create_topic("kept", {0: [0]}, {})
    blocker = tmp_path / (METADATA_FILE + ".tmp")
    changes = (lambda: store.add_partitions("kept", {1: [0]}),
               lambda: store.set_topic_configs("kept", {"retention.ms": "1"}),
               lambda: store.create_topic("gone", {0: [0]}, {}))
    for i, change in enumerate(changes):
        blocker.mkdir()
        with pytest.raises(OSError):
            change()
        blocker.rmdir()
        store.create_topic(f"other{i}", {0: [0]}, {})  # the next write: of another topic
        reopened = EmbeddedMetadataStore(tmp_path, 0)
        assert list(reopened.topics()) == ["kept"] + [f"other{j}" for j in range(i + 1)]
        assert list(reopened.topic("kept").partitions) == [0]
        assert reopened.topic("kept").configs == {}
    store.create_topic("gone", {0: [0], 1: [0]}, {})  # the name again, with another shape
    assert sorted(EmbeddedMetadataStore(tmp_path, 0).topic("gone").partitions) == [0, 1]


def test_topics_are_read_only_snapshots_for_callers(tmp_path: Path) -> None:
    """Only the store changes its topics (and writes the file, and tells the publisher): a caller holding
    ``topics()`` reads a consistent snapshot that later changes replace rather than edit, and cannot add
    or remove a topic behind the store's back."""
    store = EmbeddedMetadataStore(tmp_path, 0)
    view = store.topics()
    clicks = store.create_topic("clicks", {0: [0]}, {})
    assert "clicks" not in view  # replaced, not edited: a reader iterating it is never disturbed
    view = store.topics()
    assert view["clicks"] is clicks
    with pytest.raises(TypeError):
        view["ghost"] = clicks  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        view.pop("clicks")  # type: ignore[attr-defined]
    store.set_topic_configs("clicks", {"retention.ms": "1"})
    assert view["clicks"].configs == {}  # the topic object a reader holds does not change either
    assert store.topic("clicks").configs == {"retention.ms": "1"}
    assert list(store.topics()) == ["clicks"]
    assert list(EmbeddedMetadataStore(tmp_path, 0).topics()) == ["clicks"]
