"""The broker-wide budget of request bytes received but not yet handled (`queued.max.request.bytes`)."""

from __future__ import annotations

from typing import Protocol


class PoolMember(Protocol):
    """A connection that may wait for the pool; woken when handled requests give memory back."""

    def pool_has_room(self) -> None: ...


class RequestMemoryPool:
    """Broker-wide budget of request bytes received but not yet handled (`queued.max.request.bytes`).

    Like Kafka's non-strict memory pool, an allocation is granted while anything is left, so a
    single frame larger than the whole budget still gets through; once the budget is spent, a
    connection that needs more stops reading its socket until handled requests give bytes back.
    Partly received frames hold memory while waiting for more, so to rule out a standstill where
    every holder waits for the others, one of them at a time (the grower) may go over budget to
    finish its frame.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity if capacity > 0 else None
        self.used = 0
        self.grower: PoolMember | None = None
        # Ordered sets, woken oldest first: connections waiting to start a frame or read, and to grow one.
        self._waiting: dict[PoolMember, None] = {}
        self._grow_waiting: dict[PoolMember, None] = {}

    @property
    def exhausted(self) -> bool:
        return self.capacity is not None and self.used >= self.capacity

    def try_take(self, nbytes: int) -> bool:
        if self.exhausted:
            return False
        self.used += nbytes
        return True

    def try_grow(self, conn: PoolMember, nbytes: int) -> bool:
        """Room for a partly received frame: from the budget, or over it as the single grower."""
        if self.try_take(nbytes):
            return True
        if self.grower is None or self.grower is conn:
            self.grower = conn
            self.used += nbytes
            return True
        return False

    def take(self, nbytes: int) -> None:
        """Charge bytes that were already received (they exist whether or not there is room)."""
        self.used += nbytes

    def give_back(self, nbytes: int) -> None:
        self.used -= nbytes
        if (self._waiting or self._grow_waiting) and not self.exhausted:
            waiting = [*self._grow_waiting, *self._waiting]
            self._waiting.clear()
            self._grow_waiting.clear()
            for conn in waiting:
                conn.pool_has_room()

    def wait_for_room(self, conn: PoolMember, to_grow: bool) -> None:
        (self._grow_waiting if to_grow else self._waiting)[conn] = None

    def frame_done(self, conn: PoolMember) -> None:
        """A partly received frame completed or was dropped: hand the grower's role on."""
        if self.grower is not conn:
            return
        self.grower = None
        if self._grow_waiting:
            nxt = next(iter(self._grow_waiting))
            del self._grow_waiting[nxt]
            nxt.pool_has_room()

    def forget(self, conn: PoolMember) -> None:
        self._waiting.pop(conn, None)
        self._grow_waiting.pop(conn, None)
        self.frame_done(conn)

