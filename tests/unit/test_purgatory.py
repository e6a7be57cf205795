"""DelayedOperationPurgatory: completion by key, expiry, and the asyncio timer driver."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.fake_clock import FakeClock

from strom.server_common.purgatory import DelayedOperation, DelayedOperationPurgatory, TimerDriver
from strom.server_common.timing_wheel import Timer


class Log:
    """Stand-in for partition logs: bytes available per topic-partition."""

    def __init__(self) -> None:
        self.bytes: dict[tuple[str, int], int] = {}

    def available(self, keys: list[tuple[str, int]]) -> int:
        return sum(self.bytes.get(k, 0) for k in keys)


class DelayedFetch(DelayedOperation):
    def __init__(self, max_wait_ms: int, min_bytes: int, logs: Log, keys: list[tuple[str, int]]) -> None:
        super().__init__(max_wait_ms)
        self.min_bytes, self.logs, self.keys = min_bytes, logs, keys
        self.completions: list[int] = []
        self.expired = False
        self.checks = 0

    def try_complete(self) -> bool:
        self.checks += 1
        if self.logs.available(self.keys) >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions.append(self.logs.available(self.keys))

    def on_expiration(self) -> None:
        self.expired = True


def make() -> tuple[DelayedOperationPurgatory, FakeClock, Log]:
    clock = FakeClock()
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=0, clock=clock)
    return DelayedOperationPurgatory("Fetch", timer), clock, Log()


TP0, TP1, TP2 = ("t", 0), ("t", 1), ("t", 2)


def test_completes_immediately_without_watching() -> None:
    purgatory, _, logs = make()
    logs.bytes[TP0] = 10
    op = DelayedFetch(500, 1, logs, [TP0])
    assert purgatory.try_complete_else_watch(op, [TP0]) is True
    assert op.completions == [10]
    assert purgatory.watched() == 0 and purgatory.delayed() == 0


def test_completion_by_key_check() -> None:
    purgatory, _, logs = make()
    op = DelayedFetch(500, 5, logs, [TP0])
    assert purgatory.try_complete_else_watch(op, [TP0]) is False
    assert purgatory.watched() == 1 and purgatory.delayed() == 1

    logs.bytes[TP0] = 3
    assert purgatory.check_and_complete(TP0) == 0
    assert not op.is_completed
    logs.bytes[TP0] = 6
    assert purgatory.check_and_complete(TP0) == 1
    assert op.is_completed and op.completions == [6] and not op.expired
    # Completed ops leave the watch list and their timer task is cancelled.
    assert purgatory.watched() == 0 and purgatory.delayed() == 0
    assert purgatory.check_and_complete(TP0) == 0
    assert purgatory.check_and_complete(("unknown", 9)) == 0


def test_op_watched_under_several_keys_completes_once() -> None:
    purgatory, clock, logs = make()
    op = DelayedFetch(100, 4, logs, [TP0, TP1, TP2])
    assert purgatory.try_complete_else_watch(op, [TP0, TP1, TP2]) is False
    assert purgatory.watched() == 3 and purgatory.delayed() == 1

    logs.bytes[TP1] = 4
    assert purgatory.check_and_complete(TP1) == 1
    checks = op.checks
    assert purgatory.check_and_complete(TP0) == 0
    assert purgatory.check_and_complete(TP2) == 0
    assert op.checks == checks  # completed ops are not re-tried
    clock.now = 1000
    purgatory.timer.advance_clock(clock.now)
    assert op.completions == [4] and not op.expired
    assert purgatory.watched() == 0


def test_expiry_completes_with_on_expiration() -> None:
    purgatory, clock, logs = make()
    op = DelayedFetch(30, 1, logs, [TP0])
    purgatory.try_complete_else_watch(op, [TP0])
    clock.now = 29
    purgatory.timer.advance_clock(clock.now)
    assert not op.is_completed
    clock.now = 30
    purgatory.timer.advance_clock(clock.now)
    assert op.is_completed and op.expired and op.completions == [0]
    assert purgatory.delayed() == 0
    # Data arriving afterwards does not complete it a second time.
    logs.bytes[TP0] = 100
    assert purgatory.check_and_complete(TP0) == 0
    assert op.completions == [0]


def test_purge_of_expired_ops_from_watch_lists() -> None:
    purgatory, clock, logs = make()
    purgatory.purge_interval = 5
    ops = [DelayedFetch(10, 1, logs, [("idle", i)]) for i in range(4)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [("idle", i), ("shared", 0)])
    clock.now = 10
    purgatory.timer.advance_clock(clock.now)
    assert all(op.expired for op in ops)
    assert purgatory.watched() == 8  # expired ops linger until purged
    assert purgatory.purge_completed() == 8
    assert purgatory.watched() == 0

    # Past purge_interval stale entries, adding a new op triggers the purge itself.
    more = [DelayedFetch(10, 1, logs, [("idle", i)]) for i in range(3)]
    for i, op in enumerate(more):
        purgatory.try_complete_else_watch(op, [("idle", i), ("shared", 0)])
    clock.now = 20
    purgatory.timer.advance_clock(clock.now)
    fresh = DelayedFetch(1000, 1, logs, [TP0])
    purgatory.try_complete_else_watch(fresh, [TP0])
    assert purgatory.watched() == 1


def test_cancel_for_key() -> None:
    purgatory, _, logs = make()
    op = DelayedFetch(100, 1, logs, [TP0])
    purgatory.try_complete_else_watch(op, [TP0])
    assert purgatory.cancel_for_key(TP0) == [op]
    assert purgatory.delayed() == 0 and purgatory.watched() == 0


def test_empty_watch_keys_rejected() -> None:
    purgatory, _, logs = make()
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(DelayedFetch(1, 1, logs, []), [])


# ----------------------------------------------------------------- asyncio driver


class FutureFetch(DelayedFetch):
    def __init__(self, *args: object, future: asyncio.Future[str]) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.future = future

    def on_complete(self) -> None:
        super().on_complete()
        if not self.future.done():
            self.future.set_result("expired" if self.logs.available(self.keys) < self.min_bytes else "data")


def test_driver_expires_long_poll_and_completes_on_append() -> None:
    """Real loop: ordering and outcome only, no duration assertions."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        timer = Timer()
        driver = TimerDriver(timer, loop)
        driver.start()
        purgatory = DelayedOperationPurgatory("Fetch", timer)
        logs = Log()
        order: list[str] = []

        slow = FutureFetch(40, 1, logs, [TP0], future=loop.create_future())
        fast = FutureFetch(5, 1, logs, [TP1], future=loop.create_future())
        fed = FutureFetch(60_000, 1, logs, [TP2], future=loop.create_future())
        for op in (slow, fast, fed):
            assert purgatory.try_complete_else_watch(op, op.keys) is False
        slow.future.add_done_callback(lambda f: order.append(f"slow:{f.result()}"))
        fast.future.add_done_callback(lambda f: order.append(f"fast:{f.result()}"))
        fed.future.add_done_callback(lambda f: order.append(f"fed:{f.result()}"))

        await asyncio.sleep(0)
        logs.bytes[TP2] = 10  # an "append" to TP2
        assert purgatory.check_and_complete(TP2) == 1
        await asyncio.wait_for(asyncio.gather(slow.future, fast.future, fed.future), timeout=10)
        assert slow.expired and fast.expired and not fed.expired
        assert purgatory.delayed() == 0
        driver.stop()
        return order

    order = asyncio.run(main())
    assert order == ["fed:data", "fast:expired", "slow:expired"]


