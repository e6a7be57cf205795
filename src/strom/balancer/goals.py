"""Balancing goals, in priority order, after Cruise Control's goal list.

Each goal scores the cluster with a *penalty*: how far a broker (or a partition, for rack
awareness) sits outside what the goal allows, 0 when it complies. A goal optimizes by trying
actions (move a replica, swap two replicas, change a preferred leader) that lower its own penalty;
an action is kept only if no goal optimized before it, and no hard goal, sees its penalty rise
on the brokers and partitions the action touches. That is Cruise Control's rule that a goal may
not undo what higher-priority goals achieved, and why the order matters.

Hard goals (rack awareness, replica capacity, disk capacity) always apply, whether or not they
are asked for; a plan that cannot satisfy them says so. Soft goals are best effort.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial

from strom.balancer.model import ClusterModel
from strom.server_common.types import TopicPartition

EPSILON = 1e-9
# At most this many replicas of one broker are tried per step: keeps a step cheap on brokers with
# thousands of replicas (the cheapest candidates come first, so the ones tried are the right ones).
CANDIDATES_PER_BROKER = 400
SWAP_CANDIDATES = 50


@dataclass(frozen=True)
class ReplicaMove:
    tp: TopicPartition
    source: int
    destination: int


@dataclass(frozen=True)
class LeaderMove:
    tp: TopicPartition
    broker: int


Action = tuple[ReplicaMove | LeaderMove, ...]
Accept = Callable[[Action], bool]


def apply(model: ClusterModel, action: Action) -> Callable[[], None]:
    """Apply an action; returns what undoes it exactly (replica order included)."""
    brokers, partitions = touched(model, action)
    versions = {key: model.versions.get(key, 0) for key in (*brokers, *partitions)}
    undo: list[Callable[[], None]] = []
    for step in action:
        if isinstance(step, ReplicaMove):
            model.move_replica(step.tp, step.source, step.destination)
            undo.append(partial(model.move_replica, step.tp, step.destination, step.source))
        else:
            order = list(model.assignment[step.tp])
            model.set_preferred(step.tp, step.broker)
            undo.append(partial(_restore_order, model, step.tp, order))

    def rollback() -> None:
        for u in reversed(undo):
            u()
        model.versions.update(versions)  # undone = never happened, for memoized verdicts too
    return rollback


def _restore_order(model: ClusterModel, tp: TopicPartition, order: list[int]) -> None:
    current = model.assignment[tp]
    model._bump(tp, current[0], order[0])
    if current[0] != order[0]:
        model.leads[current[0]] -= 1
        model.leads[order[0]] += 1
    model.assignment[tp] = order


def touched(model: ClusterModel, action: Action) -> tuple[set[int], set[TopicPartition]]:
    """Brokers and partitions whose penalties an action can change."""
    brokers: set[int] = set()
    partitions: set[TopicPartition] = set()
    for step in action:
        partitions.add(step.tp)
        if isinstance(step, ReplicaMove):
            brokers.update((step.source, step.destination))
        else:
            brokers.update((model.assignment[step.tp][0], step.broker))
    return brokers, partitions


class Goal:
    """One goal: a penalty per broker and/or partition, and a way to lower it."""

    name = ""
    hard = False
    summary = ""

    def prepare(self, model: ClusterModel) -> None:
        """Compute what the goal aims for (averages, limits) before it or a later goal runs."""

    def broker_penalty(self, model: ClusterModel, broker: int) -> float:
        return 0.0

    def partition_penalty(self, model: ClusterModel, tp: TopicPartition) -> float:
        return 0.0

    def penalty(self, model: ClusterModel, brokers: Iterable[int], partitions: Iterable[TopicPartition]) -> float:
        return (sum(self.broker_penalty(model, b) for b in brokers)
                + sum(self.partition_penalty(model, tp) for tp in partitions))

    def no_worse(self, model: ClusterModel, before: dict[object, float], brokers: set[int],
                 partitions: set[TopicPartition]) -> bool:
        """After an action: no touched broker or partition is further outside this goal than before."""
        return (all(self.broker_penalty(model, b) <= before[("b", b)] + EPSILON for b in brokers)
                and all(self.partition_penalty(model, tp) <= before[("p", tp)] + EPSILON for tp in partitions))

    def snapshot(self, model: ClusterModel, brokers: set[int], partitions: set[TopicPartition]) -> dict[object, float]:
        out: dict[object, float] = {("b", b): self.broker_penalty(model, b) for b in brokers}
        out.update({("p", tp): self.partition_penalty(model, tp) for tp in partitions})
        return out

    def optimize(self, model: ClusterModel, accept: Accept) -> None:
        """Lower the penalty with actions `accept` allows (it applies them when it says yes)."""

    def violations(self, model: ClusterModel) -> list[str]:
        """Human-readable reasons the goal is not met (empty when it is)."""
        return []


# -- broker-metric goals ----------------------------------------------------------------------------------
class BrokerMetricGoal(Goal):
    """A goal on one number per broker (replicas, bytes, leaders) with a lower and an upper bound."""

    moves_leadership = False

    def metric(self, model: ClusterModel, broker: int) -> float:
        raise NotImplementedError

    def bounds(self, model: ClusterModel, broker: int) -> tuple[float, float] | None:
        """(lower, upper), or None when the goal has nothing to say about this broker."""
        raise NotImplementedError

    def broker_penalty(self, model: ClusterModel, broker: int) -> float:
        limits = self.bounds(model, broker)
        if limits is None:
            return 0.0
        value = self.metric(model, broker)
        return max(0.0, value - limits[1]) + max(0.0, limits[0] - value)

    def candidates(self, model: ClusterModel, broker: int, excess: float) -> list[TopicPartition]:
        """Replicas of `broker` to try moving, best first: smallest first, moving the fewest bytes."""
        tps = [tp for tp in model.replicas_of[broker] if model.movable(tp, broker)]
        tps.sort(key=lambda tp: (model.size[tp], tp))
        return tps[:CANDIDATES_PER_BROKER]

    def spread(self, model: ClusterModel, brokers: Iterable[int]) -> float:
        """Squared distance of the brokers from the middle of their bounds: when the bounds cannot all
        be met (racks may force some brokers above the average), moves that even brokers out still count."""
        total = 0.0
        for broker in brokers:
            limits = self.bounds(model, broker)
            if limits is not None:
                total += (self.metric(model, broker) - (limits[0] + limits[1]) / 2) ** 2
        return total

    def _steps(self, model: ClusterModel) -> Iterator[Iterator[Action]]:
        """Per broker outside its bounds (worst first), the actions that could bring it back."""
        scored = [(self.broker_penalty(model, b), b) for b in sorted(model.brokers)]
        for penalty, broker in sorted(scored, key=lambda s: (-s[0], s[1])):
            if penalty <= EPSILON:
                break
            limits = self.bounds(model, broker)
            assert limits is not None
            if self.metric(model, broker) > limits[1]:
                yield self._actions_out_of(model, broker)
            else:
                yield self._actions_into(model, broker)

    def _by_metric(self, model: ClusterModel, brokers: Iterable[int], descending: bool = False) -> list[int]:
        sign = -1 if descending else 1
        return sorted(brokers, key=lambda b: (sign * self.metric(model, b), b))

    def _actions_out_of(self, model: ClusterModel, broker: int) -> Iterator[Action]:
        limits = self.bounds(model, broker)
        excess = self.metric(model, broker) - (limits[1] if limits else 0)
        destinations = self._by_metric(model, model.receivers)
        for tp in self.candidates(model, broker, excess):
            for destination in destinations:
                if model.can_receive(tp, destination, broker):
                    yield (ReplicaMove(tp, broker, destination),)

    def _actions_into(self, model: ClusterModel, broker: int) -> Iterator[Action]:
        if broker not in model.receivers:
            return
        # Donors in the receiver's rack first: a move within a rack never upsets rack spread.
        rack = model.rack(broker)
        donors = [b for b in self._by_metric(model, model.receivers, descending=True)
                  if self.metric(model, b) > self.metric(model, broker)]
        donors.sort(key=lambda b: model.rack(b) != rack)  # stable: by metric within each group
        for donor in donors:
            for tp in self.candidates(model, donor, 0):
                if model.can_receive(tp, broker, donor):
                    yield (ReplicaMove(tp, donor, broker),)

    def optimize(self, model: ClusterModel, accept: Accept) -> None:
        judged: dict[Action, tuple[int, ...]] = {}  # actions refused, with the state they were refused in
        for _ in range(20 * len(model.partitions) + 100):
            progressed = False
            for actions in self._steps(model):
                for action in actions:
                    brokers, partitions = touched(model, action)
                    stamp = model.stamp(brokers, partitions)
                    if judged.get(action) == stamp:
                        continue
                    before = (self.penalty(model, brokers, partitions), self.spread(model, brokers))
                    rollback = apply(model, action)
                    after = (self.penalty(model, brokers, partitions), self.spread(model, brokers))
                    rollback()
                    improves = after[0] < before[0] - EPSILON or (
                        after[0] <= before[0] + EPSILON and after[1] < before[1] * (1 - 1e-6) - EPSILON)
                    if improves and accept(action):
                        progressed = True
                        break
                    judged[action] = stamp
                if progressed:
                    break
            if not progressed:
                return

    def violations(self, model: ClusterModel) -> list[str]:
        out = []
        for broker in sorted(model.brokers):
            if self.broker_penalty(model, broker) > EPSILON:
                limits = self.bounds(model, broker)
                assert limits is not None
                out.append(f"broker {broker}: {self.describe(self.metric(model, broker))} outside "
                           f"[{self.describe(limits[0])}, {self.describe(limits[1])}]")
        return out

    def describe(self, value: float) -> str:
        return f"{value:g}"


def _count_bounds(average: float, threshold: float) -> tuple[float, float]:
    """Bounds around an average count: at least floor..ceil of the average (a count cannot be
    closer), widened to ±threshold of it for large counts, where a few replicas do not matter."""
    return (min(math.floor(average), math.ceil(average * (1 - threshold))),
            max(math.ceil(average), math.floor(average * (1 + threshold))))


class ReplicaCapacityGoal(BrokerMetricGoal):
    name, hard = "replica-capacity", True
    summary = "no broker holds more than max.replicas.per.broker replicas"

    def metric(self, model: ClusterModel, broker: int) -> float:
        return len(model.replicas_of[broker])

    def bounds(self, model: ClusterModel, broker: int) -> tuple[float, float] | None:
        limit = model.constraints.max_replicas_per_broker
        return None if limit is None else (0, limit)


class DiskCapacityGoal(BrokerMetricGoal):
    name, hard = "disk-capacity", True
    summary = "no broker's replicas fill more than --disk-threshold of its disk"

    def metric(self, model: ClusterModel, broker: int) -> float:
        return model.bytes_of[broker]

    def bounds(self, model: ClusterModel, broker: int) -> tuple[float, float] | None:
        limit = model.disk_limit(broker)
        return None if limit is None else (0, limit)

    def broker_penalty(self, model: ClusterModel, broker: int) -> float:
        capacity = model.capacity(broker)
        penalty = super().broker_penalty(model, broker)
        return penalty / capacity if capacity else penalty  # a share of the disk, comparable across brokers

    def candidates(self, model: ClusterModel, broker: int, excess: float) -> list[TopicPartition]:
        """Fewest bytes that bring the broker under its limit: the smallest replica at least as big as
        the excess if there is one, else the biggest first (each move then gets closest to the limit)."""
        tps = [tp for tp in model.replicas_of[broker] if model.movable(tp, broker)]
        enough = sorted((tp for tp in tps if model.size[tp] >= excess), key=lambda tp: (model.size[tp], tp))
        rest = sorted((tp for tp in tps if model.size[tp] < excess), key=lambda tp: (-model.size[tp], tp))
        return (enough + rest)[:CANDIDATES_PER_BROKER]

    def _by_metric(self, model: ClusterModel, brokers: Iterable[int], descending: bool = False) -> list[int]:
        def used(b: int) -> float:
            capacity = model.capacity(b)
            return model.bytes_of[b] / capacity if capacity else 0.0
        sign = -1 if descending else 1
        return sorted(brokers, key=lambda b: (sign * used(b), b))

    def describe(self, value: float) -> str:
        return f"{int(value)} bytes"


class ReplicaDistributionGoal(BrokerMetricGoal):
    name = "replica-distribution"
    summary = "every broker holds about the same number of replicas"

    def prepare(self, model: ClusterModel) -> None:
        receivers = model.receivers
        total = sum(len(model.replicas_of[b]) for b in receivers)
        self._bounds = _count_bounds(total / len(receivers), model.constraints.balance_threshold) if receivers else None

    def metric(self, model: ClusterModel, broker: int) -> float:
        return len(model.replicas_of[broker])

    def bounds(self, model: ClusterModel, broker: int) -> tuple[float, float] | None:
        return self._bounds if broker in model.receivers else None


class DiskUsageDistributionGoal(BrokerMetricGoal):
    """Even disk use: the share of each broker's capacity its replicas fill when every receiving
    broker's capacity is known, else plain bytes. When single moves would unbalance replica counts,
    a big replica is swapped with a small one."""

    name = "disk-usage-distribution"
    summary = "every broker's replicas fill about the same share of its disk"

    def prepare(self, model: ClusterModel) -> None:
        receivers = model.receivers
        self._relative = bool(receivers) and all(model.capacity(b) for b in receivers)
        total = sum(model.bytes_of[b] for b in receivers)
        if not receivers or total == 0:
            self._bounds: tuple[float, float] | None = None
            return
        if self._relative:
            average = total / sum(model.capacity(b) or 0 for b in receivers)
        else:
            average = total / len(receivers)
        threshold = model.constraints.balance_threshold
        self._bounds = (average * (1 - threshold), average * (1 + threshold))

    def metric(self, model: ClusterModel, broker: int) -> float:
        capacity = model.capacity(broker)
        return model.bytes_of[broker] / capacity if self._relative and capacity else model.bytes_of[broker]

    def bounds(self, model: ClusterModel, broker: int) -> tuple[float, float] | None:
        return self._bounds if broker in model.receivers else None

    def candidates(self, model: ClusterModel, broker: int, excess: float) -> list[TopicPartition]:
        tps = [tp for tp in model.replicas_of[broker] if model.movable(tp, broker) and model.size[tp] > 0]
        tps.sort(key=lambda tp: (-model.size[tp], tp))  # biggest first: fewest moves for the same bytes
        return tps[:SWAP_CANDIDATES]

    def _actions_out_of(self, model: ClusterModel, broker: int) -> Iterator[Action]:
        yield from super()._actions_out_of(model, broker)
        for other in self._by_metric(model, model.receivers):
            if other != broker:
                yield from self._swaps(model, broker, other)

    def _actions_into(self, model: ClusterModel, broker: int) -> Iterator[Action]:
        yield from super()._actions_into(model, broker)
        for other in self._by_metric(model, model.receivers, descending=True):
            if other != broker:
                yield from self._swaps(model, other, broker)

    def _swaps(self, model: ClusterModel, fuller: int, emptier: int) -> Iterator[Action]:
        """A big replica of `fuller` for a smaller one of `emptier`: counts stay, bytes move. For each
        big replica, the small ones whose difference in size comes closest to half the gap are tried."""
        if fuller not in model.receivers or emptier not in model.receivers:
            return
        gap = self.metric(model, fuller) - self.metric(model, emptier)
        if gap <= 0:
            return
        capacity = model.capacity(fuller) if self._relative else None
        wanted = gap / 2 * (capacity or 1)  # bytes to shift from fuller to emptier
        small = sorted((tp for tp in model.replicas_of[emptier] if model.movable(tp, emptier, fuller)),
                       key=lambda tp: (model.size[tp], tp))
        sizes = [model.size[tp] for tp in small]
        for big in self.candidates(model, fuller, 0)[:SWAP_CANDIDATES]:
            if not model.can_receive(big, emptier, fuller):
                continue
            at = bisect.bisect_left(sizes, model.size[big] - wanted)
            for tp in small[max(0, at - 2):at + 2]:
                if model.size[tp] < model.size[big] and tp != big and model.can_receive(tp, fuller, emptier):
                    yield (ReplicaMove(big, fuller, emptier), ReplicaMove(tp, emptier, fuller))

    def describe(self, value: float) -> str:
        return f"{value * 100:.3g}% of its disk" if self._relative else f"{int(value)} bytes"


class LeaderReplicaDistributionGoal(BrokerMetricGoal):
    """Even leadership through the preferred (first) replica; a preferred leader election at the end
    of the rebalance makes the preferred replicas leaders. No data moves."""

    name = "leader-distribution"
    summary = "every broker is the preferred leader of about the same number of partitions"

    def prepare(self, model: ClusterModel) -> None:
        receivers = model.receivers
        total = sum(model.leads[b] for b in receivers)
        self._bounds = _count_bounds(total / len(receivers), model.constraints.balance_threshold) if receivers else None

    def metric(self, model: ClusterModel, broker: int) -> float:
        return model.leads[broker]

    def bounds(self, model: ClusterModel, broker: int) -> tuple[float, float] | None:
        return self._bounds if broker in model.receivers else None

    def _actions_out_of(self, model: ClusterModel, broker: int) -> Iterator[Action]:
        led = sorted(tp for tp in model.replicas_of[broker]
                     if model.assignment[tp][0] == broker and tp not in model.frozen)
        for tp in led:
            for other in self._by_metric(model, model.assignment[tp][1:]):
                if model.can_lead(tp, other):
                    yield (LeaderMove(tp, other),)

    def _actions_into(self, model: ClusterModel, broker: int) -> Iterator[Action]:
        followed = sorted((tp for tp in model.replicas_of[broker]
                           if model.assignment[tp][0] != broker and tp not in model.frozen
                           and model.can_lead(tp, broker)),
                          key=lambda tp: (-self.metric(model, model.assignment[tp][0]), tp))
        for tp in followed:
            yield (LeaderMove(tp, broker),)


# -- partition goals --------------------------------------------------------------------------------------
class RackAwareGoal(Goal):
    """Replicas of a partition spread over racks: no two in one rack when there are at least as many
    racks as replicas, else as even as the racks allow (Cruise Control's RackAwareDistributionGoal).
    Applies only when every broker has a rack (Kafka's rack-aware placement has the same rule)."""

    name, hard = "rack-aware", True
    summary = "no two replicas of a partition in one rack (as even as the racks allow)"

    def prepare(self, model: ClusterModel) -> None:
        racks = [model.rack(b) for b in model.brokers]
        self._active = all(r is not None for r in racks)
        self._racks = len(set(racks)) if self._active else 0
        self._receiving_racks = {model.rack(b) for b in model.receivers}

    def allows(self, model: ClusterModel, tp: TopicPartition, source: int, destination: int) -> bool:
        """Moving `tp`'s replica from `source` to `destination` leaves its racks no less spread."""
        if not self._active or model.rack(source) == model.rack(destination):
            return True
        replicas = model.assignment[tp]
        limit = self._per_rack_limit(len(replicas))
        counts = Counter(model.rack(b) for b in replicas)
        worse = counts[model.rack(destination)] + 1 > limit
        better = counts[model.rack(source)] > limit
        return better or not worse

    def _per_rack_limit(self, replicas: int) -> int:
        return math.ceil(replicas / self._racks)

    def partition_penalty(self, model: ClusterModel, tp: TopicPartition) -> float:
        if not self._active:
            return 0.0
        replicas = model.assignment[tp]
        limit = self._per_rack_limit(len(replicas))
        counts = Counter(model.rack(b) for b in replicas if b in model.brokers)
        return float(sum(max(0, n - limit) for n in counts.values()))

    def optimize(self, model: ClusterModel, accept: Accept) -> None:
        if not self._active:
            return
        for tp in model.partitions:
            for _ in range(len(model.assignment[tp])):
                if self.partition_penalty(model, tp) <= EPSILON or tp in model.frozen:
                    break
                if not any(accept(action) for action in self._fixes(model, tp)):
                    break

    def _fixes(self, model: ClusterModel, tp: TopicPartition) -> Iterator[Action]:
        replicas = model.assignment[tp]
        limit = self._per_rack_limit(len(replicas))
        counts = Counter(model.rack(b) for b in replicas)
        crowded = [b for b in reversed(replicas)  # followers before the preferred leader
                   if counts[model.rack(b)] > limit and model.movable(tp, b)]
        crowded.sort(key=lambda b: (-len(model.replicas_of[b]), b))
        destinations = sorted((b for b in model.receivers if counts[model.rack(b)] < limit),
                              key=lambda b: (len(model.replicas_of[b]), b))
        for source in crowded:
            for destination in destinations:
                if model.can_receive(tp, destination, source):
                    yield (ReplicaMove(tp, source, destination),)

    def violations(self, model: ClusterModel) -> list[str]:
        bad = [tp for tp in model.partitions if self.partition_penalty(model, tp) > EPSILON]
        return [f"{t}-{p}: replicas {model.assignment[(t, p)]} share a rack" for t, p in bad[:20]] + (
            [f"... and {len(bad) - 20} more partitions"] if len(bad) > 20 else [])


class MinimalMovementGoal(Goal):
    """Move as few bytes as possible: undo every replica move (biggest first) that no goal needs.

    Goals before it already prefer small replicas; this pass catches moves made redundant by later
    ones. A replica moves at most once in a plan (see ClusterModel.movable)."""

    name = "minimal-movement"
    summary = "move the fewest bytes: drop every move no other goal needs"

    def optimize(self, model: ClusterModel, accept: Accept) -> None:
        moves: list[tuple[int, TopicPartition, int, int]] = []
        for tp in model.partitions:
            current, original = model.assignment[tp], model.original[tp]
            added = [b for b in current if b not in original]
            removed = [b for b in original if b not in current]
            moves.extend((model.size[tp], tp, dst, src) for dst, src in zip(added, removed, strict=False))
        for _, tp, dst, src in sorted(moves, key=lambda m: (-m[0], m[1], m[2])):
            if src in model.receivers and src not in model.assignment[tp]:
                accept((ReplicaMove(tp, dst, src),))


GOALS: dict[str, type[Goal]] = {g.name: g for g in (
    RackAwareGoal, ReplicaCapacityGoal, DiskCapacityGoal, ReplicaDistributionGoal, DiskUsageDistributionGoal,
    LeaderReplicaDistributionGoal, MinimalMovementGoal)}
# Cruise Control's class names are accepted as aliases.
ALIASES = {"RackAwareGoal": "rack-aware", "RackAwareDistributionGoal": "rack-aware",
           "ReplicaCapacityGoal": "replica-capacity", "DiskCapacityGoal": "disk-capacity",
           "ReplicaDistributionGoal": "replica-distribution", "DiskUsageDistributionGoal": "disk-usage-distribution",
           "LeaderReplicaDistributionGoal": "leader-distribution", "PreferredLeaderElectionGoal": "leader-distribution"}
DEFAULT_GOALS: tuple[str, ...] = tuple(GOALS)
HARD_GOALS: tuple[str, ...] = tuple(name for name, goal in GOALS.items() if goal.hard)
