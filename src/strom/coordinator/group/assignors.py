"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

The coordinator, not a client, computes each member's target partitions whenever the group
epoch moves (a member joins or leaves, a subscription or a subscribed topic changes). Both
assignors are pure functions of the members' subscriptions, the topics' partition counts and
the previous target assignment, so a restarted coordinator computes the same answer.

- ``uniform`` spreads every subscribed partition as evenly as the subscriptions allow and keeps
  each partition where it was whenever that does not unbalance the group, so a join moves only
  the partitions the new member needs (sticky). When members send a rack id, a partition goes
  preferably to a member in a rack that holds one of its replicas (rack-aware), balance first.
- ``range`` gives each member, per topic, a contiguous range of partitions (members in member
  id order, the first ``partitions % members`` members get one more), as the classic range
  assignor does; members subscribed to the same topics get co-partitioned ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

Assignment = dict[str, set[int]]  # topic name -> partitions


@dataclass(slots=True)
class AssignmentMember:
    """What an assignor knows of one member."""

    member_id: str
    subscribed_topics: frozenset[str]
    previous: Assignment  # the member's target assignment before this run
    rack_id: str | None = None


PartitionRacks = Mapping[tuple[str, int], frozenset[str]]  # racks holding a replica of each partition


class PartitionAssignor(Protocol):
    name: str

    def assign(self, members: Sequence[AssignmentMember], partitions: Mapping[str, int],
               racks: PartitionRacks | None = None) -> dict[str, Assignment]:
        """Target assignment per member id; ``partitions`` is topic -> partition count (existing topics only)."""
        ...


def _empty(members: Sequence[AssignmentMember]) -> dict[str, Assignment]:
    return {m.member_id: {} for m in members}


class UniformAssignor:
    """Balanced and sticky (see the module docstring)."""

    name = "uniform"

    def assign(self, members: Sequence[AssignmentMember], partitions: Mapping[str, int],
               racks: PartitionRacks | None = None) -> dict[str, Assignment]:
        owned: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
        eligible = {m.member_id: m.subscribed_topics for m in members}
        member_rack = {m.member_id: m.rack_id for m in members if m.rack_id}
        replica_racks: PartitionRacks = racks if racks is not None and member_rack else {}

        def local(mid: str, tp: tuple[str, int]) -> bool:
            return mid in member_rack and member_rack[mid] in replica_racks.get(tp, ())

        taken: set[tuple[str, int]] = set()
        # 1. Keep what each member had, while it is still valid (topic subscribed and still that big).
        for m in sorted(members, key=lambda m: m.member_id):
            for topic, parts in m.previous.items():
                if topic not in m.subscribed_topics or topic not in partitions:
                    continue
                for p in parts:
                    if p < partitions[topic] and (topic, p) not in taken:
                        owned[m.member_id].add((topic, p))
                        taken.add((topic, p))
        taken_before_fill = set(taken)
        # 2. Give every unassigned partition to the least loaded member subscribed to its topic.
        for topic in sorted(partitions):
            subscribers = sorted(mid for mid, topics in eligible.items() if topic in topics)
            if not subscribers:
                continue
            for p in range(partitions[topic]):
                tp = (topic, p)
                if tp not in taken:
                    # Least loaded first; among equals, one in a rack holding a replica.
                    target = min(subscribers, key=lambda mid: (len(owned[mid]), not local(mid, tp), mid))
                    owned[target].add(tp)
                    taken.add(tp)
        # 3. Rebalance: move a partition from the most to the least loaded member that may take it,
        #    while that narrows the gap (bounded: each move lowers the sum of squared loads).
        for _ in range(sum(len(v) for v in owned.values()) + 1):
            if not self._move_one(owned, eligible, local):
                break
        # 4. Rack-aware: swap pairs of partitions that are each remote where they are and local where
        #    they would go (loads do not change). Only among partitions that were not kept from before.
        if replica_racks:
            self._swap_for_racks(owned, eligible, local, kept=taken_before_fill)
        out = _empty(members)
        for mid, tps in owned.items():
            for topic, p in tps:
                out[mid].setdefault(topic, set()).add(p)
        return out

    @staticmethod
    def _swap_for_racks(owned: dict[str, set[tuple[str, int]]], eligible: Mapping[str, frozenset[str]],
                        local: Callable[[str, tuple[str, int]], bool], kept: set[tuple[str, int]]) -> None:
        members = sorted(owned)
        for a in members:
            for b in members:
                if a >= b:
                    continue
                a_out = sorted(tp for tp in owned[a] - kept if not local(a, tp) and local(b, tp) and tp[0] in eligible[b])
                b_out = sorted(tp for tp in owned[b] - kept if not local(b, tp) and local(a, tp) and tp[0] in eligible[a])
                for x, y in zip(a_out, b_out, strict=False):
                    owned[a].discard(x)
                    owned[b].add(x)
                    owned[b].discard(y)
                    owned[a].add(y)

    @staticmethod
    def _move_one(owned: dict[str, set[tuple[str, int]]], eligible: Mapping[str, frozenset[str]],
                  local: Callable[[str, tuple[str, int]], bool]) -> bool:
        by_load = sorted(owned, key=lambda mid: (len(owned[mid]), mid))
        for giver in reversed(by_load):
            for taker in by_load:
                if len(owned[giver]) - len(owned[taker]) <= 1:
                    break
                # Prefer moving a partition the giver does not hold locally to a taker that does.
                movable = sorted((tp for tp in owned[giver] if tp[0] in eligible[taker]),
                                 key=lambda tp: (local(taker, tp), not local(giver, tp), tp))
                if movable:
                    tp = movable[-1]
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    return True
        return False


class RangeAssignor:
    """Contiguous ranges per topic (see the module docstring)."""

    name = "range"

    def assign(self, members: Sequence[AssignmentMember], partitions: Mapping[str, int],
               racks: PartitionRacks | None = None) -> dict[str, Assignment]:
        out = _empty(members)
        for topic in sorted(partitions):
            subscribers = sorted(m.member_id for m in members if topic in m.subscribed_topics)
            if not subscribers:
                continue
            count = partitions[topic]
            per, extra = divmod(count, len(subscribers))
            start = 0
            for i, mid in enumerate(subscribers):
                n = per + (1 if i < extra else 0)
                if n:
                    out[mid][topic] = set(range(start, start + n))
                start += n
        return out


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}

# Kafka's class names for the same assignors, accepted in group.consumer.assignors.
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_names(configured: Sequence[str]) -> list[str]:
    """group.consumer.assignors as short names, in order (the first is the default)."""
    names: list[str] = []
    for item in configured:
        name = _CLASS_NAMES.get(item, item)
        if name in ASSIGNORS and name not in names:
            names.append(name)
    return names or ["uniform"]
