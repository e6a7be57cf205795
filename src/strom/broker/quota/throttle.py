"""Throttling a request (KIP-219): the answer goes out at once carrying `throttle_time_ms`, and the
connection is then muted for that long (see network.py).

Most responses are message objects that get the field before encoding; Produce and Fetch are encoded by
hand on the hot path, so their own modules stamp the field into the encoded bytes, which costs nothing
unless the client was throttled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Generator
from typing import Any

from strom.broker.handlers import fetch, produce
from strom.broker.request import DeferredResponse, RawResponse, RequestContext
from strom.protocol.api_keys import ApiKey

# Never charged to a request quota: inter-broker requests (Kafka's ClusterAction) and the SASL exchange.
REQUEST_QUOTA_EXEMPT = frozenset({
    ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.WRITE_TXN_MARKERS, ApiKey.ALTER_PARTITION, 17, 36,  # SaslHandshake, SaslAuthenticate
})


def is_replica_fetch(version: int, request: Any) -> bool:
    """A follower's fetch: never throttled."""
    return fetch.replica_id_of(version, request) >= 0


class HandlerTimer:
    """Awaits a handler coroutine and adds up the time the loop spends running its steps, leaving out
    the time it waits (a long-polling fetch, an acks=all produce): with one event loop, a client's share of
    request-handling time is the share of loop time its requests take."""

    __slots__ = ("_coro", "nanos")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.nanos = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        clock = time.perf_counter_ns
        while True:
            started = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.nanos += clock() - started
                return stop.value
            except BaseException:
                self.nanos += clock() - started
                raise
            self.nanos += clock() - started
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and the like go on into the handler
                value, error = None, exc


def with_throttle_time(ctx: RequestContext, response: Any) -> Any:
    """The response carrying ctx.throttle_time_ms, wherever its API keeps the field."""
    ms = ctx.throttle_time_ms
    header = ctx.header
    if response is None:
        return None
    if isinstance(response, DeferredResponse):
        if header.api_key != ApiKey.PRODUCE:
            return response
        stamped: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        version = header.api_version

        def done(ready: asyncio.Future[bytes]) -> None:
            if stamped.done():
                return
            if ready.cancelled():
                stamped.cancel()
            elif ready.exception() is not None:
                stamped.set_exception(ready.exception())  # type: ignore[arg-type]
            else:
                stamped.set_result(produce.with_throttle_time(version, ready.result(), ms))

        response.ready.add_done_callback(done)
        response.ready = stamped
        return response
    if isinstance(response, RawResponse):
        return fetch.with_throttle_time(response, ms, header.api_version) if header.api_key == ApiKey.FETCH \
            else response
    if isinstance(response, bytes | bytearray):
        return produce.with_throttle_time(header.api_version, response, ms) if header.api_key == ApiKey.PRODUCE \
            else response
    field = type(response).fields.get("throttle_time_ms") if hasattr(type(response), "fields") else None
    if field is not None and field.for_version_q(header.api_version):
        response.throttle_time_ms = ms
    return response
