"""Partition reassignment (KIP-455) as Kafka's ZooKeeper-mode controller drives it: the decisions.

A partition being moved carries its full replica set RS plus the replicas being added (AR) and
removed (RR), in ``/brokers/topics/<t>`` and in LeaderAndIsr:

- start (the API or ``/admin/reassign_partitions`` asks for target TRS): RS = TRS then the original
  replicas not in TRS, AR = TRS - ORS, RR = ORS - TRS; the leader epoch is bumped so every replica
  (the new ones create their log and start fetching) learns the wider set;
- complete, once every target replica is in the ISR: RS = TRS, AR = RR = []; the leader moves if it is
  not in TRS (or not live) to the first live target replica in the ISR; the ISR keeps only target
  replicas; the removed replicas are stopped and their logs deleted;
- cancel: a reassignment back to the original replicas (RS minus AR), which completes at once when
  they are in sync;
- a new target for a partition already being moved keeps the original replicas of the first move.

This module holds only the decisions, as pure functions over an assignment and a partition's leader
and ISR, so they are unit-tested without processes; ``KafkaController`` writes them to ZooKeeper
(batched, fenced) and tells the brokers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

NO_LEADER = -1


def _distinct(replicas: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(replicas))


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replica set, and while it is being moved the replicas being added and removed."""

    replicas: list[int]
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> list[int]:
        """The replicas before the move (what a cancellation goes back to)."""
        return [r for r in self.replicas if r not in self.adding]

    @property
    def target(self) -> list[int]:
        """The replicas after the move."""
        return [r for r in self.replicas if r not in self.removing]

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The assignment while moving from the original replicas to ``target`` (Kafka's ordering: the
        target first, so the preferred leader after the move is the target's first replica)."""
        original = self.original
        full = _distinct([*target, *original])
        return ReplicaAssignment(full, [r for r in full if r not in original], [r for r in full if r not in target])

    def completed(self) -> ReplicaAssignment:
        return ReplicaAssignment(self.target)


def invalid_target(target: Sequence[int], current: ReplicaAssignment, live_brokers: Iterable[int]) -> str | None:
    """Why a target is an INVALID_REPLICA_ASSIGNMENT (a message), or None when it may be started. As Kafka:
    not empty, no duplicates, no negative ids, and every replica it adds is a registered broker (a broker
    already hosting a replica may be down: it catches up when it is back)."""
    if not target:
        return "The replica list is empty."
    if len(set(target)) != len(target):
        return f"The replica list {list(target)} contains duplicates."
    if any(r < 0 for r in target):
        return f"The replica list {list(target)} contains a negative broker id."
    live = set(live_brokers)
    unknown = [r for r in current.reassign_to(target).adding if r not in live]
    if unknown:
        return f"Brokers {unknown} are not registered in the cluster."
    return None


def build_reassignment(current: ReplicaAssignment, target: Sequence[int] | None) -> ReplicaAssignment | None:
    """The assignment a request asks for; ``target`` None cancels. None: a cancellation of a partition
    that is not being moved (NO_REASSIGNMENT_IN_PROGRESS)."""
    if target is None:
        return current.reassign_to(current.original) if current.is_being_reassigned else None
    return current.reassign_to(target)


def is_complete(assignment: ReplicaAssignment, isr: Iterable[int]) -> bool:
    """Every target replica is in sync (a partition not being moved is complete)."""
    return not assignment.is_being_reassigned or set(assignment.target) <= set(isr)


@dataclass(frozen=True, slots=True)
class ReassignmentStep:
    """What the controller writes for one partition: its assignment, leader and ISR (leader epoch bumped),
    and the replicas that leave it (StopReplica with deletion)."""

    assignment: ReplicaAssignment
    leader: int
    isr: list[int]
    removed: list[int]

    @property
    def finished(self) -> bool:
        return not self.assignment.is_being_reassigned


def _leader_for(assignment: ReplicaAssignment, leader: int, isr: list[int], is_live: Callable[[int], bool]) -> int:
    """The current leader while it stays a live in-sync member of the new replica set; else the first live
    target replica in the ISR (Kafka's reassignment election), else any live member in the ISR."""
    if leader in assignment.replicas and leader in isr and is_live(leader):
        return leader
    for r in [*assignment.target, *assignment.replicas]:
        if r in isr and is_live(r):
            return r
    return NO_LEADER


def next_step(current: ReplicaAssignment, wanted: ReplicaAssignment, leader: int, isr: Sequence[int],
              is_live: Callable[[int], bool]) -> ReassignmentStep | None:
    """The step that takes a partition at ``current`` (with its leader and ISR) towards ``wanted``.

    Completed at once when the target is already in sync; otherwise started (the ISR only loses replicas
    that leave the replica set: min.insync.replicas is never broken by a move itself). None: nothing can
    be written now (completing needs a live in-sync target replica to lead; the move stays as it is)."""
    if is_complete(wanted, isr):
        done = wanted.completed()
        new_isr = [r for r in isr if r in done.replicas]
        new_leader = _leader_for(done, leader, new_isr, is_live)
        if new_leader != NO_LEADER:
            return ReassignmentStep(done, new_leader, new_isr, [r for r in current.replicas if r not in done.replicas])
        if not wanted.is_being_reassigned:
            return None
    new_isr = [r for r in isr if r in wanted.replicas]
    if isr and not new_isr:
        return None  # the move would drop every in-sync replica: never lose the partition's data to it
    new_leader = _leader_for(wanted, leader, new_isr, is_live)
    if new_leader == NO_LEADER and leader != NO_LEADER:
        return None
    # (an offline partition stays offline while it moves: the move waits for a replica to come back)
    return ReassignmentStep(wanted, new_leader, new_isr, [r for r in current.replicas if r not in wanted.replicas])
