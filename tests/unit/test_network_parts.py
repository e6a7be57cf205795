"""The network layer's parts on their own: frames cut out of arbitrary reads, answers written in order."""

from __future__ import annotations

import asyncio
import struct

import pytest

from strom.broker.network.framing import EAGER_FRAME_BYTES, INITIAL_RECEIVE_BUFFER_BYTES, FrameReceiver
from strom.broker.network.memory_pool import RequestMemoryPool
from strom.broker.network.response_queue import FLUSH_BYTES, ResponseQueue


class Sink:
    """Records what a FrameReceiver hands over, as a connection would see it."""

    client_host = "127.0.0.1"

    def __init__(self, pool: RequestMemoryPool | None = None) -> None:
        self.pool = pool
        self.frames: list[bytes] = []
        self.charged: list[int] = []
        self.aborted = False
        self.waiting_for_memory = False

    @property
    def closed(self) -> bool:
        return self.aborted

    def frame_received(self, frame: bytes | bytearray, charged: int) -> None:
        self.frames.append(bytes(frame))
        self.charged.append(charged)

    def wait_for_memory(self, to_grow: bool) -> None:
        self.waiting_for_memory = True
        if self.pool is not None:
            self.pool.wait_for_room(self, to_grow)

    def abort(self) -> None:
        self.aborted = True

    def pool_has_room(self) -> None:
        self.waiting_for_memory = False


def feed(receiver: FrameReceiver, data: bytes, step: int) -> None:
    """Deliver ``data`` as the socket would: at most ``step`` bytes (and at most the offered buffer) per read."""
    pos = 0
    while pos < len(data):
        buf = receiver.get_buffer()
        n = min(step, len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        receiver.buffer_updated(n)
        pos += n


def framed(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


@pytest.mark.parametrize("step", [1, 3, 4096, 1 << 20])
def test_frames_come_out_whole_and_in_order_however_the_bytes_arrive(step: int) -> None:
    bodies = [b"", b"a", b"x" * 100, b"y" * (INITIAL_RECEIVE_BUFFER_BYTES * 3), b"z" * 7,
              b"w" * (EAGER_FRAME_BYTES + 12345)]
    sink = Sink()
    pool = RequestMemoryPool(0)  # no budget: never waits
    receiver = FrameReceiver(sink, pool, max_request=100 * 1024 * 1024)
    feed(receiver, framed(*bodies), step)
    assert sink.frames == bodies
    assert not sink.aborted


def test_a_large_frame_is_charged_to_the_pool_before_it_is_handed_over() -> None:
    sink = Sink()
    pool = RequestMemoryPool(0)
    receiver = FrameReceiver(sink, pool, max_request=100 * 1024 * 1024)
    big = b"b" * (EAGER_FRAME_BYTES * 2)
    feed(receiver, framed(big), 1 << 20)
    assert sink.frames == [big]
    assert sink.charged == [len(big)]  # the connection takes over exactly what the receiver charged
    assert pool.used == len(big)


def test_an_oversized_frame_drops_the_connection_before_anything_is_allocated() -> None:
    sink = Sink()
    receiver = FrameReceiver(sink, RequestMemoryPool(0), max_request=1000)
    feed(receiver, struct.pack(">i", 1001) + b"x" * 10, 4096)
    assert sink.aborted and sink.frames == []


def test_a_spent_pool_stops_a_large_frame_until_memory_comes_back() -> None:
    pool = RequestMemoryPool(1)
    pool.take(1)  # spent
    sink = Sink(pool)
    receiver = FrameReceiver(sink, pool, max_request=100 * 1024 * 1024)
    body = b"q" * (INITIAL_RECEIVE_BUFFER_BYTES * 4)
    data = framed(body)
    feed(receiver, data[:100], 100)
    assert sink.waiting_for_memory and sink.frames == []
    pool.give_back(1)
    assert not sink.waiting_for_memory
    receiver.resume()
    feed(receiver, data[100:], 4096)
    assert sink.frames == [body]


class Wire:
    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []

    async def write(self, chunks: list[bytes]) -> None:
        self.writes.append(list(chunks))


def test_gathered_answers_go_out_in_one_write() -> None:
    async def run() -> Wire:
        wire = Wire()
        answers = ResponseQueue(wire.write, lambda _: None)
        assert not answers.add(b"1", gather=True)
        assert not answers.add(b"2", gather=True)
        await answers.flush()
        assert answers.add(b"3", gather=False)  # not gathered: the caller writes now
        await answers.flush()
        assert answers.add(b"x" * FLUSH_BYTES, gather=True)  # enough gathered
        await answers.flush()
        return wire

    wire = asyncio.run(run())
    assert wire.writes == [[b"1", b"2"], [b"3"], [b"x" * FLUSH_BYTES]]


def test_answers_behind_a_waiting_one_keep_request_order() -> None:
    async def run() -> tuple[Wire, list[bool]]:
        wire = Wire()
        woken: list[bool] = []
        answers = ResponseQueue(wire.write, lambda _: woken.append(True))
        answers.add(b"before", gather=True)
        ready: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        await answers.add_waiting(ready)  # what was gathered goes out first
        assert not answers.add(b"after", gather=True)  # queued behind the waiting answer
        assert answers.waiting == 2 and not answers.head_ready
        await answers.write_waiting(wait=False)  # nothing ready at the head: nothing written
        ready.set_result(b"waited")
        await asyncio.sleep(0)
        assert woken == [True] and answers.head_ready
        await answers.write_waiting(wait=False)
        assert answers.waiting == 0
        return wire, woken

    wire, _ = asyncio.run(run())
    assert wire.writes == [[b"before"], [b"waited", b"after"]]


def test_drain_waits_for_every_queued_answer() -> None:
    async def run() -> Wire:
        wire = Wire()
        answers = ResponseQueue(wire.write, lambda _: None)
        loop = asyncio.get_running_loop()
        first: asyncio.Future[bytes] = loop.create_future()
        await answers.add_waiting(first)
        answers.add(b"second", gather=True)
        loop.call_later(0.01, first.set_result, b"first")
        await answers.drain()
        return wire

    wire = asyncio.run(run())
    assert b"".join(b"".join(w) for w in wire.writes) == b"firstsecond"


def test_every_complete_frame_of_one_read_is_handed_over_at_once() -> None:
    sink = Sink()
    receiver = FrameReceiver(sink, RequestMemoryPool(0), max_request=1000)
    feed(receiver, framed(b"a", b"bb", b"ccc") + struct.pack(">i", 5) + b"dd", 4096)
    assert sink.frames == [b"a", b"bb", b"ccc"]  # the fourth is incomplete: it waits for more bytes
    feed(receiver, b"ddd", 4096)
    assert sink.frames[-1] == b"ddddd"


def test_only_apis_whose_handlers_never_wait_long_are_gathered() -> None:
    """Produce answers at once or defers (acks=all), so pipelined produces share writes; a long-polling Fetch
    or a JoinGroup must never hold earlier answers back."""
    from strom.broker.apis import KafkaApis
    from strom.broker.server import CLUSTER_HANDLER_MODULES, HANDLER_MODULES
    from strom.protocol.api_keys import ApiKey

    apis = KafkaApis()
    for module in HANDLER_MODULES + CLUSTER_HANDLER_MODULES:
        apis.register_module(module)
    assert apis.gathered_apis == {ApiKey.PRODUCE}
