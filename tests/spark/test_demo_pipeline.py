"""The demo pipeline end to end on a small deterministic input: DLQ, windows, sessions, Parquet."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import strom_reader

COMMITTED = {"kafka.isolation.level": "read_committed"}  # the pipeline writes exactly once

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
WATERMARK_MS = 30_000
GAP_MS = 30_000


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def expected_page_views(events: list[dict[str, Any]], watermark: int) -> Counter[tuple[int, str]]:
    views: Counter[tuple[int, str]] = Counter()
    for e in events:
        start = e["ts"] - e["ts"] % 60_000
        if start + 60_000 <= watermark:
            views[(start, e["page"])] += 1
    return views


def expected_sessions(events: list[dict[str, Any]], watermark: int) -> Counter[tuple[str, int, int]]:
    by_user: dict[str, list[int]] = {}
    for e in events:
        by_user.setdefault(e["user"], []).append(e["ts"])
    out: Counter[tuple[str, int, int]] = Counter()
    for user, stamps in by_user.items():
        stamps.sort()
        start = last = stamps[0]
        n = 0
        for ts in stamps:
            if ts >= last + GAP_MS:
                if last + GAP_MS <= watermark:
                    out[(user, start, n)] += 1
                start, n = ts, 0
            last = max(last, ts)
            n += 1
        if last + GAP_MS <= watermark:
            out[(user, start, n)] += 1
    return out


def test_demo_pipeline_end_to_end(spark: Any, bootstrap: str, workdir: Path) -> None:
    sys.path.insert(0, str(PIPELINES))
    try:
        import click_generator
        import clickstream
    finally:
        sys.path.remove(str(PIPELINES))

    sent = click_generator.run(bootstrap, count=1500, simulate_start_ms=1_700_000_000_000, seed=11, quiet=True)
    valid = [e for _, _, e in sent if e is not None]
    malformed = [v for _, v, e in sent if e is None]
    assert malformed and len(valid) > 1000
    clickstream.ensure_output_topics(bootstrap)

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    queries = clickstream.build_queries(spark, bootstrap, workdir / "out", available_now=True)
    for q in queries:
        q.awaitTermination(240)
        assert q.exception() is None, q.exception()

    watermark = max(e["ts"] for e in valid) - WATERMARK_MS

    dlq = strom_reader(spark, bootstrap, subscribe=clickstream.DLQ_TOPIC, includeHeaders="true", **COMMITTED).collect()
    assert sorted(bytes(r.value) for r in dlq) == sorted(malformed)
    assert all(any(h.key == "error" for h in r.headers) for r in dlq)

    pv_rows = [json.loads(bytes(r.value)) for r in strom_reader(spark, bootstrap, subscribe=clickstream.PAGE_VIEWS_TOPIC, **COMMITTED).collect()]
    got_pv = Counter({(_ms(r["window_start"]), r["page"]): r["views"] for r in pv_rows})
    assert len(pv_rows) == len(got_pv)  # one row per closed (window, page)
    assert got_pv == expected_page_views(valid, watermark)

    s_rows = [json.loads(bytes(r.value)) for r in strom_reader(spark, bootstrap, subscribe=clickstream.SESSIONS_TOPIC, **COMMITTED).collect()]
    got_s = Counter((r["user"], _ms(r["session_start"]), r["clicks"]) for r in s_rows)
    assert got_s == expected_sessions(valid, watermark)

    parquet = spark.read.parquet(str(workdir / "out" / "parquet" / "page-views"))
    assert parquet.count() == len(pv_rows)
    assert parquet.groupBy().sum("views").first()[0] == sum(got_pv.values())
