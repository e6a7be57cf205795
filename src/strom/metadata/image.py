"""MetadataImage and MetadataDelta: what the broker serves, and what changes it.

As in Kafka's KRaft broker, the broker's view of the cluster is an immutable image, replaced whole
by applying a delta: a reader holding an image (a Metadata answer being built, a worker thread)
always sees one consistent state, and nobody can change it behind the store's back. Applying a
delta copies the top-level topic mappings (O(topics), pointer copies) and the topics it names;
it never walks every partition.

Who produces deltas (the seam a Raft-replicated metadata log would plug into): today the
ZooKeeper-backed store (from UpdateMetadata and config notifications) and the embedded store of a
single node (from its LocalController's writes). A KRaft-style metadata log would be a third
producer: replaying its records into a ``MetadataDelta`` and handing it to
``MetadataStore.publish_delta``; nothing downstream (publisher, replica manager, coordinators)
would change.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.metadata.store import BrokerInfo, TopicMetadata


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """One change of the metadata. ``topics``: created or changed topics, as they are now (leadership
    included); ``deleted``: topics gone, as they were; ``configs_changed``: names among ``topics`` whose
    config overrides changed; ``brokers`` / ``controller_id``: the new ones, or None when unchanged."""

    topics: Mapping[str, TopicMetadata] = field(default_factory=dict)
    deleted: Mapping[str, TopicMetadata] = field(default_factory=dict)
    configs_changed: frozenset[str] = frozenset()
    brokers: Mapping[int, BrokerInfo] | None = None
    controller_id: int | None = None

    @classmethod
    def of(cls, changed: Iterable[TopicMetadata] = (), deleted: Iterable[TopicMetadata] = (),
           configs_changed: Iterable[str] = ()) -> MetadataDelta:
        return cls({t.name: t for t in changed}, {t.name: t for t in deleted}, frozenset(configs_changed))

    @property
    def topic_names(self) -> set[str]:
        """Every topic the delta touches."""
        return set(self.topics) | set(self.deleted)

    def __bool__(self) -> bool:
        return bool(self.topics or self.deleted or self.brokers is not None or self.controller_id is not None)


_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The metadata as the broker serves it; read-only mappings, replaced, never changed."""

    topics: Mapping[str, TopicMetadata] = field(default_factory=lambda: _EMPTY)
    topics_by_id: Mapping[uuid.UUID, TopicMetadata] = field(default_factory=lambda: _EMPTY)
    brokers: Mapping[int, BrokerInfo] = field(default_factory=lambda: _EMPTY)
    controller_id: int = -1

    @classmethod
    def of(cls, topics: Iterable[TopicMetadata], brokers: Iterable[BrokerInfo] = (),
           controller_id: int = -1) -> MetadataImage:
        by_name = {t.name: t for t in topics}
        return cls(MappingProxyType(by_name), MappingProxyType({t.topic_id: t for t in by_name.values()}),
                   MappingProxyType({b.broker_id: b for b in brokers}), controller_id)

    def apply(self, delta: MetadataDelta) -> MetadataImage:
        """The image after ``delta``: the top-level mappings copied once, the delta's topics put in."""
        topics, by_id = self.topics, self.topics_by_id
        if delta.topics or delta.deleted:
            names, ids = dict(topics), dict(by_id)
            for name in delta.deleted:
                gone = names.pop(name, None)
                if gone is not None and ids.get(gone.topic_id) is gone:
                    del ids[gone.topic_id]
            for name, topic in delta.topics.items():
                old = names.get(name)
                if old is not None and ids.get(old.topic_id) is old:
                    del ids[old.topic_id]
                names[name] = topic
                ids[topic.topic_id] = topic
            topics, by_id = MappingProxyType(names), MappingProxyType(ids)
        brokers = self.brokers if delta.brokers is None else MappingProxyType(dict(delta.brokers))
        controller = self.controller_id if delta.controller_id is None else delta.controller_id
        return MetadataImage(topics, by_id, brokers, controller)