def test_driver_rearms_for_earlier_task_and_zero_delay() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        timer = Timer()
        driver = TimerDriver(timer, loop)
        driver.start()
        done: list[str] = []
        finished = loop.create_future()
        timer.schedule(10_000, lambda: done.append("late"))
        timer.schedule(3, lambda: done.append("early"))
        timer.schedule(0, lambda: done.append("now"))
        assert done == []  # even a due task never runs inside add()
        timer.schedule(6, lambda: finished.set_result(None))
        await asyncio.wait_for(finished, timeout=10)
        driver.stop()
        return done

    assert asyncio.run(main()) == ["now", "early"]


@pytest.mark.parametrize("how", ["completed", "expired"])
def test_a_finished_operation_is_freed_without_the_garbage_collector(how: str) -> None:
    """Cycles between an operation and its timer entry made every delayed op cyclic garbage: long GC pauses."""
    import gc
    import weakref

    purgatory, clock, logs = make()
    op = DelayedFetch(100, 10, logs, [TP0])
    purgatory.try_complete_else_watch(op, [TP0])
    ref = weakref.ref(op)
    del op
    gc.disable()
    try:
        if how == "completed":
            logs.bytes[TP0] = 10
            assert purgatory.check_and_complete(TP0) == 1
        else:
            clock.now = 200
            purgatory.timer.advance_clock(200)
            purgatory.purge_completed()
        assert ref() is None, "a finished delayed operation was left to the cycle collector"
    finally:
        gc.enable()
