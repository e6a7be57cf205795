"""BrokerClient's receive side: answers split or merged at any byte boundary come out whole.

The connection reads into a staging buffer and switches to a frame's own buffer for answers
too big for it; these tests feed bytes the way the event loop does (get_buffer, then
buffer_updated with however many bytes the socket gave) with random cut points.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.client.broker_client import _STAGING_BYTES, _Connection


def _feed(data: bytes, cuts: list[int]) -> tuple[list[bytes], list[Exception | None]]:
    frames: list[bytes] = []
    lost: list[Exception | None] = []
    conn = _Connection(lambda _c, frame: frames.append(bytes(frame)), lambda _c, exc: lost.append(exc))
    pos = 0
    chunks = iter(cuts)
    while pos < len(data):
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data) - pos, max(1, next(chunks, len(data))))
        buf[:n] = data[pos : pos + n]
        buf.release()
        conn.buffer_updated(n)
        pos += n
    return frames, lost


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


sizes = st.one_of(st.integers(4, 100), st.integers(_STAGING_BYTES - 8, _STAGING_BYTES + 8),
                  st.integers(100_000, 300_000))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
@given(st.lists(sizes, min_size=1, max_size=5), st.lists(st.integers(1, 200_000), max_size=12), st.integers(0, 2**32))
def test_frames_survive_any_split(frame_sizes: list[int], cuts: list[int], seed: int) -> None:
    rnd = random.Random(seed)
    payloads = [struct.pack(">i", i) + rnd.randbytes(size - 4) for i, size in enumerate(frame_sizes)]
    frames, lost = _feed(b"".join(_frame(p) for p in payloads), cuts)
    assert frames == payloads
    assert lost == []


def test_byte_at_a_time() -> None:
    payloads = [b"\x00\x00\x00\x01abc", b"\x00\x00\x00\x02" + b"x" * (_STAGING_BYTES + 10), b"\x00\x00\x00\x03"]
    data = b"".join(_frame(p) for p in payloads)
    frames, _ = _feed(data[:200], [1] * 200)  # the first answer and a head of the big one, byte by byte
    assert frames == payloads[:1]
    frames, _ = _feed(data, [1] * 50 + [4096] * 100)
    assert frames == payloads


def test_a_negative_or_huge_size_is_a_broken_stream() -> None:
    for bad in (b"\xff\xff\xff\xff", struct.pack(">i", (1 << 30) + 1), b"\x00\x00\x00\x02ab"):
        conn = _Connection(lambda _c, _f: None, lambda _c, _e: None)
        buf = conn.get_buffer(-1)
        buf[: len(bad)] = bad
        buf.release()
        with pytest.raises(ConnectionError):
            conn.buffer_updated(len(bad))
