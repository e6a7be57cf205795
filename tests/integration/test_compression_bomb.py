"""A compression bomb on a compacted topic: the cleaner compacts it with a bounded buffer.

One ~978 KB gzip batch of 950 zero-filled 1 MiB values, and one ~92 KB zstd batch that
inflates to 2 GiB, each followed by a batch that supersedes half of its keys: the topic must
get compacted, and the broker's peak RSS may grow by far less than the inflated size (a
resource bound with a generous margin, not a timing figure; bench/bench_compression_bomb.py
prints the measured growth)."""

from __future__ import annotations

import pytest

from tests.support.compression_bomb import bomb_broker, run_bomb

pytestmark = pytest.mark.slow

MAX_RSS_GROWTH_MIB = 512


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compression_bomb_is_compacted_with_bounded_memory(tmp_path, codec: str) -> None:  # noqa: ANN001
    broker = bomb_broker(tmp_path).start()
    try:
        result = run_bomb(broker, codec, timeout_s=240)
        assert result.compacted, (result, broker.log_tail(40))
        assert result.peak_rss_growth_mib < MAX_RSS_GROWTH_MIB, result
    finally:
        broker.close()
