"""Throttle-time stamps on responses, and the handler timer behind the request quota."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

from strom.broker.handlers import fetch, produce
from strom.broker.quota.throttle import HandlerTimer, with_throttle_time
from strom.broker.request import DeferredResponse, RawResponse, RequestContext
from strom.protocol import codec
from strom.protocol.api_keys import ApiKey


def _ctx(api_key: int, version: int, throttle_ms: int) -> RequestContext:
    header = codec.RequestHeader(api_key, version, 7, "c", codec.is_flexible(api_key, version))
    return RequestContext(header, None, "h", None, throttle_ms)  # type: ignore[arg-type]


def _body(framed: bytes, flexible: bool) -> bytes:
    return framed[9:] if flexible else framed[8:]  # size, correlation id, tagged fields


@pytest.mark.parametrize("version", range(3, 11))
def test_produce_stamp_lands_in_the_field(version: int) -> None:
    ctx = _ctx(ApiKey.PRODUCE, version, 1234)
    framed = codec.frame_response(ctx.header, produce.encode_response(
        version, [("t", [produce.PartitionResult(0, 0, 5, -1, 0)])]))
    stamped = with_throttle_time(ctx, framed)
    decoded = ProduceResponse.decode(_body(stamped, ctx.header.flexible), version=version)
    assert decoded.throttle_time_ms == 1234
    assert decoded.responses[0].partition_responses[0].base_offset == 5


def test_deferred_produce_answer_is_stamped_when_ready() -> None:
    async def run() -> bytes:
        ctx = _ctx(ApiKey.PRODUCE, 9, 77)
        ready: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        stamped = with_throttle_time(ctx, DeferredResponse([], ready))
        assert isinstance(stamped, DeferredResponse) and not stamped.ready.done()
        ready.set_result(codec.frame_response(ctx.header, produce.encode_response(9, [("t", [])])))
        return await stamped.ready

    decoded = ProduceResponse.decode(_body(asyncio.run(run()), True), version=9)
    assert decoded.throttle_time_ms == 77


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_stamp_lands_in_the_field(version: int) -> None:
    ctx = _ctx(ApiKey.FETCH, version, 4321)
    raw = fetch._encode(version, 0, 0, [])
    stamped = with_throttle_time(ctx, raw)
    assert isinstance(stamped, RawResponse)
    body = b"".join(p for p in stamped.parts if isinstance(p, bytes))
    decoded = FetchResponse.decode(body, version=version)
    assert decoded.throttle_time_ms == 4321 and decoded.responses == []


def test_message_responses_get_the_field_when_their_version_has_it() -> None:
    response = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1, topics=[])
    assert with_throttle_time(_ctx(ApiKey.METADATA, 9, 55), response).encode(version=9)[:4] == struct.pack(">i", 55)
    # Metadata v0 has no throttle field: it encodes as before.
    before = bytes(MetadataResponse(brokers=[], topics=[]).encode(version=0))
    after = with_throttle_time(_ctx(ApiKey.METADATA, 0, 55), MetadataResponse(brokers=[], topics=[]))
    assert bytes(after.encode(version=0)) == before


def test_handler_timer_passes_results_errors_and_cancellation_through() -> None:
    cleaned: list[str] = []

    async def answer() -> int:
        await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        return 42

    async def fail() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def wait_forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("inner finally")

    async def run() -> None:
        timer = HandlerTimer(answer())
        assert await timer == 42
        assert timer.nanos > 0
        with pytest.raises(ValueError, match="boom"):
            await HandlerTimer(fail())
        task = asyncio.ensure_future(_await(HandlerTimer(wait_forever())))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def _await(timer: HandlerTimer) -> None:
        await timer

    asyncio.run(run())
    assert "inner finally" in cleaned
