"""LoginThrottle: each failure from a host takes the host's next slot; other hosts are not slowed."""

from __future__ import annotations

from strom.security.login_throttle import LoginThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failures_from_one_host_queue_and_other_hosts_do_not_wait_for_them() -> None:
    clock = Clock()
    throttle = LoginThrottle(100, clock)
    assert [round(throttle.failure_delay("10.0.0.1"), 3) for _ in range(5)] == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert round(throttle.failure_delay("10.0.0.2"), 3) == 0.1
    clock.now += 10  # the queue has drained: back to one delay
    assert round(throttle.failure_delay("10.0.0.1"), 3) == 0.1
    assert throttle.failed_total == 7


def test_zero_delay_only_counts() -> None:
    throttle = LoginThrottle(0, Clock())
    assert throttle.failure_delay("h") == 0.0 and throttle.failed_total == 1


def test_many_hosts_are_forgotten_once_their_slot_has_passed() -> None:
    clock = Clock()
    throttle = LoginThrottle(10, clock)
    for i in range(10_001):
        throttle.failure_delay(f"h{i}")
    clock.now += 1
    throttle.failure_delay("late")
    assert len(throttle._next_slot) <= 10_000


def test_a_host_with_a_full_queue_is_turned_away_until_it_drains() -> None:
    clock = Clock()
    throttle = LoginThrottle(100, clock)
    for _ in range(49):
        throttle.failure_delay("flood")
    assert not throttle.blocked("flood")
    throttle.failure_delay("flood")
    assert throttle.blocked("flood") and not throttle.blocked("other")
    throttle.refused()
    assert throttle.failed_total == 51
    clock.now += 0.2  # two slots drained
    assert not throttle.blocked("flood")
