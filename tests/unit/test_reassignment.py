"""The reassignment decisions (controller/reassignment.py), without processes: Kafka's ordering of the
replica set while moving, validation, cancellation, a new target for a move under way, and the step the
controller writes (leader, ISR, replicas to delete)."""

from __future__ import annotations

from strom.controller.reassignment import (
    NO_LEADER,
    ReplicaAssignment,
    build_reassignment,
    invalid_target,
    is_complete,
    next_step,
)


def live(*brokers: int):  # noqa: ANN201
    return lambda b: b in brokers


def test_a_move_lists_the_target_first_then_the_original_replicas_leaving() -> None:
    moving = ReplicaAssignment([1, 2, 3]).reassign_to([3, 4, 2])
    assert moving == ReplicaAssignment([3, 4, 2, 1], adding=[4], removing=[1])
    assert moving.original == [3, 2, 1] and moving.target == [3, 4, 2]
    assert moving.is_being_reassigned


def test_a_new_target_keeps_the_original_replicas_of_the_first_move() -> None:
    first = ReplicaAssignment([1, 2]).reassign_to([2, 3])
    assert first == ReplicaAssignment([2, 3, 1], adding=[3], removing=[1])
    second = build_reassignment(first, [2, 4])
    assert second == ReplicaAssignment([2, 4, 1], adding=[4], removing=[1])  # 3 is no longer added at all


def test_cancelling_goes_back_to_the_original_replicas_and_needs_a_move_under_way() -> None:
    moving = ReplicaAssignment([1, 2]).reassign_to([2, 3])
    # As in Kafka, the original order is not restored where target and original overlap: [2, 3, 1] minus 3.
    assert build_reassignment(moving, None) == ReplicaAssignment([2, 1])
    assert build_reassignment(ReplicaAssignment([1, 2]).reassign_to([3, 4]), None) == ReplicaAssignment([1, 2])
    assert build_reassignment(ReplicaAssignment([1, 2]), None) is None  # NO_REASSIGNMENT_IN_PROGRESS


def test_invalid_targets_are_refused_as_kafka_refuses_them() -> None:
    current = ReplicaAssignment([1, 2])
    assert invalid_target([], current, [1, 2, 3]) is not None
    assert invalid_target([2, 2], current, [1, 2, 3]) is not None
    assert invalid_target([-1, 2], current, [1, 2, 3]) is not None
    assert "[9]" in (invalid_target([2, 9], current, [1, 2, 3]) or "")  # not registered
    # A replica the partition already has may be on a broker that is down: it catches up when it is back.
    assert invalid_target([2, 1], current, [2, 3]) is None
    assert invalid_target([2, 3], current, [1, 2, 3]) is None


def test_a_move_is_complete_once_every_target_replica_is_in_sync() -> None:
    moving = ReplicaAssignment([1, 2]).reassign_to([2, 3])
    assert not is_complete(moving, [1, 2])
    assert is_complete(moving, [1, 2, 3])
    assert is_complete(ReplicaAssignment([1, 2]), [1])  # not being moved


def test_starting_keeps_leader_and_isr_and_deletes_nothing() -> None:
    current = ReplicaAssignment([1, 2])
    step = next_step(current, current.reassign_to([2, 3]), leader=1, isr=[1, 2], is_live=live(1, 2, 3))
    assert step is not None and not step.finished
    assert (step.assignment.replicas, step.leader, step.isr, step.removed) == ([2, 3, 1], 1, [1, 2], [])


def test_completing_moves_a_leaving_leader_to_the_first_live_in_sync_target_replica() -> None:
    moving = ReplicaAssignment([1, 2]).reassign_to([3, 2])
    step = next_step(moving, moving, leader=1, isr=[1, 2, 3], is_live=live(1, 2, 3))
    assert step is not None and step.finished
    assert (step.assignment.replicas, step.leader, step.isr, step.removed) == ([3, 2], 3, [2, 3], [1])
    dead_three = next_step(moving, moving, leader=1, isr=[1, 2, 3], is_live=live(1, 2))
    assert dead_three is not None and dead_three.leader == 2


def test_completing_keeps_a_leader_that_stays() -> None:
    moving = ReplicaAssignment([1, 2]).reassign_to([1, 3])
    step = next_step(moving, moving, leader=1, isr=[2, 1, 3], is_live=live(1, 2, 3))
    assert step is not None and (step.leader, step.isr, step.removed) == (1, [1, 3], [2])


def test_a_target_already_in_sync_completes_at_once() -> None:
    current = ReplicaAssignment([1, 2, 3])
    step = next_step(current, current.reassign_to([2, 3]), leader=1, isr=[1, 2, 3], is_live=live(1, 2, 3))
    assert step is not None and step.finished
    assert (step.assignment.replicas, step.leader, step.isr, step.removed) == ([2, 3], 2, [2, 3], [1])


def test_changing_the_target_stops_replicas_that_were_being_added() -> None:
    first = ReplicaAssignment([1, 2]).reassign_to([2, 3])
    second = build_reassignment(first, [2, 4])
    assert second is not None
    step = next_step(first, second, leader=1, isr=[1, 2], is_live=live(1, 2, 3, 4))
    assert step is not None and not step.finished and step.removed == [3]


def test_cancelling_deletes_the_added_replicas_and_moves_leadership_back_if_needed() -> None:
    moving = ReplicaAssignment([1, 2]).reassign_to([3, 4])
    back = build_reassignment(moving, None)
    assert back is not None
    step = next_step(moving, back, leader=1, isr=[1, 2, 3], is_live=live(1, 2, 3, 4))
    assert step is not None and step.finished
    assert (step.assignment.replicas, step.leader, step.isr, sorted(step.removed)) == ([1, 2], 1, [1, 2], [3, 4])
    # The leader moved to an added replica meanwhile (the original leader died): it goes back to an original one.
    led_by_three = next_step(moving, back, leader=3, isr=[2, 3], is_live=live(2, 3, 4))
    assert led_by_three is not None and (led_by_three.leader, led_by_three.isr) == (2, [2])


def test_the_isr_loses_only_replicas_that_leave() -> None:
    """min.insync.replicas: a move never shrinks the ISR except by the replicas it removes."""
    moving = ReplicaAssignment([1, 2, 3]).reassign_to([2, 3, 4])
    start = next_step(ReplicaAssignment([1, 2, 3]), moving, leader=1, isr=[1, 2, 3], is_live=live(1, 2, 3, 4))
    assert start is not None and start.isr == [1, 2, 3]
    done = next_step(moving, moving, leader=1, isr=[1, 2, 3, 4], is_live=live(1, 2, 3, 4))
    assert done is not None and done.isr == [2, 3, 4]


def test_nothing_is_written_when_no_in_sync_replica_could_lead() -> None:
    moving = ReplicaAssignment([1, 2]).reassign_to([3, 4])
    back = build_reassignment(moving, None)
    assert back is not None
    # Only added replicas are in sync and the originals are dead: cancelling now would take the partition offline.
    assert next_step(moving, back, leader=3, isr=[3, 4], is_live=live(3, 4)) is None


def test_an_offline_partition_can_start_moving_and_stays_offline() -> None:
    current = ReplicaAssignment([1, 2])
    step = next_step(current, current.reassign_to([2, 3]), leader=NO_LEADER, isr=[1], is_live=live(2, 3))
    assert step is not None and (step.leader, step.isr) == (NO_LEADER, [1])
