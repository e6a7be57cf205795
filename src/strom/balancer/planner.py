"""The planner: goals in priority order over a working copy of the cluster, then the difference as
reassignments. Pure and deterministic: the same input gives the same plan, byte for byte."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from strom.balancer.goals import (
    ALIASES,
    DEFAULT_GOALS,
    GOALS,
    HARD_GOALS,
    Action,
    Goal,
    RackAwareGoal,
    apply,
    touched,
)
from strom.balancer.model import BalancerConstraints, BrokerInfo, ClusterModel, PartitionInfo, PlanError


@dataclass(frozen=True)
class Reassignment:
    """One partition's move: target replicas in preferred order (the preferred leader first)."""

    topic: str
    partition: int
    current_replicas: tuple[int, ...]
    target_replicas: tuple[int, ...]
    size_bytes: int

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.target_replicas if b not in self.current_replicas)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(b for b in self.current_replicas if b not in self.target_replicas)

    @property
    def bytes_to_move(self) -> int:
        return self.size_bytes * len(self.adding)

    @property
    def leader_only(self) -> bool:
        """Same replicas, another preferred leader: nothing to copy."""
        return not self.adding


@dataclass(frozen=True)
class BrokerLoad:
    broker_id: int
    rack: str | None
    replicas: int
    leaders: int
    disk_bytes: int
    disk_capacity_bytes: int | None


@dataclass(frozen=True)
class Plan:
    reassignments: tuple[Reassignment, ...]
    before: tuple[BrokerLoad, ...]
    after: tuple[BrokerLoad, ...]
    goals: tuple[str, ...]
    # Hard goals the plan could not meet, and soft goals it left unmet (best effort), with reasons.
    unsatisfied_hard: tuple[str, ...]
    unsatisfied_soft: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def bytes_to_move(self) -> int:
        return sum(r.bytes_to_move for r in self.reassignments)

    @property
    def replica_moves(self) -> int:
        return sum(len(r.adding) for r in self.reassignments)


def resolve_goals(names: Iterable[str] | None) -> tuple[str, ...]:
    """Goal names (ours or Cruise Control's) → the goals to run, hard goals always included, in
    priority order."""
    if names is None:
        return DEFAULT_GOALS
    wanted = set(HARD_GOALS)
    for raw in names:
        name = ALIASES.get(raw.strip(), raw.strip())
        if name not in GOALS:
            raise PlanError(f"unknown goal '{raw}' (goals: {', '.join(GOALS)})")
        wanted.add(name)
    return tuple(g for g in GOALS if g in wanted)


def plan_rebalance(brokers: Iterable[BrokerInfo], partitions: Iterable[PartitionInfo],
                   constraints: BalancerConstraints | None = None) -> Plan:
    """Compute the reassignments that meet the goals; raises PlanError on input no cluster can have."""
    constraints = constraints or BalancerConstraints()
    if not 0 < constraints.disk_threshold <= 1:
        raise PlanError(f"disk threshold must be in (0, 1], got {constraints.disk_threshold}")
    if constraints.balance_threshold < 0:
        raise PlanError(f"balance threshold must not be negative, got {constraints.balance_threshold}")
    if constraints.max_replicas_per_broker is not None and constraints.max_replicas_per_broker < 0:
        raise PlanError(f"max replicas per broker must not be negative, got {constraints.max_replicas_per_broker}")
    names = resolve_goals(constraints.goals)
    model = ClusterModel(brokers, partitions, constraints)
    before = _loads(model, current_leaders=True)
    goals: list[Goal] = [GOALS[name]() for name in names]
    for goal in goals:
        goal.prepare(model)
    hard = [g for g in goals if g.hard]
    model.placement_rules = [partial(g.allows, model) for g in hard if isinstance(g, RackAwareGoal)]
    optimized: list[Goal] = []
    for goal in goals:
        guards = list(dict.fromkeys(optimized + hard))
        goal.optimize(model, partial(_accept, model, guards=guards))
        optimized.append(goal)
    _check(model)
    reassignments = tuple(
        Reassignment(tp[0], tp[1], model.original[tp], tuple(model.assignment[tp]), model.size[tp])
        for tp in model.partitions if tuple(model.assignment[tp]) != model.original[tp])
    notes = [f"{t}-{p} left alone: {why}" for (t, p), why in sorted(model.frozen.items())]
    unknown_racks = [b for b in sorted(model.brokers) if model.rack(b) is None]
    if "rack-aware" in names and unknown_racks and len(unknown_racks) < len(model.brokers):
        notes.append(f"rack awareness not applied: broker(s) {unknown_racks} have no broker.rack")
    not_receiving = sorted(set(model.brokers) - set(model.receivers))
    if not_receiving:
        notes.append(f"broker(s) {not_receiving} receive nothing (offline log dir or excluded)")
    return Plan(reassignments=reassignments, before=before, after=_loads(model, current_leaders=False),
                goals=names,
                unsatisfied_hard=tuple(f"{g.name}: {v}" for g in goals if g.hard for v in g.violations(model)),
                unsatisfied_soft=tuple(f"{g.name}: {v}" for g in goals if not g.hard for v in g.violations(model)),
                notes=tuple(notes))


def _accept(model: ClusterModel, action: Action, *, guards: list[Goal]) -> bool:
    """Apply `action` if no guard goal gets worse on what it touches; undo it otherwise."""
    for step in action:
        if hasattr(step, "destination") and step.destination not in model.receivers:  # type: ignore[union-attr]
            return False
    brokers, partitions = touched(model, action)
    snapshots = [g.snapshot(model, brokers, partitions) for g in guards]
    rollback = apply(model, action)
    if all(g.no_worse(model, s, brokers, partitions) for g, s in zip(guards, snapshots, strict=True)):
        return True
    rollback()
    return False


def _check(model: ClusterModel) -> None:
    """The invariants every plan keeps, whatever the goals did: same replication factor, no replica
    twice, new replicas only on receiving brokers."""
    for tp in model.partitions:
        target, original = model.assignment[tp], model.original[tp]
        if len(target) != len(original) or len(set(target)) != len(target):
            raise AssertionError(f"planner produced {target} for {tp} (was {list(original)})")
        if any(b not in original and b not in model.receivers for b in target):
            raise AssertionError(f"planner placed a replica of {tp} on a broker that cannot receive: {target}")
        if tp in model.frozen and tuple(target) != original:
            raise AssertionError(f"planner moved {tp}, which it must leave alone")


def _loads(model: ClusterModel, current_leaders: bool) -> tuple[BrokerLoad, ...]:
    if current_leaders:
        leaders = Counter(model.leader[tp] for tp in model.partitions)
    else:
        leaders = Counter(model.assignment[tp][0] for tp in model.partitions)
    return tuple(BrokerLoad(b, model.rack(b), len(model.replicas_of[b]), leaders.get(b, 0), model.bytes_of[b],
                            model.capacity(b)) for b in sorted(model.brokers))
