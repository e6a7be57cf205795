"""Hierarchical timing wheel, checked against the worked examples of seed 002 (时间轮)."""

from __future__ import annotations

from tests.support.fake_clock import FakeClock

from strom.server_common.timing_wheel import Timer, TimerTask


class Recorder(TimerTask):
    def __init__(self, delay_ms: int, fired: list[tuple[str, int]], name: str, clock: FakeClock) -> None:
        super().__init__(delay_ms)
        self.fired, self.name, self.clock = fired, name, clock

    def run(self) -> None:
        self.fired.append((self.name, self.clock.now))


def make_timer(start: int = 0) -> tuple[Timer, FakeClock, list[tuple[str, int]]]:
    clock = FakeClock(start)
    return Timer(tick_ms=1, wheel_size=20, start_ms=start, clock=clock), clock, []


def step_to(timer: Timer, clock: FakeClock, end: int) -> None:
    """Advance simulated time one millisecond at a time, as a ticking clock would."""
    while clock.now < end:
        clock.now += 1
        timer.advance_clock(clock.now)


def bucket_index(timer: Timer, task: TimerTask) -> tuple[int, int]:
    """(level, slot) of the bucket holding task; level 0 is the 1 ms wheel."""
    assert task.entry is not None and task.entry.bucket is not None
    for level, wheel in enumerate(timer.wheel.levels()):
        for slot, bucket in enumerate(wheel.buckets):
            if bucket is task.entry.bucket:
                return level, slot
    raise AssertionError("task not in any bucket")


def test_first_level_examples_2_8_19_ms() -> None:
    timer, clock, fired = make_timer()
    t2 = Recorder(2, fired, "2ms", clock)
    timer.add(t2)
    assert bucket_index(timer, t2) == (0, 2)
    assert timer.wheel.interval == 20
    assert timer.wheel.overflow_wheel is None  # no upper wheel until needed

    step_to(timer, clock, 1)
    assert fired == []
    step_to(timer, clock, 2)
    assert fired == [("2ms", 2)]

    # At currentTime 2: an 8 ms task lands in slot 10, a 19 ms task reuses slot 1.
    t8 = Recorder(8, fired, "8ms", clock)
    t19 = Recorder(19, fired, "19ms", clock)
    timer.add(t8)
    timer.add(t19)
    assert bucket_index(timer, t8) == (0, 10)
    assert bucket_index(timer, t19) == (0, 1)
    assert t19.entry is not None and t19.entry.bucket is not None
    assert t19.entry.bucket.expiration_ms == 21
    assert timer.size == 2
    assert timer.wheel.overflow_wheel is None

    step_to(timer, clock, 25)
    assert fired == [("2ms", 2), ("8ms", 10), ("19ms", 21)]
    assert timer.size == 0


def test_overflow_wheels_350_and_450_ms_downshift() -> None:
    timer, clock, fired = make_timer()
    t350 = Recorder(350, fired, "350ms", clock)
    timer.add(t350)
    # Level 2 (tick 20 ms, interval 400 ms) created on demand; 350 ms → slot 17.
    l2 = timer.wheel.overflow_wheel
    assert l2 is not None and l2.tick_ms == 20 and l2.interval == 400
    assert bucket_index(timer, t350) == (1, 17)
    assert l2.overflow_wheel is None

    t450 = Recorder(450, fired, "450ms", clock)
    timer.add(t450)
    l3 = l2.overflow_wheel
    assert l3 is not None and l3.tick_ms == 400 and l3.interval == 8000
    assert bucket_index(timer, t450) == (2, 1)
    assert l3.buckets[1].expiration_ms == 400  # slot 1 covers [400, 800)

    # The 350 ms task comes down to the 1 ms wheel when its 20 ms bucket (340) expires.
    step_to(timer, clock, 340)
    assert bucket_index(timer, t350) == (0, 10)
    step_to(timer, clock, 349)
    assert fired == []
    step_to(timer, clock, 350)
    assert fired == [("350ms", 350)]

    # At 400 ms the 450 ms task has 50 ms left → level 2 bucket [440, 460).
    step_to(timer, clock, 399)
    assert bucket_index(timer, t450) == (2, 1)
    step_to(timer, clock, 400)
    level, slot = bucket_index(timer, t450)
    assert level == 1
    assert timer.wheel.levels()[1].buckets[slot].expiration_ms == 440
    # At 440 ms 10 ms remain → level 1 bucket [450, 451).
    step_to(timer, clock, 440)
    assert bucket_index(timer, t450) == (0, 10)
    step_to(timer, clock, 449)
    assert fired == [("350ms", 350)]
    step_to(timer, clock, 450)
    assert fired == [("350ms", 350), ("450ms", 450)]
    assert timer.size == 0


def test_large_clock_jump_fires_everything_in_order() -> None:
    timer, clock, fired = make_timer()
    for delay in (450, 2, 350, 8000, 19):
        timer.add(Recorder(delay, fired, str(delay), clock))
    clock.now = 10_000
    assert timer.advance_clock(clock.now) is True
    assert [name for name, _ in fired] == ["2", "19", "350", "450", "8000"]
    assert timer.size == 0
    assert timer.advance_clock(clock.now) is False


def test_cancel_removes_task() -> None:
    timer, clock, fired = make_timer()
    keep = Recorder(5, fired, "keep", clock)
    drop = Recorder(5, fired, "drop", clock)
    far = Recorder(500, fired, "far", clock)
    for t in (keep, drop, far):
        timer.add(t)
    assert timer.size == 3
    drop.cancel()
    far.cancel()
    assert timer.size == 1
    step_to(timer, clock, 600)
    assert fired == [("keep", 5)]
    drop.cancel()  # cancelling twice is harmless
    assert timer.size == 0


def test_expired_task_runs_immediately_and_zero_delay() -> None:
    timer, clock, fired = make_timer(start=100)
    timer.add(Recorder(0, fired, "now", clock))
    assert fired == [("now", 100)]
    assert timer.size == 0


def test_idle_timer_dial_catches_up() -> None:
    """After a long idle period a short task still lands in the 1 ms wheel."""
    timer, clock, fired = make_timer()
    clock.now = 1_000_000
    t = Recorder(3, fired, "late", clock)
    timer.add(t)
    assert bucket_index(timer, t)[0] == 0
    step_to(timer, clock, 1_000_003)
    assert fired == [("late", 1_000_003)]


def test_schedule_and_next_expiration() -> None:
    timer, clock, fired = make_timer()
    assert timer.next_expiration_ms() is None
    timer.schedule(7, lambda: fired.append(("cb", clock.now)))
    assert timer.next_expiration_ms() == 7
    step_to(timer, clock, 7)
    assert fired == [("cb", 7)]


def test_failing_task_does_not_stop_others() -> None:
    timer, clock, fired = make_timer()
    timer.schedule(1, lambda: 1 / 0)
    timer.add(Recorder(1, fired, "ok", clock))
    step_to(timer, clock, 1)
    assert fired == [("ok", 1)]
